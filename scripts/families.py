"""Architectures beyond the zoo, for checking that fusec holds for a family and not only for the
models it was tuned on (issue 27). scripts/export_zoo.py builds and exports these by name, as it
does the zoo's models and torchvision's classifiers:

    python3 scripts/export_zoo.py --models mistral,segformer,r3d_18 --batch 2 --seq 32 --out /tmp/fam
    python3 scripts/check_exports.py --fusec build/fusec --zoo /tmp/fam --out /tmp/fam-check --device cpu

Every model is small (two layers, hidden 256 for transformers; torchvision's own sizes otherwise)
and built from a config with seeded random weights; nothing is downloaded.

- TEXT: transformers encoders, decoders (Mamba's state-space scan among them) and an encoder-decoder
  (BART, which also takes decoder_input_ids: the same tokens). Inputs input_ids and attention_mask
  [batch, seq], with the last sample's final seq/8 tokens padded (a mask that is not all ones: the
  zoo's is); output last_hidden_state. llama_positions also takes position_ids, from 8000 on: a decoder called
  part-way through a long sequence, whose rotary angles (position x frequency) a half type cannot
  hold (fp16 steps by 4 there: the float32 island's case, docs/cuda_backend.md).
- OTHER: vision and speech transformers and hybrids (VISION: DeiT, BEiT, Swin, MobileViT, LeViT,
  PoolFormer, PVT-v2, FocalNet, YOLOS, DPT, GLPN; AUDIO: HuBERT, WavLM, Whisper's encoder, AST; and
  CLIP's and DINOv2's vision towers, SegFormer, ConvNeXt-V2, wav2vec 2.0, T5's encoder),
  torchvision's segmentation and video models (MViT-V2 and Swin3D among them), and its optical flow
  (RAFT-small: GridSample, three refinement steps on two 128 x 128 frames); and a token tagger
  of torch's own recurrent layers (embedding, a two-layer bidirectional batch-first LSTM or GRU, a
  linear head); one output each.
"""
from __future__ import annotations

import numpy as np

ENCODERS = ("distilbert", "roberta", "albert", "electra", "deberta_v2", "mobilebert", "xlm_roberta",
            "convbert", "squeezebert", "funnel", "mpnet", "big_bird", "xlnet", "modernbert", "roformer", "esm",
            "fnet", "rembert", "megatron_bert", "ibert", "ernie", "xmod", "mra",
            "camembert", "data2vec_text")
DECODERS = ("opt", "qwen2", "qwen3", "mistral", "phi3", "gemma", "gemma2", "gemma3", "gpt_neox", "bloom", "falcon",
            "llama_positions", "gptj", "codegen", "gpt_bigcode", "phi", "stablelm", "olmo2", "granite", "cohere",
            "starcoder2", "mamba", "nemotron", "glm4", "gpt_neo", "mpt", "smollm3", "exaone4", "arcee", "ernie4_5",
            "persimmon", "olmo", "mixtral", "qwen2_moe", "olmoe", "deepseek_v3", "gpt_oss", "helium", "lfm2", "olmo3",
            "apertus", "bitnet", "seed_oss", "mamba2", "falcon_h1", "granitemoe", "phimoe", "qwen3_moe")
MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "granitemoe", "phimoe", "deepseek_v3", "gpt_oss")
# encoder-decoders: input_ids, attention_mask and decoder_input_ids (the same tokens); the decoder's output
SEQ2SEQ = ("bart",)
POSITION_OFFSET = 8000  # llama_positions' first position
TEXT = ENCODERS + DECODERS + SEQ2SEQ
# vision transformers and hybrids of transformers (pixel_values, [batch, 3, px, px])
VISION = ("deit", "beit", "swin", "mobilevit", "levit", "poolformer", "pvt_v2", "focalnet", "yolos", "dpt", "glpn",
          "swinv2", "pvt", "hf_regnet", "bit", "hf_mobilenet_v2", "mobilevitv2", "swiftformer",
          "dinov2_with_registers", "vit_msn", "data2vec_vision", "hiera", "textnet")
# speech encoders: raw audio [batch, samples], or features [batch, mel bins, frames] (Whisper) or
# [batch, frames, mel bins] (AST)
AUDIO = ("hubert", "wavlm", "whisper_encoder", "ast", "unispeech", "data2vec_audio")
OTHER = VISION + AUDIO + ("clip_vision", "dinov2", "segformer", "convnextv2", "wav2vec2", "t5_encoder",
         "deeplabv3_mobilenet_v3_large", "fcn_resnet50", "lraspp_mobilenet_v3_large", "r3d_18", "r2plus1d_18",
         "mc3_18", "s3d", "mvit_v2_s", "swin3d_t", "raft_small", "lstm_tagger", "gru_tagger")
FAMILIES = TEXT + OTHER
# the families of 3-D convs over [N, C, frames, H, W] clips (torch peers run them channels_last_3d)
VIDEO = ("r3d_18", "r2plus1d_18", "mc3_18", "s3d", "mvit_v2_s", "swin3d_t")
# the families whose inputs are --seq tokens long
SEQUENCE = TEXT + ("t5_encoder", "lstm_tagger", "gru_tagger")


# the families transformers has no SDPA attention for, or whose SDPA form the exporters cannot write
EAGER = ("deberta_v2", "mobilebert", "bloom", "falcon", "convbert", "squeezebert", "funnel", "mpnet", "big_bird",
         "xlnet", "mamba", "gemma2")


def _small() -> dict:
    return dict(num_hidden_layers=2, num_attention_heads=4, hidden_size=256, intermediate_size=512)


def _text_model(name: str):
    import transformers as tf

    s = _small()
    configs = {
        "distilbert": lambda: (tf.DistilBertConfig(dim=256, hidden_dim=512, n_layers=2, n_heads=4), tf.DistilBertModel),
        "roberta": lambda: (tf.RobertaConfig(**s), tf.RobertaModel),
        "albert": lambda: (tf.AlbertConfig(embedding_size=128, **s), tf.AlbertModel),
        "electra": lambda: (tf.ElectraConfig(embedding_size=128, **s), tf.ElectraModel),
        "deberta_v2": lambda: (tf.DebertaV2Config(**s), tf.DebertaV2Model),
        "mobilebert": lambda: (tf.MobileBertConfig(num_hidden_layers=2), tf.MobileBertModel),
        "xlm_roberta": lambda: (tf.XLMRobertaConfig(**s), tf.XLMRobertaModel),
        "opt": lambda: (tf.OPTConfig(hidden_size=256, ffn_dim=512, num_hidden_layers=2, num_attention_heads=4,
                                     word_embed_proj_dim=256), tf.OPTModel),
        "qwen2": lambda: (tf.Qwen2Config(num_key_value_heads=2, **s), tf.Qwen2Model),
        "qwen3": lambda: (tf.Qwen3Config(num_key_value_heads=2, head_dim=64, **s), tf.Qwen3Model),
        "mistral": lambda: (tf.MistralConfig(num_key_value_heads=2, **s), tf.MistralModel),
        "phi3": lambda: (tf.Phi3Config(num_key_value_heads=4, pad_token_id=0, **s), tf.Phi3Model),
        "gemma": lambda: (tf.GemmaConfig(num_key_value_heads=1, head_dim=64, **s), tf.GemmaModel),
        # tanh soft-capping of the attention scores (and of the final logits, which the base model
        # does not compute); local sliding-window layers alternate with global ones
        # Gemma's own head size (256, past fusec's attention kernels: cuDNN's SDPA runs it), norms on
        # Q and K, local sliding-window layers between global ones
        "gemma3": lambda: (tf.Gemma3TextConfig(num_key_value_heads=2, head_dim=256, sliding_window=64, **s),
                           tf.Gemma3TextModel),
        "gemma2": lambda: (tf.Gemma2Config(num_key_value_heads=2, head_dim=64, sliding_window=64, **s),
                           tf.Gemma2Model),
        "gpt_neox": lambda: (tf.GPTNeoXConfig(**s), tf.GPTNeoXModel),
        "bloom": lambda: (tf.BloomConfig(n_layer=2, n_head=4, hidden_size=256), tf.BloomModel),
        "falcon": lambda: (tf.FalconConfig(num_hidden_layers=2, num_attention_heads=4, hidden_size=256), tf.FalconModel),
        "llama_positions": lambda: (tf.LlamaConfig(num_key_value_heads=2, max_position_embeddings=16384, **s),
                                    tf.LlamaModel),
        "convbert": lambda: (tf.ConvBertConfig(embedding_size=256, **s), tf.ConvBertModel),
        "squeezebert": lambda: (tf.SqueezeBertConfig(embedding_size=256, **s), tf.SqueezeBertModel),
        # the base model pools the sequence 2-fold between its blocks (its output is seq / 2 long)
        "funnel": lambda: (tf.FunnelConfig(block_sizes=[1, 1], d_model=256, n_head=4, d_head=64, d_inner=512),
                           tf.FunnelBaseModel),
        "mpnet": lambda: (tf.MPNetConfig(**s), tf.MPNetModel),
        "big_bird": lambda: (tf.BigBirdConfig(attention_type="original_full", **s), tf.BigBirdModel),
        "xlnet": lambda: (tf.XLNetConfig(n_layer=2, n_head=4, d_model=256, d_inner=512), tf.XLNetModel),
        # rotary on the first rotary_dim of each head, pairs interleaved (rotate_every_two)
        "gptj": lambda: (tf.GPTJConfig(n_layer=2, n_head=4, n_embd=256, rotary_dim=32), tf.GPTJModel),
        "codegen": lambda: (tf.CodeGenConfig(n_layer=2, n_head=4, n_embd=256, rotary_dim=32), tf.CodeGenModel),
        "gpt_bigcode": lambda: (tf.GPTBigCodeConfig(n_layer=2, n_head=4, n_embd=256, multi_query=True),
                                tf.GPTBigCodeModel),
        # attention and MLP in parallel on one LayerNorm; rotary on half of each head
        "phi": lambda: (tf.PhiConfig(partial_rotary_factor=0.5, **s), tf.PhiModel),
        "stablelm": lambda: (tf.StableLmConfig(partial_rotary_factor=0.25, num_key_value_heads=2, **s),
                             tf.StableLmModel),
        # RMSNorm on q and k across the heads, after the projections
        "olmo2": lambda: (tf.Olmo2Config(num_key_value_heads=2, **s), tf.Olmo2Model),
        "granite": lambda: (tf.GraniteConfig(num_key_value_heads=2, embedding_multiplier=12.0, attention_multiplier=0.1,
                                             residual_multiplier=0.22, **s), tf.GraniteModel),
        "cohere": lambda: (tf.CohereConfig(num_key_value_heads=2, **s), tf.CohereModel),
        "starcoder2": lambda: (tf.Starcoder2Config(num_key_value_heads=2, bos_token_id=0, eos_token_id=0, **s),
                               tf.Starcoder2Model),
        # a selective state-space scan (transformers' PyTorch path: a loop over the tokens), no attention
        "mamba": lambda: (tf.MambaConfig(hidden_size=256, num_hidden_layers=2, state_size=16), tf.MambaModel),
        # alternating global and local (sliding-window) attention, GeGLU, no biases
        "modernbert": lambda: (tf.ModernBertConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                                   num_attention_heads=4, global_attn_every_n_layers=2,
                                                   local_attention=64), tf.ModernBertModel),
        # squared-ReLU MLP, LayerNorm with a (1 + weight) scale, rotary on half of each head
        "nemotron": lambda: (tf.NemotronConfig(num_key_value_heads=2, **s), tf.NemotronModel),
        "glm4": lambda: (tf.Glm4Config(num_key_value_heads=2, head_dim=64, **s), tf.Glm4Model),
        # rotary position embeddings in a BERT-like encoder (interleaved pairs)
        "roformer": lambda: (tf.RoFormerConfig(embedding_size=256, **s), tf.RoFormerModel),
        # a protein language model: rotary, pre-LayerNorm, a 33-token vocabulary
        "esm": lambda: (tf.EsmConfig(vocab_size=33, pad_token_id=1, mask_token_id=32, position_embedding_type="rotary",
                                     token_dropout=False, **s), tf.EsmModel),
        # local (windowed) and global attention layers, no scaling of the scores
        "gpt_neo": lambda: (tf.GPTNeoConfig(num_layers=2, num_heads=4, hidden_size=256, window_size=64,
                                            attention_types=[[["global", "local"], 1]]), tf.GPTNeoModel),
        # ALiBi: a per-head linear bias on the scores instead of position embeddings
        "mpt": lambda: (tf.MptConfig(d_model=256, n_heads=4, n_layers=2, expansion_ratio=2), tf.MptModel),
        # no rotary on every fourth layer
        "smollm3": lambda: (tf.SmolLM3Config(num_key_value_heads=2, **s), tf.SmolLM3Model),
        "exaone4": lambda: (tf.Exaone4Config(num_key_value_heads=2, **s), tf.Exaone4Model),
        # squared-ReLU MLP without a gate
        "arcee": lambda: (tf.ArceeConfig(num_key_value_heads=2, **s), tf.ArceeModel),
        "ernie4_5": lambda: (tf.Ernie4_5Config(num_key_value_heads=2, **s), tf.Ernie4_5Model),
        # LayerNorms on Q and K per head, rotary on half of each head
        "persimmon": lambda: (tf.PersimmonConfig(**s), tf.PersimmonModel),
        "olmo": lambda: (tf.OlmoConfig(num_key_value_heads=2, **s), tf.OlmoModel),
        # Fourier mixing (a 2-D DFT over sequence and hidden) instead of attention
        "fnet": lambda: (tf.FNetConfig(hidden_size=256, num_hidden_layers=2, intermediate_size=512), tf.FNetModel),
        "rembert": lambda: (tf.RemBertConfig(input_embedding_size=128, output_embedding_size=256, **s), tf.RemBertModel),
        "megatron_bert": lambda: (tf.MegatronBertConfig(**s), tf.MegatronBertModel),
        "ibert": lambda: (tf.IBertConfig(**s), tf.IBertModel),
        "ernie": lambda: (tf.ErnieConfig(**s), tf.ErnieModel),
        # a language-specific adapter per layer (one picked by a constant language id)
        "xmod": lambda: (tf.XmodConfig(languages=["en_XX"], default_language="en_XX", **s), tf.XmodModel),
        # multi-resolution approximate attention
        "mra": lambda: (tf.MraConfig(**s), tf.MraModel),
        "camembert": lambda: (tf.CamembertConfig(**s), tf.CamembertModel),
        "data2vec_text": lambda: (tf.Data2VecTextConfig(**s), tf.Data2VecTextModel),
        # mixtures of experts: a router's top-k picks experts per token
        "mixtral": lambda: (tf.MixtralConfig(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, **s),
                            tf.MixtralModel),
        "qwen2_moe": lambda: (tf.Qwen2MoeConfig(num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                                                moe_intermediate_size=128, shared_expert_intermediate_size=256, **s),
                              tf.Qwen2MoeModel),
        "qwen3_moe": lambda: (tf.Qwen3MoeConfig(num_key_value_heads=2, head_dim=64, num_experts=4, num_experts_per_tok=2,
                                                moe_intermediate_size=128, **s), tf.Qwen3MoeModel),
        "olmoe": lambda: (tf.OlmoeConfig(num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, **s),
                          tf.OlmoeModel),
        "granitemoe": lambda: (tf.GraniteMoeConfig(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                                                   **s), tf.GraniteMoeModel),
        "phimoe": lambda: (tf.PhimoeConfig(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, **s),
                           tf.PhimoeModel),
        # multi-head latent attention (low-rank K/V, a rotary part of each head), shared and routed experts
        "deepseek_v3": lambda: (tf.DeepseekV3Config(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                                    hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
                                                    n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
                                                    first_k_dense_replace=1, q_lora_rank=96, kv_lora_rank=64,
                                                    qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32),
                                tf.DeepseekV3Model),
        # attention sinks, sliding-window layers, experts with a clamped SwiGLU
        "gpt_oss": lambda: (tf.GptOssConfig(num_key_value_heads=2, head_dim=64, num_local_experts=4,
                                            num_experts_per_tok=2, sliding_window=64, **s), tf.GptOssModel),
        "helium": lambda: (tf.HeliumConfig(num_key_value_heads=2, head_dim=64, **s), tf.HeliumModel),
        # short gated convolutions between attention layers
        "lfm2": lambda: (tf.Lfm2Config(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=256,
                                       intermediate_size=512, layer_types=["conv", "full_attention"]), tf.Lfm2Model),
        "olmo3": lambda: (tf.Olmo3Config(num_key_value_heads=2, sliding_window=64, **s), tf.Olmo3Model),
        # xIELU activation, QK norms
        "apertus": lambda: (tf.ApertusConfig(num_key_value_heads=2, **s), tf.ApertusModel),
        "bitnet": lambda: (tf.BitNetConfig(num_key_value_heads=2, **s), tf.BitNetModel),
        "seed_oss": lambda: (tf.SeedOssConfig(num_key_value_heads=2, head_dim=64, **s), tf.SeedOssModel),
        "mamba2": lambda: (tf.Mamba2Config(hidden_size=256, num_hidden_layers=2, num_heads=8, head_dim=64, state_size=16,
                                           n_groups=1, chunk_size=32), tf.Mamba2Model),
        "falcon_h1": lambda: (tf.FalconH1Config(num_key_value_heads=2, mamba_d_ssm=256, mamba_n_heads=8, mamba_d_head=32,
                                                mamba_d_state=16, mamba_chunk_size=32, **s), tf.FalconH1Model),
        "bart": lambda: (tf.BartConfig(encoder_layers=2, decoder_layers=2, d_model=256, encoder_attention_heads=4,
                                       decoder_attention_heads=4, encoder_ffn_dim=512, decoder_ffn_dim=512), tf.BartModel),
    }
    cfg, cls = configs[name]()
    # SDPA where transformers has it for the family (what a user gets), else its eager attention.
    # Some transformers versions refuse SDPA for a family (the GPU machine's, for GPT-J): eager there.
    cfg._attn_implementation = "eager" if name in EAGER else "sdpa"
    # Mixtures of experts: transformers' default loops over the experts a batch picked (histc, data-dependent
    # shapes, which neither exporter writes); "batched_mm" gathers each token's top-k experts' weights and
    # multiplies batched, a static graph both exporters take.
    if name in MOE:
        cfg._experts_implementation = "batched_mm"
    try:
        return cfg, cls(cfg)
    except ValueError as e:
        if "scaled_dot_product_attention" not in str(e):
            raise
        cfg._attn_implementation = "eager"
        return cfg, cls(cfg)


def _wrap(model, key: str | None, kwargs: tuple[str, ...], extra: dict | None = None):
    """A module whose forward takes `kwargs` positionally and returns one tensor: `key` of the result."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def pick(self, r):
            if key is None:
                return r
            return r[key] if isinstance(r, dict) else getattr(r, key)

    # Named parameters, one per input: torch.export matches dynamic_shapes to forward's signature.
    if len(kwargs) == 1:
        class One(Wrapped):
            def forward(self, x):
                # an empty name: torchvision's modules, whose one parameter is named x or input
                return self.pick(self.m(**{kwargs[0]: x}, **(extra or {})) if kwargs[0] else self.m(x))
        return One(model)

    if len(kwargs) == 2:
        class Two(Wrapped):
            def forward(self, x, y):
                return self.pick(self.m(**{kwargs[0]: x, kwargs[1]: y}, **(extra or {})))
        return Two(model)

    class Three(Wrapped):
        def forward(self, x, y, z):
            return self.pick(self.m(**{kwargs[0]: x, kwargs[1]: y, kwargs[2]: z}, **(extra or {})))
    return Three(model)


def _vision_model(name: str, s: dict):
    """(model, image size) of a VISION family."""
    import transformers as tf

    four = dict(depths=[1, 1, 1, 1])
    if name == "deit":
        return tf.DeiTModel(tf.DeiTConfig(image_size=96, patch_size=16, **s)), 96
    if name == "beit":  # a relative position bias per layer, added to the scores
        return tf.BeitModel(tf.BeitConfig(image_size=96, patch_size=16, use_relative_position_bias=True, **s)), 96
    if name == "swin":
        return tf.SwinModel(tf.SwinConfig(image_size=128, depths=[1, 1, 2, 1], embed_dim=32, num_heads=[1, 2, 4, 8],
                                          window_size=4)), 128
    if name == "mobilevit":  # convs, and transformers over unfolded patches
        return tf.MobileViTModel(tf.MobileViTConfig(image_size=128)), 128
    if name == "levit":  # attention with a learned bias gathered by relative offsets; BatchNorm'd linears
        return tf.LevitModel(tf.LevitConfig(image_size=128)), 128
    if name == "poolformer":  # AvgPool as the token mixer, GroupNorm
        return tf.PoolFormerModel(tf.PoolFormerConfig(**four)), 128
    if name == "pvt_v2":  # attention over spatially reduced keys, depthwise convs in the MLP
        return tf.PvtV2Model(tf.PvtV2Config(**four)), 128
    if name == "focalnet":  # focal modulation: depthwise convs and gates instead of attention
        return tf.FocalNetModel(tf.FocalNetConfig(embed_dim=32, **four)), 128
    if name == "yolos":  # ViT with detection tokens, interpolated position embeddings
        return tf.YolosModel(tf.YolosConfig(image_size=[96, 96], num_detection_tokens=10, **s)), 96
    if name == "dpt":
        return tf.DPTModel(tf.DPTConfig(image_size=96, patch_size=16, out_indices=[0, 1], **s),
                           add_pooling_layer=False), 96
    if name == "glpn":
        return tf.GLPNModel(tf.GLPNConfig(**four)), 128
    if name == "swinv2":  # scaled cosine attention with a learned temperature, a log-spaced position MLP
        return tf.Swinv2Model(tf.Swinv2Config(image_size=128, depths=[1, 1, 2, 1], embed_dim=32, num_heads=[1, 2, 4, 8],
                                              window_size=4)), 128
    if name == "pvt":
        return tf.PvtModel(tf.PvtConfig(image_size=128, depths=[1, 1, 1, 1])), 128
    if name == "hf_regnet":
        return tf.RegNetModel(tf.RegNetConfig(depths=[1, 1, 2, 1], hidden_sizes=[32, 64, 128, 256])), 128
    if name == "bit":  # weight-standardized convs, GroupNorm
        return tf.BitModel(tf.BitConfig(depths=[1, 1, 1, 1], hidden_sizes=[128, 256, 512, 1024])), 128
    if name == "hf_mobilenet_v2":
        return tf.MobileNetV2Model(tf.MobileNetV2Config(image_size=128)), 128
    if name == "mobilevitv2":  # separable linear attention
        return tf.MobileViTV2Model(tf.MobileViTV2Config(image_size=128)), 128
    if name == "swiftformer":  # additive attention
        return tf.SwiftFormerModel(tf.SwiftFormerConfig(depths=[1, 1, 1, 1])), 128
    if name == "dinov2_with_registers":
        return tf.Dinov2WithRegistersModel(tf.Dinov2WithRegistersConfig(
            image_size=112, patch_size=14, num_register_tokens=4,
            **{k: v for k, v in s.items() if k != "intermediate_size"})), 112
    if name == "vit_msn":
        return tf.ViTMSNModel(tf.ViTMSNConfig(image_size=96, patch_size=16, **s)), 96
    if name == "data2vec_vision":
        return tf.Data2VecVisionModel(tf.Data2VecVisionConfig(image_size=96, patch_size=16,
                                                              use_relative_position_bias=True, **s)), 96
    if name == "hiera":  # mask-unit attention, unrolled token order
        return tf.HieraModel(tf.HieraConfig(embed_dim=32, depths=[1, 1, 1, 1], num_heads=[1, 2, 4, 8])), 224
    assert name == "textnet"
    return tf.TextNetModel(tf.TextNetConfig()), 128


def _audio_model(name: str, s: dict, batch: int, gen):
    """(model, features) of an AUDIO family."""
    import torch
    import transformers as tf

    if name == "hubert":
        return tf.HubertModel(tf.HubertConfig(conv_dim=(64,) * 7, **s)), torch.randn(batch, 8000, generator=gen).numpy()
    if name == "wavlm":  # a gated relative position bias in every attention
        return tf.WavLMModel(tf.WavLMConfig(conv_dim=(64,) * 7, **s)), torch.randn(batch, 8000, generator=gen).numpy()
    if name == "whisper_encoder":
        cfg = tf.WhisperConfig(d_model=256, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                               decoder_attention_heads=4, encoder_ffn_dim=512, decoder_ffn_dim=512, num_mel_bins=80,
                               max_source_positions=100)
        return tf.WhisperModel(cfg).encoder, torch.randn(batch, 80, 200, generator=gen).numpy()
    wave = torch.randn(batch, 8000, generator=gen).numpy()
    if name == "unispeech":
        return tf.UniSpeechModel(tf.UniSpeechConfig(conv_dim=(64,) * 7, **s)), wave
    if name == "data2vec_audio":  # a stack of convolutional position embeddings
        return tf.Data2VecAudioModel(tf.Data2VecAudioConfig(conv_dim=(64,) * 7, **s)), wave
    assert name == "ast"
    return tf.ASTModel(tf.ASTConfig(max_length=128, num_mel_bins=64, **s)), torch.randn(batch, 128, 64, generator=gen).numpy()


def build(name: str, batch: int, seq: int, gen):
    """Returns (model on the CPU, {input name: numpy array}, [output names]) for one family."""
    import torch

    if name in TEXT:
        cfg, base = _text_model(name)
        extra = None if name in ENCODERS else {"use_cache": False}
        names = ("input_ids", "attention_mask") + (("position_ids",) if name == "llama_positions" else ()) + \
            (("decoder_input_ids",) if name in SEQ2SEQ else ())
        model = _wrap(base, "last_hidden_state", names, extra)
        ids = torch.randint(1, min(cfg.vocab_size, 1000), (batch, seq), generator=gen, dtype=torch.int64)
        mask = np.ones((batch, seq), dtype=np.int64)
        mask[-1, seq - max(1, seq // 8):] = 0
        inputs = {"input_ids": ids.numpy(), "attention_mask": mask}
        if name == "llama_positions":
            inputs["position_ids"] = np.tile(np.arange(POSITION_OFFSET, POSITION_OFFSET + seq, dtype=np.int64), (batch, 1))
        if name in SEQ2SEQ:
            inputs["decoder_input_ids"] = inputs["input_ids"]
        return model, inputs, ["last_hidden_state"]

    import transformers as tf

    def image(size: int) -> dict:
        return {"pixel_values": torch.randn(batch, 3, size, size, generator=gen).numpy()}

    s = _small()
    if name in VISION:
        model, px = _vision_model(name, s)
        return _wrap(model, "last_hidden_state", ("pixel_values",)), image(px), ["last_hidden_state"]
    if name in AUDIO:
        model, features = _audio_model(name, s, batch, gen)
        key = "input_features" if name == "whisper_encoder" else "input_values"
        return _wrap(model, "last_hidden_state", (key,)), {key: features}, ["last_hidden_state"]
    if name == "clip_vision":
        cfg = tf.CLIPVisionConfig(image_size=224, patch_size=32, **s)
        return _wrap(tf.CLIPVisionModel(cfg), "pooler_output", ("pixel_values",)), image(224), ["pooled"]
    if name == "dinov2":
        cfg = tf.Dinov2Config(image_size=112, patch_size=14, **{k: v for k, v in s.items() if k != "intermediate_size"})
        return _wrap(tf.Dinov2Model(cfg), "last_hidden_state", ("pixel_values",)), image(112), ["last_hidden_state"]
    if name == "segformer":
        cfg = tf.SegformerConfig(depths=[1, 1, 1, 1])
        return _wrap(tf.SegformerModel(cfg), "last_hidden_state", ("pixel_values",)), image(128), ["last_hidden_state"]
    if name == "convnextv2":
        cfg = tf.ConvNextV2Config(depths=[1, 1, 2, 1], hidden_sizes=[32, 64, 128, 256])
        return _wrap(tf.ConvNextV2Model(cfg), "pooler_output", ("pixel_values",)), image(128), ["pooled"]
    if name == "wav2vec2":
        cfg = tf.Wav2Vec2Config(conv_dim=(64,) * 7, **s)
        audio = {"input_values": torch.randn(batch, 8000, generator=gen).numpy()}
        return _wrap(tf.Wav2Vec2Model(cfg), "last_hidden_state", ("input_values",)), audio, ["last_hidden_state"]
    if name == "t5_encoder":
        cfg = tf.T5Config(num_layers=2, d_model=256, num_heads=4, d_ff=512, d_kv=64)
        ids = {"input_ids": torch.randint(1, 1000, (batch, seq), generator=gen, dtype=torch.int64).numpy()}
        return _wrap(tf.T5EncoderModel(cfg), "last_hidden_state", ("input_ids",)), ids, ["last_hidden_state"]

    import torchvision

    if name in ("lstm_tagger", "gru_tagger"):
        cell = getattr(torch.nn, name.split("_")[0].upper())

        class Tagger(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = torch.nn.Embedding(1000, 64)
                self.rnn = cell(64, 96, num_layers=2, batch_first=True, bidirectional=True)
                self.head = torch.nn.Linear(192, 10)

            def forward(self, input_ids):
                return self.head(self.rnn(self.embed(input_ids))[0])

        ids = {"input_ids": torch.randint(0, 1000, (batch, seq), generator=gen, dtype=torch.int64).numpy()}
        return Tagger(), ids, ["logits"]
    if name == "raft_small":
        raft = torchvision.models.optical_flow.raft_small(weights=None)

        class LastFlow(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, image1, image2):
                return self.m(image1, image2, num_flow_updates=3)[-1]

        frames = {k: torch.randn(batch, 3, 128, 128, generator=gen).numpy() for k in ("image1", "image2")}
        return LastFlow(raft), frames, ["flow"]
    if name in VIDEO:
        # S3D pools frames 8-fold before its (2, 7, 7) average: it needs 16 frames of 224 px; MViT-V2's
        # position embeddings are sized for 16 frames of 224 px.
        t, px = (16, 224) if name in ("s3d", "mvit_v2_s") else (8, 112)
        clip = {"video": torch.randn(batch, 3, t, px, px, generator=gen).numpy()}
        return getattr(torchvision.models.video, name)(weights=None), clip, ["logits"]
    seg = getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None)
    return _wrap(seg, "out", ("",)), {"input": torch.randn(batch, 3, 224, 224, generator=gen).numpy()}, ["out"]

"""Architectures beyond the zoo, for checking that fusec holds for a family and not only for the
models it was tuned on (issue 27). scripts/export_zoo.py builds and exports these by name, as it
does the zoo's models and torchvision's classifiers:

    python3 scripts/export_zoo.py --models mistral,segformer,r3d_18 --batch 2 --seq 32 --out /tmp/fam
    python3 scripts/check_exports.py --fusec build/fusec --zoo /tmp/fam --out /tmp/fam-check --device cpu

Every model is small (two layers, hidden 256 for transformers; torchvision's own sizes otherwise)
and built from a config with seeded random weights; nothing is downloaded.

- TEXT: transformers encoders and decoders. Inputs input_ids and attention_mask [batch, seq], with
  the last sample's final seq/8 tokens padded (a mask that is not all ones: the zoo's is); output
  last_hidden_state. llama_positions also takes position_ids, from 8000 on: a decoder called
  part-way through a long sequence, whose rotary angles (position x frequency) a half type cannot
  hold (fp16 steps by 4 there: the float32 island's case, docs/cuda_backend.md).
- OTHER: vision and speech transformers (CLIP's and DINOv2's vision towers, SegFormer, ConvNeXt-V2,
  wav2vec 2.0, T5's encoder), torchvision's segmentation and video models, and its optical flow
  (RAFT-small: GridSample, three refinement steps on two 128 x 128 frames); and a token tagger
  of torch's own recurrent layers (embedding, a two-layer bidirectional batch-first LSTM or GRU, a
  linear head); one output each.
"""
from __future__ import annotations

import numpy as np

ENCODERS = ("distilbert", "roberta", "albert", "electra", "deberta_v2", "mobilebert", "xlm_roberta")
DECODERS = ("opt", "qwen2", "qwen3", "mistral", "phi3", "gemma", "gpt_neox", "bloom", "falcon", "llama_positions")
POSITION_OFFSET = 8000  # llama_positions' first position
TEXT = ENCODERS + DECODERS
OTHER = ("clip_vision", "dinov2", "segformer", "convnextv2", "wav2vec2", "t5_encoder",
         "deeplabv3_mobilenet_v3_large", "fcn_resnet50", "lraspp_mobilenet_v3_large", "r3d_18", "r2plus1d_18",
         "mc3_18", "s3d", "raft_small", "lstm_tagger", "gru_tagger")
FAMILIES = TEXT + OTHER
# the families of 3-D convs over [N, C, frames, H, W] clips (torch peers run them channels_last_3d)
VIDEO = ("r3d_18", "r2plus1d_18", "mc3_18", "s3d")
# the families whose inputs are --seq tokens long
SEQUENCE = TEXT + ("t5_encoder", "lstm_tagger", "gru_tagger")


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
        "gpt_neox": lambda: (tf.GPTNeoXConfig(**s), tf.GPTNeoXModel),
        "bloom": lambda: (tf.BloomConfig(n_layer=2, n_head=4, hidden_size=256), tf.BloomModel),
        "falcon": lambda: (tf.FalconConfig(num_hidden_layers=2, num_attention_heads=4, hidden_size=256), tf.FalconModel),
        "llama_positions": lambda: (tf.LlamaConfig(num_key_value_heads=2, max_position_embeddings=16384, **s),
                                    tf.LlamaModel),
    }
    cfg, cls = configs[name]()
    # SDPA where transformers has it for the family (what a user gets), else its eager attention.
    cfg._attn_implementation = "eager" if name in ("deberta_v2", "mobilebert", "bloom", "falcon") else "sdpa"
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


def build(name: str, batch: int, seq: int, gen):
    """Returns (model on the CPU, {input name: numpy array}, [output names]) for one family."""
    import torch

    if name in TEXT:
        cfg, base = _text_model(name)
        extra = None if name in ENCODERS else {"use_cache": False}
        names = ("input_ids", "attention_mask") + (("position_ids",) if name == "llama_positions" else ())
        model = _wrap(base, "last_hidden_state", names, extra)
        ids = torch.randint(1, min(cfg.vocab_size, 1000), (batch, seq), generator=gen, dtype=torch.int64)
        mask = np.ones((batch, seq), dtype=np.int64)
        mask[-1, seq - max(1, seq // 8):] = 0
        inputs = {"input_ids": ids.numpy(), "attention_mask": mask}
        if name == "llama_positions":
            inputs["position_ids"] = np.tile(np.arange(POSITION_OFFSET, POSITION_OFFSET + seq, dtype=np.int64), (batch, 1))
        return model, inputs, ["last_hidden_state"]

    import transformers as tf

    def image(size: int) -> dict:
        return {"pixel_values": torch.randn(batch, 3, size, size, generator=gen).numpy()}

    s = _small()
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
        # S3D pools frames 8-fold before its (2, 7, 7) average: it needs 16 frames of 224 px.
        t, px = (16, 224) if name == "s3d" else (8, 112)
        clip = {"video": torch.randn(batch, 3, t, px, px, generator=gen).numpy()}
        return getattr(torchvision.models.video, name)(weights=None), clip, ["logits"]
    seg = getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None)
    return _wrap(seg, "out", ("",)), {"input": torch.randn(batch, 3, 224, 224, generator=gen).numpy()}, ["out"]

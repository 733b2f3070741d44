#!/usr/bin/env python3
"""Exports small, seeded transformers models of families beyond the zoo (two layers, hidden 256,
random weights from their configs; nothing is downloaded) with torch's default exporter (dynamo),
to check what fusec's optimizer fuses in each:
    python3 scripts/lab/export_hf_families.py OUT_DIR [name ...]
    fusec optimize OUT_DIR/mistral.onnx -o /tmp/m.onnx --batch 2 --explain
Inputs: input_ids and attention_mask [2, 32] (batch 1's last 5 tokens padded); output: the last
hidden state. Names: distilbert roberta albert electra opt qwen2 mistral phi3 gemma (default: all).
Needs torch, transformers and onnxscript."""
import os
import sys
import warnings

import torch
import transformers as tf

BATCH, SEQ = 2, 32
ENCODERS = ("distilbert", "roberta", "albert", "electra")


def families():
    small = dict(num_hidden_layers=2, num_attention_heads=4, hidden_size=256, intermediate_size=512)
    yield "distilbert", tf.DistilBertConfig(dim=256, hidden_dim=512, n_layers=2, n_heads=4), tf.DistilBertModel
    yield "roberta", tf.RobertaConfig(**small), tf.RobertaModel
    yield "albert", tf.AlbertConfig(embedding_size=128, **small), tf.AlbertModel
    yield "electra", tf.ElectraConfig(embedding_size=128, **small), tf.ElectraModel
    yield "opt", tf.OPTConfig(hidden_size=256, ffn_dim=512, num_hidden_layers=2, num_attention_heads=4,
                              word_embed_proj_dim=256), tf.OPTModel
    yield "qwen2", tf.Qwen2Config(num_key_value_heads=2, **small), tf.Qwen2Model
    yield "mistral", tf.MistralConfig(num_key_value_heads=2, **small), tf.MistralModel
    yield "phi3", tf.Phi3Config(num_key_value_heads=4, pad_token_id=0, **small), tf.Phi3Model
    yield "gemma", tf.GemmaConfig(num_key_value_heads=1, head_dim=64, **small), tf.GemmaModel


class LastHidden(torch.nn.Module):
    def __init__(self, name: str, model: torch.nn.Module):
        super().__init__()
        self.name, self.m = name, model

    def forward(self, input_ids, attention_mask):
        extra = {} if self.name in ENCODERS else {"use_cache": False}
        return self.m(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out, want = sys.argv[1], set(sys.argv[2:])
    os.makedirs(out, exist_ok=True)
    warnings.filterwarnings("ignore")
    status = 0
    for name, cfg, cls in families():
        if want and name not in want:
            continue
        torch.manual_seed(0)
        try:
            cfg._attn_implementation = "sdpa"
            model = LastHidden(name, cls(cfg).eval())
            ids = torch.randint(1, 100, (BATCH, SEQ))
            mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
            mask[1, SEQ - 5:] = 0
            torch.onnx.export(model, (ids, mask), os.path.join(out, name + ".onnx"),
                              input_names=["input_ids", "attention_mask"], dynamo=True, external_data=False)
            print(f"{name}: ok", flush=True)
        except Exception as e:  # noqa: BLE001 - report each family and go on
            print(f"{name}: FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())

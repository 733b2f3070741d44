#!/usr/bin/env python3
"""Attention forms beyond the zoo's, through both torch exporters, optimized by fusec and checked
against torch on the CPU: transformers' BART-era bmm attention (XGLM, MVP, TrOCR, FSMT, LED; tiny
random configs), MPT (ALiBi, then a finfo.min fill), ViTDet and SAM's image encoder (decomposed relative positions added to a finer view
of the scores) and timm's CoAtNet (K stored transposed; skipped without timm).

For each export: `fusec optimize --batch 2 --explain` must fuse at least one attention, the count of
fused attentions and the first near-miss are printed, and `fusec run` of the optimized file must
match torch's fp32 output (max |d| / max |ref| <= 1e-5). A failed export (torch's) is reported and
not counted. Needs torch, transformers and onnxscript (dynamo).

    python3 scripts/lab/check_attention_forms.py --fusec build/fusec --work /tmp/fusec-forms
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

import numpy as np
import torch

B, S, VOCAB = 2, 16, 100


def text_models():
    import transformers as T  # noqa: PLC0415

    common = dict(d_model=64, max_position_embeddings=64)
    seq2seq = dict(encoder_ffn_dim=128, decoder_ffn_dim=128, encoder_layers=1, decoder_layers=1,
                   encoder_attention_heads=4, decoder_attention_heads=4, **common)
    return {
        "xglm": (lambda: T.XGLMModel(T.XGLMConfig(vocab_size=VOCAB, ffn_dim=128, num_layers=2, attention_heads=4,
                                                  **common)), False),
        "mvp": (lambda: T.MvpModel(T.MvpConfig(vocab_size=VOCAB, **seq2seq)), True),
        "trocr": (lambda: T.TrOCRForCausalLM(T.TrOCRConfig(vocab_size=VOCAB, decoder_ffn_dim=128, decoder_layers=2,
                                                           decoder_attention_heads=4, **common)), False),
        "fsmt": (lambda: T.FSMTModel(T.FSMTConfig(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, langs=["en", "de"],
                                                  **seq2seq)), True),
        # ALiBi added to the scores, then masked_fill with finfo.min
        "mpt": (lambda: T.MptModel(T.MptConfig(d_model=64, n_heads=4, n_layers=2, vocab_size=VOCAB, max_seq_len=64)),
                False),
        "led": (lambda: T.LEDModel(T.LEDConfig(vocab_size=VOCAB, max_encoder_position_embeddings=64,
                                               max_decoder_position_embeddings=64, attention_window=[16],
                                               **{k: v for k, v in seq2seq.items() if k != "max_position_embeddings"})),
                True),
    }


def vision_models():
    import transformers as T  # noqa: PLC0415

    return {
        "vitdet": lambda: T.VitDetModel(T.VitDetConfig(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2, image_size=64, patch_size=8,
            pretrain_image_size=64, use_relative_position_embeddings=True, window_size=4, window_block_indices=[0])),
        "sam_vision": lambda: T.SamVisionModel(T.SamVisionConfig(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, mlp_dim=128, image_size=64, patch_size=8,
            output_channels=32, window_size=4, global_attn_indexes=[1], use_rel_pos=True)),
    }


class Image(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(pixel_values=x)[0]


class Text(torch.nn.Module):
    def __init__(self, m, seq2seq: bool):
        super().__init__()
        self.m, self.seq2seq = m, seq2seq

    def forward(self, ids, am):
        kw = {"decoder_input_ids": ids} if self.seq2seq else {}
        return self.m(input_ids=ids, attention_mask=am, **kw)[0]


def cases():
    torch.manual_seed(0)
    ids = torch.randint(3, VOCAB, (B, S))
    am = torch.ones(B, S, dtype=torch.long)
    am[1, -3:] = 0
    for name, (make, seq2seq) in text_models().items():
        yield name, Text(make(), seq2seq).eval(), {"ids": ids, "am": am}
    pixels = torch.randn(B, 3, 64, 64)
    for name, make in vision_models().items():
        yield name, Image(make()).eval(), {"x": pixels}
    try:
        import timm  # noqa: PLC0415
    except ImportError:
        print("timm is not installed: CoAtNet skipped")
        return
    yield "coatnet_nano_rw_224", timm.create_model("coatnet_nano_rw_224", num_classes=10).eval(), \
        {"x": torch.randn(B, 3, 224, 224)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fusec", default="build/fusec")
    ap.add_argument("--work", default="/tmp/fusec-forms")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    import onnx  # noqa: PLC0415 (after torch)
    checked = failed = 0
    print("| model | export | attentions fused | first near-miss | max rel vs torch |\n| --- | --- | --- | --- | --- |")
    for name, model, feeds in cases():
        with torch.no_grad():
            ref = model(*feeds.values()).numpy()
        for form in ("legacy", "dynamo"):
            stem = os.path.join(args.work, f"{name}.{form}")
            try:
                torch.onnx.export(model, tuple(feeds.values()), stem + ".onnx", dynamo=form == "dynamo",
                                  input_names=list(feeds), **({"opset_version": 17} if form == "legacy" else {}))
            except Exception as e:  # noqa: BLE001 (torch's exporter: reported, not counted)
                first = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).splitlines()[0][:80]
                print(f"| {name} | {form} | torch's export failed: {first} | | |")
                continue
            for k, v in feeds.items():
                np.save(f"{stem}.{k}.npy", v.numpy())
            opt = subprocess.run([args.fusec, "optimize", stem + ".onnx", "--batch", str(B), "-o", stem + ".opt.onnx",
                                  "--explain"], capture_output=True, text=True)
            lines = opt.stdout.splitlines()
            fused = sum("[fuse_attention]" in ln and "Attention '" in ln and "not fused" not in ln for ln in lines)
            miss = next((ln.split("not fused into Attention: ")[-1][:70] for ln in lines
                         if "[fuse_attention]" in ln and "not fused" in ln), "")
            err = float("inf")
            if opt.returncode == 0:
                names = [i.name for i in onnx.load(stem + ".opt.onnx").graph.input]
                cmd = [args.fusec, "run", stem + ".opt.onnx", "--device", "cpu", "--output-dir", stem + ".out",
                       "--format", "npy"] + [a for n in names for a in ("--input", f"{n}={stem}.{n}.npy")]
                if subprocess.run(cmd, capture_output=True, text=True).returncode == 0:
                    got = np.load(os.path.join(stem + ".out", "output_0.npy"))
                    err = float(np.abs(got - ref).max() / np.abs(ref).max())
            ok = fused > 0 and err <= 1e-5
            checked += 1
            failed += not ok
            print(f"| {name} | {form} | {fused} | {miss} | {err:.1e}{'' if ok else ' FAILED'} |")
    print(f"check_attention_forms: {checked - failed}/{checked} exports fused and equal to torch")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

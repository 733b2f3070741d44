#!/usr/bin/env python3
"""torch.nn's attention as users call it, through both torch exporters, optimized by fusec and
checked against torch on the CPU.

nn.MultiheadAttention called with need_weights left at its default, True (E 64, 4 heads, S 16,
B 2), sequence- and batch-first, without a mask, with a key padding mask and with a causal
attn_mask; and a two-layer nn.TransformerEncoder (need_weights=False inside), sequence- and
batch-first: 16 exports. For each, `fusec optimize` must
fuse the attention (its --explain names an Attention rewrite) and `fusec run` of the optimized file
must match torch's fp32 output (max |d| / max |ref| <= 1e-5). Needs torch and onnxscript (dynamo).

    python3 scripts/lab/check_mha.py --fusec build/fusec --work /tmp/mha
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np
import torch
from torch import nn

S, B, E, H = 16, 2, 64, 4


class Block(nn.Module):
    def __init__(self, batch_first: bool, mask: str):
        super().__init__()
        self.attn = nn.MultiheadAttention(E, H, batch_first=batch_first)
        self.mask = mask

    def forward(self, x, pad):
        kw = {}
        if self.mask == "padding":
            kw["key_padding_mask"] = pad
        if self.mask == "causal":
            kw["attn_mask"] = torch.triu(torch.full((S, S), float("-inf")), 1)
        return self.attn(x, x, x, **kw)[0]


class Encoder(nn.Module):
    def __init__(self, batch_first: bool):
        super().__init__()
        layer = nn.TransformerEncoderLayer(E, H, 2 * E, dropout=0.0, batch_first=batch_first)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x, pad):
        return self.enc(x)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fusec", default="build/fusec")
    ap.add_argument("--work", default="/tmp/fusec-mha")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    torch.manual_seed(0)
    failed = 0
    print("| layout | module (mask) | export | fused | max rel vs torch |\n| --- | --- | --- | --- | --- |")
    cases = [(bf, mask) for bf in (False, True) for mask in ("none", "padding", "causal", "encoder")]
    for batch_first, mask in cases:
        m = (Encoder(batch_first) if mask == "encoder" else Block(batch_first, mask)).eval()
        x = torch.randn(B, S, E) if batch_first else torch.randn(S, B, E)
        pad = torch.zeros(B, S, dtype=torch.bool)
        pad[1, -3:] = True
        with torch.no_grad():
            ref = m(x, pad).numpy()
        for form in ("legacy", "dynamo"):
            stem = os.path.join(args.work, f"mha_{'batch' if batch_first else 'seq'}_{mask}.{form}")
            torch.onnx.export(m, (x, pad), stem + ".onnx", dynamo=form == "dynamo", input_names=["x", "pad"],
                              **({"opset_version": 17} if form == "legacy" else {}))
            np.save(stem + ".x.npy", x.numpy())
            np.save(stem + ".pad.npy", pad.numpy())
            opt = subprocess.run([args.fusec, "optimize", stem + ".onnx", "-o", stem + ".opt.onnx", "--explain"],
                                 capture_output=True, text=True)
            fused = opt.returncode == 0 and "[fuse_attention]" in opt.stdout and "Attention '" in opt.stdout
            import onnx  # noqa: PLC0415 (torch first: it pins the protobuf onnx loads)
            names = [i.name for i in onnx.load(stem + ".opt.onnx").graph.input] if opt.returncode == 0 else []
            cmd = [args.fusec, "run", stem + ".opt.onnx", "--device", "cpu", "--output-dir", stem + ".out",
                   "--format", "npy"] + [a for n in names for a in ("--input", f"{n}={stem}.{n}.npy")]
            run = subprocess.run(cmd, capture_output=True, text=True)
            err = float("inf")
            if run.returncode == 0:
                got = np.load(os.path.join(stem + ".out", "output_0.npy"))
                err = float(np.abs(got - ref).max() / np.abs(ref).max())
            ok = fused and err <= 1e-5
            failed += not ok
            what = "TransformerEncoder" if mask == "encoder" else f"MultiheadAttention ({mask})"
            print(f"| {'batch' if batch_first else 'sequence'}-first | {what} | {form} | "
                  f"{'yes' if fused else 'NO'} | {err:.1e}{'' if ok else ' FAILED'} |")
    print(f"check_mha: {2 * len(cases) - failed}/{2 * len(cases)} exports fused and equal to torch")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

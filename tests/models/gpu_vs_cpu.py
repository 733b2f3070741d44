#!/usr/bin/env python3
"""A model's outputs on the GPU against the CPU reference, as given and optimized.

    gpu_vs_cpu.py --fusec build/fusec --model models/bert_small.onnx --precision fp16 --batch 2

Runs `fusec run` on the same seeded inputs with --device cpu and --device cuda, and compares every
output relative to its magnitude: max|gpu - cpu| / max|cpu| <= 1e-4 at fp32, 1e-3 at tf32, 2e-2 at
fp16/bf16 (whole models accumulate rounding over many layers). Then the same for the model after
`fusec optimize`. Prints one line per variant; exit 1 on any mismatch. Needs a GPU.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

TOL = {"fp32": 1e-4, "tf32": 1e-3, "fp16": 2e-2, "bf16": 2e-2}


def run(fusec, model, out, extra):
    cmd = [fusec, "run", model, "--output-dir", out, "--format", "npy"] + extra
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip().splitlines()[-1:]}")
    placement = [l for l in p.stdout.splitlines() if l.startswith("placement")]
    return sorted(f for f in os.listdir(out) if f.endswith(".npy")), (placement[0] if placement else "")


def compare(fusec, model, precision, batch, tmp, label):
    cpu_dir, gpu_dir = os.path.join(tmp, label + "_cpu"), os.path.join(tmp, label + "_gpu")
    shape = ["--batch", str(batch)] if batch else []
    names, _ = run(fusec, model, cpu_dir, ["--device", "cpu"] + shape)
    _, placement = run(fusec, model, gpu_dir, ["--device", "cuda", "--precision", precision] + shape)
    worst = 0.0
    for n in names:
        a, b = np.load(os.path.join(cpu_dir, n)), np.load(os.path.join(gpu_dir, n))
        if a.shape != b.shape:
            raise RuntimeError(f"{n}: shape {b.shape} on the GPU, {a.shape} on the CPU")
        if a.dtype.kind == "f":
            scale = max(float(np.max(np.abs(a))), 1e-6)
            worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) / scale)
        elif not np.array_equal(a, b):
            worst = float("inf")
    ok = worst <= TOL[precision]
    print(f"  {os.path.basename(model):28} {label:9} {precision}  max rel error {worst:.2e}  {'ok' if ok else 'MISMATCH'}  {placement}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fusec", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--precision", default="fp32", choices=sorted(TOL))
    ap.add_argument("--batch", type=int, default=2)
    a = ap.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        try:
            ok &= compare(a.fusec, a.model, a.precision, a.batch, tmp, "as given")
            opt = os.path.join(tmp, "opt.onnx")
            shape = ["--batch", str(a.batch)] if a.batch else []
            p = subprocess.run([a.fusec, "optimize", a.model, "-o", opt, "--no-check"] + shape, capture_output=True, text=True)
            if p.returncode != 0:
                raise RuntimeError("optimize failed: " + p.stderr.strip())
            ok &= compare(a.fusec, opt, a.precision, a.batch, tmp, "optimized")
        except RuntimeError as e:
            print(f"  {os.path.basename(a.model):28} ERROR {e}")
            ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

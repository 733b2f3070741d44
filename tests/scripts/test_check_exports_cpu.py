#!/usr/bin/env python3
"""scripts/check_exports.py --device cpu on a made-up zoo folder (no torch, no GPU).

    test_check_exports_cpu.py --root REPO --fusec build/fusec

The folder holds shipped models in export_zoo.py's layout, with onnxruntime's outputs standing in
for torch's. Checked: every check passes and the exit status is 0; a reference that is off by 1%
fails that model's fp32 checks, and only those, with exit status 1; the JSON and the Markdown say
which. Exit 0 when all of that holds, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

MODELS = {"mlp_small": 3, "mobilenetv2_small": 2, "bert_small": 2}  # model: batch


def make_zoo(root: str, zoo: str) -> None:
    sys.path.insert(0, os.path.join(root, "tests", "models"))
    from check_models import make_inputs  # the shipped models' inputs, as the onnxruntime check makes them

    for name, batch in MODELS.items():
        src = os.path.join(root, "models", f"{name}.onnx")
        m = onnx.load(src)
        inputs = make_inputs(m, batch, seed=0)
        outs = [o.name for o in m.graph.output]
        got = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(outs, inputs)
        for k, v in inputs.items():
            np.save(os.path.join(zoo, f"{name}.input.{k}.npy"), v)
        for k, v in zip(outs, got):
            np.save(os.path.join(zoo, f"{name}.output.{k}.npy"), v)
        for form in ("legacy", "dynamo"):
            shutil.copy(src, os.path.join(zoo, f"{name}.{form}.onnx"))
        with open(os.path.join(zoo, f"{name}.json"), "w") as f:
            json.dump({"model": name, "batch": batch, "inputs": list(inputs), "outputs": outs}, f)


def check(args, zoo: str, out: str) -> tuple[int, dict, str, str]:
    p = subprocess.run([sys.executable, os.path.join(args.root, "scripts", "check_exports.py"), "--fusec", args.fusec,
                        "--zoo", zoo, "--out", out, "--device", "cpu", "--check", "1"],
                       capture_output=True, text=True, timeout=600)
    with open(os.path.join(out, "check_exports.json")) as f:
        doc = json.load(f)
    with open(os.path.join(out, "check_exports.md")) as f:
        md = f.read()
    return p.returncode, doc, md, p.stdout + p.stderr


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--fusec", required=True)
    args = ap.parse_args()
    problems = []
    with tempfile.TemporaryDirectory(prefix="fusec_check_exports_") as tmp:
        zoo = os.path.join(tmp, "zoo")
        os.makedirs(zoo)
        make_zoo(args.root, zoo)

        rc, doc, md, text = check(args, zoo, os.path.join(tmp, "ok"))
        rows = doc["rows"]
        if rc != 0 or len(rows) != 2 * len(MODELS) or not all(all(r["checks"].values()) for r in rows):
            problems.append(f"every check should pass (exit {rc}):\n{text[-3000:]}")
        if any("bench" in r or "fp16_optimized" in r for r in rows) or doc.get("device") != "cpu":
            problems.append("--device cpu ran a bench or an fp16 run, or did not record the device")
        if "| model | export | fp32 max rel (given / opt) | checks |" not in md:
            problems.append(f"the Markdown lacks the CPU table:\n{md}")

        # A reference 1% off: that model's two fp32 checks fail, in both forms; nothing else does.
        ref = os.path.join(zoo, "mlp_small.output.y.npy")
        np.save(ref, np.load(ref) * 1.01)
        rc, doc, md, text = check(args, zoo, os.path.join(tmp, "bad"))
        failed = sorted((r["model"], r["export"], k) for r in doc["rows"] for k, ok in r["checks"].items() if not ok)
        want = sorted((("mlp_small", f, k) for f in ("legacy", "dynamo") for k in ("fp32_as_given", "fp32_optimized")))
        if rc != 1 or failed != want:
            problems.append(f"a reference 1% off: exit {rc}, failed {failed}, expected exit 1 and {want}")
        if "| mlp_small | legacy |" not in md or "FAILED: fp32_as_given, fp32_optimized" not in md:
            problems.append(f"the Markdown should name the failed checks:\n{md}")
    for p in problems:
        print("FAIL", p)
    print("check_exports_cpu: " + ("ok" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

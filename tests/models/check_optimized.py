#!/usr/bin/env python3
"""Model-level optimization checks on the shipped models (models/*_small.onnx).

For each model, at batch 2:
  1. `fusec optimize MODEL --batch 2 -o OPT --report R` must verify (exit 0) and write a model that
     onnx.checker accepts (it validates the standard-domain nodes);
  2. the op counts the fusion passes promise must hold (EXPECT below);
  3. `fusec run OPT` on seeded inputs must match ONNX Runtime on the ORIGINAL model within
     1e-4 of the output's magnitude (as check_models.py);
  4. `fusec optimize --portable` must write only standard ops; ONNX Runtime must load it and match
     ONNX Runtime on the original within the same tolerance.
Exit 0 when every check passes, 1 otherwise; the last line is a summary.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_models import make_inputs  # noqa: E402

TOL = 1e-4
BATCH = 2


def count(model: onnx.ModelProto, op: str, domain: str = "") -> int:
    return sum(1 for n in model.graph.node if n.op_type == op and n.domain in ((domain,) if domain else ("", "ai.onnx")))


EPILOGUE_OPS = {"Relu", "Clip", "Add", "BatchNormalization", "Sigmoid", "LeakyRelu", "HardSwish", "HardSigmoid", "Mul"}


def unfused_convs(model: onnx.ModelProto) -> list[str]:
    """Standard Convs whose output still feeds an op a FusedConv would have absorbed."""
    readers: dict[str, list[str]] = {}
    for n in model.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n.op_type)
    return [n.name for n in model.graph.node
            if n.op_type == "Conv" and any(r in EPILOGUE_OPS for r in readers.get(n.output[0], []))]


def ops_with(model: onnx.ModelProto, domain: str) -> list[str]:
    return sorted({n.op_type for n in model.graph.node if n.domain == domain})


# What each fusion promise means on each model: (description, check(original, optimized) -> bool).
EXPECT = {
    "resnet50_small": [
        ("no BatchNormalization left", lambda o, m: count(m, "BatchNormalization") == 0),
        ("no Relu left (every Conv(+BN)(+Add)+Relu is one FusedConv)", lambda o, m: count(m, "Relu") == 0),
        ("every residual Add folded into a FusedConv", lambda o, m: count(m, "Add") == 0),
        # Each bottleneck has 3 convs + BN (+Relu); the 4 projection blocks add a downsample conv whose
        # Add goes to one of the two convs feeding it: every conv except those 4 has an epilogue.
        ("every Conv with an epilogue to absorb is a FusedConv", lambda o, m: not unfused_convs(m)),
    ],
    "mobilenetv2_small": [
        ("no BatchNormalization left", lambda o, m: count(m, "BatchNormalization") == 0),
        ("no Clip (ReLU6) left", lambda o, m: count(m, "Clip") == 0),
        ("every residual Add folded into a FusedConv", lambda o, m: count(m, "Add") == 0),
        ("every Conv with an epilogue to absorb is a FusedConv", lambda o, m: not unfused_convs(m)),
    ],
    "bert_small": [
        ("every LayerNorm recognized (no ReduceMean/Pow/Sqrt left)",
         lambda o, m: count(m, "ReduceMean") == 0 and count(m, "Pow") == 0 and count(m, "Sqrt") == 0),
        ("every GELU recognized (no Erf left)", lambda o, m: count(m, "Erf") == 0),
        ("LayerNorms: 5 (SkipLayerNorm + LayerNormalization + LayerNormGelu)",
         lambda o, m: count(m, "SkipLayerNorm", "ai.fusec") + count(m, "LayerNormalization")
         + count(m, "LayerNormalization", "ai.fusec") + count(m, "LayerNormGelu", "ai.fusec") == 5),
        # Each residual Add is fused: the embeddings' into a SkipLayerNorm, the 4 after a projection
        # into that projection's FusedMatMul (its residual Z) ahead of a plain LayerNormalization.
        ("adjacent Add+LayerNorm fused (1 SkipLayerNorm, 4 FusedMatMul with a residual)",
         lambda o, m: count(m, "SkipLayerNorm", "ai.fusec") == 1
         and sum(1 for n in m.graph.node if n.op_type == "FusedMatMul" and len(n.input) > 3 and n.input[3]) == 4),
        ("each layer's attention is one Attention (2), no Softmax or head-split Transpose left",
         lambda o, m: count(m, "Attention", "ai.fusec") == 2 and count(m, "Softmax") == 0 and count(m, "Transpose") == 0),
        ("each layer's Q/K/V projections merged into one (packed QKV): 8 FusedMatMul, Attention without K and V",
         lambda o, m: count(m, "FusedMatMul", "ai.fusec") == 8
         and all(n.input[1] == "" and n.input[2] == "" for n in m.graph.node if n.op_type == "Attention")),
    ],
    "mlp_small": [
        ("24 LayerNormGelu", lambda o, m: count(m, "LayerNormGelu", "ai.fusec") == 24),
        ("no LayerNormalization, Erf or Dropout left",
         lambda o, m: count(m, "LayerNormalization") == 0 and count(m, "Erf") == 0 and count(m, "Dropout") == 0),
    ],
}


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


def close(got: np.ndarray, ref: np.ndarray) -> tuple[bool, float]:
    if got.shape != ref.shape or got.dtype != ref.dtype or not np.all(np.isfinite(got)):
        return False, float("inf")
    err = float(np.max(np.abs(got.astype(np.float64) - ref))) if ref.size else 0.0
    return err <= TOL * max(float(np.max(np.abs(ref))) if ref.size else 0.0, 1e-6), err


def check_model(fusec: str, path: str, work: str) -> list[str]:
    name = os.path.basename(path)[:-5]
    problems: list[str] = []
    original = onnx.load(path)
    feeds = make_inputs(original, BATCH, seed=7)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    ref = sess.run(None, feeds)

    opt_path = os.path.join(work, name + ".opt.onnx")
    report = os.path.join(work, name + ".json")
    p = run([fusec, "optimize", path, "--batch", str(BATCH), "-o", opt_path, "--report", report])
    if p.returncode != 0:
        return [f"optimize exited {p.returncode}: {p.stderr.strip()}"]
    optimized = onnx.load(opt_path)
    try:
        onnx.checker.check_model(optimized)  # validates the standard-domain nodes; ai.fusec is ours
    except Exception as e:  # noqa: BLE001 - any checker failure is the finding
        problems.append(f"onnx.checker rejects the optimized model: {e}")
    rep = json.load(open(report))
    for desc, ok in EXPECT.get(name, []):
        if not ok(original, optimized):
            problems.append(f"expected {desc}; got ops {dict(sorted(rep['ops'].items()))}")
    if not rep["verification"]["ok"]:
        problems.append("report says verification failed")

    in_args = []
    for k, v in feeds.items():
        f = os.path.join(work, f"{name}.{k}.npy")
        np.save(f, v)
        in_args += ["--input", f"{k}={f}"]
    out_dir = os.path.join(work, name + ".out")
    p = run([fusec, "run", opt_path, *in_args, "--output-dir", out_dir, "--format", "npy"])
    if p.returncode != 0:
        problems.append(f"run on the optimized model exited {p.returncode}: {p.stderr.strip()}")
    else:
        for k, r in enumerate(ref):
            ok, err = close(np.load(os.path.join(out_dir, f"output_{k}.npy")), r)
            if not ok:
                problems.append(f"optimized output {k} differs from ORT on the original: max abs {err:.3e}")

    port_path = os.path.join(work, name + ".portable.onnx")
    p = run([fusec, "optimize", path, "--batch", str(BATCH), "--portable", "-o", port_path])
    if p.returncode != 0:
        problems.append(f"optimize --portable exited {p.returncode}: {p.stderr.strip()}")
    else:
        portable = onnx.load(port_path)
        nonstd = sorted({n.domain for n in portable.graph.node if n.domain not in ("", "ai.onnx")})
        if nonstd:
            problems.append(f"--portable wrote non-standard domains {nonstd}")
        try:
            onnx.checker.check_model(portable, full_check=True)
            got = ort.InferenceSession(port_path, providers=["CPUExecutionProvider"]).run(None, feeds)
            for k, r in enumerate(ref):
                ok, err = close(got[k], r)
                if not ok:
                    problems.append(f"--portable output {k} in ORT differs: max abs {err:.3e}")
        except Exception as e:  # noqa: BLE001 - any checker/ORT failure is the finding
            problems.append(f"--portable model rejected: {e}")
    nodes = rep["nodes"]
    print(f"{name:22s} nodes {nodes['before']:4d} -> {nodes['after']:4d}  "
          f"max abs err {max(o['max_abs'] for o in rep['verification']['outputs']):.2e}  "
          f"{'ok' if not problems else 'FAIL'}")
    for pr in problems:
        print(f"    {pr}")
    return problems


NEAR_MISSES = [  # (pass, text that must appear in the reason) on models/near_miss_demo.onnx
    ("fold_batchnorm", "has 2 consumers"),
    ("recognize_gelu", "constant 0.6 where GELU has 0.5"),
    ("recognize_layernorm", "wrong axis"),
]


def check_near_misses(fusec: str, models: str, work: str) -> list[str]:
    path = os.path.join(models, "near_miss_demo.onnx")
    report = os.path.join(work, "near_miss.json")
    p = run([fusec, "optimize", path, "--batch", "2", "--explain", "-o", os.path.join(work, "nm.onnx"), "--report", report])
    if p.returncode != 0:
        return [f"optimize near_miss_demo exited {p.returncode}: {p.stderr.strip()}"]
    got = json.load(open(report))["near_misses"]
    problems = [f"no {ps} near-miss mentioning '{text}' (got {got})" for ps, text in NEAR_MISSES
                if not any(m["pass"] == ps and text in m["reason"] for m in got)]
    problems += [f"--explain output lacks '{text}'" for _, text in NEAR_MISSES if text not in p.stdout]
    print(f"{'near_miss_demo':22s} {len(got)} near-misses reported  {'ok' if not problems else 'FAIL'}")
    for pr in problems:
        print(f"    {pr}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fusec", required=True)
    ap.add_argument("--models", required=True)
    args = ap.parse_args()
    names = sorted(f for f in os.listdir(args.models) if f.endswith("_small.onnx"))
    failed = 0
    with tempfile.TemporaryDirectory() as work:
        for f in names:
            failed += bool(check_model(args.fusec, os.path.join(args.models, f), work))
        failed += bool(check_near_misses(args.fusec, args.models, work))
    print(f"check_optimized: {len(names) + 1 - failed}/{len(names) + 1} checks pass")
    return 1 if failed or not names else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Quantized models as ONNX Runtime's quantizer writes them, run and optimized by fusec on the CPU.

    test_quantized_models.py --root REPO --fusec build/fusec

The shipped models, quantized two ways by onnxruntime.quantization: dynamic (DynamicQuantizeLinear,
MatMulInteger, ConvInteger) and static QDQ (QuantizeLinear / DequantizeLinear pairs, int8 weights
per channel, calibrated on four random batches). For each:
  - `fusec run --device cpu` matches the ONNX reference implementation (dynamic) and onnxruntime
    with its graph optimizations off (QDQ; ORT's optimized session fuses QDQ groups into int8 kernels
    that round differently: up to 4% on bert_small);
  - `fusec optimize` succeeds, its output matches too, and it keeps the weights int8;
  - a reference 1% off is caught (the comparison can fail).
Exit 0 when all of that holds, 1 otherwise.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,
                                      quantize_static)

MODELS = {"mlp_small": 3, "mobilenetv2_small": 2, "bert_small": 2}  # model: batch
TOL = 1e-5  # max |fusec - ORT| / max |ORT|: both compute the same integer arithmetic and float rescaling


class Batches(CalibrationDataReader):
    def __init__(self, batches: list[dict]):
        self.it = iter(batches)

    def get_next(self):
        return next(self.it, None)


def quantize(src: str, dst: str, form: str, make_inputs, batch: int) -> None:
    if form == "dynamic":
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
    else:
        m = onnx.load(src)
        calib = Batches([make_inputs(m, batch, seed=s) for s in range(4)])
        quantize_static(src, dst, calib, quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8, per_channel=True)


def reference(path: str, form: str, feeds: dict) -> list[np.ndarray]:
    """The oracle: onnxruntime with its graph optimizations off. Its u8 x s8 MatMulInteger kernel
    saturates int16 pair sums on x86 CPUs without VNNI (AVX2 only: 2862 off in one mlp_small
    product, 6.9% of the output), so it is right or wrong by machine: each MatMulInteger is written
    as the spec defines it first, (A - a_zero_point) · (B - b_zero_point) in int32 (exact here)."""
    m = onnx.load(path)
    exact_matmul_integer(m)
    exact = path.replace(".onnx", ".exact.onnx")
    onnx.save(m, exact)
    return ort_reference(exact, feeds)


def exact_matmul_integer(m: onnx.ModelProto) -> None:
    from onnx import helper

    nodes = []
    for n in m.graph.node:
        if n.op_type != "MatMulInteger" or n.domain not in ("", "ai.onnx"):
            nodes.append(n)
            continue
        ins = list(n.input) + [""] * (4 - len(n.input))
        side = []
        for k, (x, zp) in enumerate(((ins[0], ins[2]), (ins[1], ins[3]))):
            t = f"{n.output[0]}.exact{k}"
            nodes.append(helper.make_node("Cast", [x], [t], to=onnx.TensorProto.INT32))
            if zp:
                nodes.append(helper.make_node("Cast", [zp], [t + ".zp"], to=onnx.TensorProto.INT32))
                if k == 0:  # a 1-D zero point of A is per row: [M, 1]
                    nodes.append(helper.make_node("Reshape", [t + ".zp", t + ".zpshape"], [t + ".zpr"]))
                    m.graph.initializer.append(onnx.numpy_helper.from_array(np.array([-1, 1], np.int64), t + ".zpshape"))
                    zp_used = t + ".zpr"
                else:
                    zp_used = t + ".zp"
                nodes.append(helper.make_node("Sub", [t, zp_used], [t + ".s"]))
                t += ".s"
            side.append(t)
        nodes.append(helper.make_node("MatMul", side, list(n.output)))
    del m.graph.node[:]
    m.graph.node.extend(nodes)


def ort_reference(path: str, feeds: dict) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, feeds)


def fusec_run(fusec: str, path: str, feeds: dict, work: str) -> list[np.ndarray] | str:
    args = []
    for k, v in feeds.items():
        f = os.path.join(work, f"in.{k}.npy")
        np.save(f, v)
        args += ["--input", f"{k}={f}"]
    out = os.path.join(work, "out." + os.path.basename(path))
    p = subprocess.run([fusec, "run", path, "--device", "cpu", "--format", "npy", "--output-dir", out] + args,
                       capture_output=True, text=True, timeout=300)
    if p.returncode:
        return f"fusec run {path} exited {p.returncode}: {p.stderr.strip()[-500:]}"
    n = len(onnx.load(path, load_external_data=False).graph.output)
    return [np.load(os.path.join(out, f"output_{k}.npy")) for k in range(n)]


def max_rel(got: list[np.ndarray], ref: list[np.ndarray]) -> float:
    worst = 0.0
    for g, r in zip(got, ref):
        if g.shape != r.shape:
            return float("inf")
        scale = max(float(np.max(np.abs(r))), 1e-12) if r.size else 1.0
        worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - r))) / scale if r.size else 0.0)
    return worst


def int8_weight_bytes(path: str) -> int:
    m = onnx.load(path)
    return sum(len(t.raw_data) for t in m.graph.initializer if t.data_type == onnx.TensorProto.INT8)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--fusec", required=True)
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(args.root, "tests", "models"))
    from check_models import make_inputs  # the shipped models' inputs, as the onnxruntime check makes them

    problems = []
    with tempfile.TemporaryDirectory(prefix="fusec_quantized_") as tmp:
        for name, batch in MODELS.items():
            src = os.path.join(args.root, "models", f"{name}.onnx")
            for form in ("dynamic", "qdq"):
                label = f"{name} {form}"
                q = os.path.join(tmp, f"{name}.{form}.onnx")
                quantize(src, q, form, make_inputs, batch)
                feeds = make_inputs(onnx.load(q), batch, seed=7)
                ref = reference(q, form, feeds)
                got = fusec_run(args.fusec, q, feeds, tmp)
                if isinstance(got, str):
                    problems.append(f"{label}: {got}")
                    continue
                rel = max_rel(got, ref)
                opt = q.replace(".onnx", ".opt.onnx")
                p = subprocess.run([args.fusec, "optimize", q, "-o", opt], capture_output=True, text=True, timeout=300)
                if p.returncode:
                    problems.append(f"{label}: fusec optimize exited {p.returncode}: {p.stderr.strip()[-500:]}")
                    continue
                got_opt = fusec_run(args.fusec, opt, feeds, tmp)
                rel_opt = max_rel(got_opt, ref) if not isinstance(got_opt, str) else float("inf")
                kept = int8_weight_bytes(opt) / max(int8_weight_bytes(q), 1)
                print(f"{label}: max rel {rel:.1e} as given, {rel_opt:.1e} optimized; int8 weight bytes kept {kept:.2f}")
                if rel > TOL or rel_opt > TOL:
                    problems.append(f"{label}: max rel {rel:.2e} / {rel_opt:.2e} over {TOL}")
                if form == "qdq" and kept < 0.99:
                    problems.append(f"{label}: optimize kept {kept:.2f} of the int8 weight bytes")
                if name == "mlp_small" and form == "qdq" and max_rel(got, [r * 1.01 for r in ref]) <= TOL:
                    problems.append(f"{label}: a reference 1% off passes the comparison")
    for p in problems:
        print("FAIL", p)
    print("quantized_models: " + ("ok" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

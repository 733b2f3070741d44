#!/usr/bin/env python3
"""Writes models/near_miss_demo.onnx: a small model built so that fusions ALMOST apply, to show
`fusec optimize --explain` naming each near-miss and its reason:
  * Conv 'conv_shared' -> BatchNormalization 'bn_shared', but the conv output also feeds a Relu;
  * a GELU-like chain whose constant is 0.6 instead of 0.5;
  * a LayerNorm-like chain that normalizes axis 1 of [N, 8, 6] instead of the last axis.
Deterministic (seeded); checked with onnx.checker and onnxruntime.
    .venv/bin/python scripts/make_near_miss_model.py [--out models/near_miss_demo.onnx]
"""
import argparse

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def build() -> onnx.ModelProto:
    rng = np.random.default_rng(11)
    f32 = np.float32
    inits = [
        numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(f32), "conv_shared.W"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(f32), "bn_shared.scale"),
        numpy_helper.from_array(rng.uniform(-0.1, 0.1, 8).astype(f32), "bn_shared.B"),
        numpy_helper.from_array(rng.uniform(-0.1, 0.1, 8).astype(f32), "bn_shared.mean"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(f32), "bn_shared.var"),
        numpy_helper.from_array(np.array(1.4142135, f32), "sqrt2"),
        numpy_helper.from_array(np.array(1.0, f32), "one"),
        numpy_helper.from_array(np.array(0.6, f32), "not_half"),
        numpy_helper.from_array(np.array(2.0, f32), "two"),
        numpy_helper.from_array(np.array(1e-5, f32), "eps"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv_shared.W"], ["c"], name="conv_shared", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "bn_shared.scale", "bn_shared.B", "bn_shared.mean", "bn_shared.var"],
                         ["bn"], name="bn_shared"),
        helper.make_node("Relu", ["c"], ["side"], name="side_relu"),
        helper.make_node("Add", ["bn", "side"], ["s"], name="merge"),
        # GELU-like with 0.6 where GELU has 0.5
        helper.make_node("Div", ["s", "sqrt2"], ["g_div"], name="gelu_div"),
        helper.make_node("Erf", ["g_div"], ["g_erf"], name="gelu_erf"),
        helper.make_node("Add", ["g_erf", "one"], ["g_add"], name="gelu_add"),
        helper.make_node("Mul", ["s", "g_add"], ["g_mul"], name="gelu_mul"),
        helper.make_node("Mul", ["g_mul", "not_half"], ["g"], name="gelu_half"),
        helper.make_node("GlobalAveragePool", ["g"], ["pooled"], name="pool"),
        helper.make_node("Reshape", ["pooled", "shape_n86"], ["r"], name="to_n86"),
        # LayerNorm-like over axis 1 (not the last axis)
        helper.make_node("ReduceMean", ["r"], ["ln_mean"], name="ln_mean", axes=[1]),
        helper.make_node("Sub", ["r", "ln_mean"], ["ln_d"], name="ln_sub"),
        helper.make_node("Pow", ["ln_d", "two"], ["ln_sq"], name="ln_pow"),
        helper.make_node("ReduceMean", ["ln_sq"], ["ln_var"], name="ln_var", axes=[1]),
        helper.make_node("Add", ["ln_var", "eps"], ["ln_ve"], name="ln_add_eps"),
        helper.make_node("Sqrt", ["ln_ve"], ["ln_std"], name="ln_sqrt"),
        helper.make_node("Div", ["ln_d", "ln_std"], ["y"], name="ln_div"),
    ]
    inits.append(numpy_helper.from_array(np.array([0, 8, 1], np.int64), "shape_n86"))
    g = helper.make_graph(nodes, "near_miss_demo",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 1])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="fusec scripts/make_near_miss_model.py")
    m.ir_version = 8
    return m


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="models/near_miss_demo.onnx")
    a = ap.parse_args()
    m = build()
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, a.out)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 3, 6, 6)).astype(np.float32)
    y = ort.InferenceSession(a.out, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.all(np.isfinite(y)), "non-finite output"
    print(f"wrote {a.out}: output {y.shape}")


if __name__ == "__main__":
    main()

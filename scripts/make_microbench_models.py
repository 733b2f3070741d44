#!/usr/bin/env python3
"""One-op and few-op models at BERT-base's shapes (batch 16, sequence 128, hidden 768, 12 heads),
for timing single kernels with `fusec bench` / `fusec profile` on the GPU (scripts/gpu_check.sh
step `micro`). The figures decide kernel and fusion choices; they are not targets.

    make_microbench_models.py --out DIR

  proj3.onnx       X -> three MatMul+Add [768, 768] (BERT's Q, K, V projections, separately)
  proj_qkv.onnx    X -> one MatMul+Add [768, 2304] (the same work as one GEMM)
  ffn1.onnx        X -> MatMul+Add [768, 3072]
  ffn2.onnx        X [.., 3072] -> MatMul+Add [3072, 768]
  attn.onnx        ai.fusec.Attention on Q, K, V [16, 128, 768] with an additive [16, 1, 1, 128] mask
  attn_packed.onnx the same on packed QKV [16, 128, 2304] (K and V omitted)

Weights are numpy draws from a fixed seed (same bytes every call).
"""
from __future__ import annotations

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

B, S, H, HEADS = 16, 128, 768, 12


def _save(graph, path, fusec=False):
    opsets = [helper.make_opsetid("", 17)]
    if fusec:
        opsets.append(helper.make_opsetid("ai.fusec", 1))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="fusec scripts/make_microbench_models.py")
    model.ir_version = 8
    onnx.save(model, path)


def _linear(rng, x, k, n, name, inits, nodes):
    w = numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), name + "_w")
    b = numpy_helper.from_array((0.1 * rng.standard_normal(n)).astype(np.float32), name + "_b")
    inits += [w, b]
    nodes.append(helper.make_node("MatMul", [x, w.name], [name + "_mm"], name=name + "/MatMul"))
    nodes.append(helper.make_node("Add", [name + "_mm", b.name], [name], name=name + "/Add"))


def linear_model(path, k, widths):
    rng = np.random.default_rng(7)
    inits, nodes = [], []
    outs = []
    for i, n in enumerate(widths):
        _linear(rng, "x", k, n, f"y{i}", inits, nodes)
        outs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [B, S, n]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, S, k])
    _save(helper.make_graph(nodes, os.path.basename(path), [x], outs, inits), path)


def attention_model(path, packed):
    attrs = dict(q_num_heads=HEADS, kv_num_heads=HEADS)
    mask = helper.make_tensor_value_info("mask", TensorProto.FLOAT, [B, 1, 1, S])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, H])
    if packed:
        qkv = helper.make_tensor_value_info("qkv", TensorProto.FLOAT, [B, S, 3 * H])
        node = helper.make_node("Attention", ["qkv", "", "", "mask"], ["y"], domain="ai.fusec", **attrs)
        inputs = [qkv, mask]
    else:
        inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [B, S, H]) for n in ("q", "k", "v")] + [mask]
        node = helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"], domain="ai.fusec", **attrs)
    _save(helper.make_graph([node], os.path.basename(path), inputs, [y]), path, fusec=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    linear_model(os.path.join(args.out, "proj3.onnx"), H, [H, H, H])
    linear_model(os.path.join(args.out, "proj_qkv.onnx"), H, [3 * H])
    linear_model(os.path.join(args.out, "ffn1.onnx"), H, [4 * H])
    linear_model(os.path.join(args.out, "ffn2.onnx"), 4 * H, [H])
    attention_model(os.path.join(args.out, "attn.onnx"), packed=False)
    attention_model(os.path.join(args.out, "attn_packed.onnx"), packed=True)
    print("wrote", args.out)


if __name__ == "__main__":
    main()

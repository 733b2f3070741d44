#!/usr/bin/env python3
"""One mixture-of-experts projection at real models' sizes, as one ai.fusec ExpertMatMul node, for
timing ExpertMatMul's CUDA kernels with `fusec bench --no-compare --precision fp16` (the grouped GEMM
against the per-row kernels: FUSEC_EXPERT_GROUPED=0), beside a dense MatMul of the same rows and one
expert's matrix (the floor: the same FLOPs, one matrix read once). The figures are not targets.

    python3 scripts/lab/make_moe_models.py --out DIR [--tokens 512] [--dtype float32]

  mixtral_up.onnx      Mixtral-8x7B's up projection: 8 experts [14336, 4096] (nn.Linear's layout,
                       trans_w), top-2
  mixtral_down.onnx    its down projection stored [E, K, M] (transformers' batched_mm layout): 8
                       experts [14336, 4096], top-2
  qwen3moe_up.onnx     Qwen3-30B-A3B's: 128 experts [768, 2048], top-8
  <name>.dense.onnx    X [tokens · top-k, K] · one expert's matrix, by MatMul

Everything is fp16 (--dtype float32: float32, which `fusec bench --precision fp32` keeps, so the
grouped product runs on its FMA tiles), weights drawn from a fixed seed; the routing is a constant,
each token's top-k distinct experts drawn uniformly, so every expert gets about tokens · top-k / E
rows.
"""
from __future__ import annotations

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CASES = {  # name: experts, K, M, top-k, trans_w
    "mixtral_up": (8, 4096, 14336, 2, 1),
    "mixtral_down": (8, 14336, 4096, 2, 0),
    "qwen3moe_up": (128, 2048, 768, 8, 1),
}


def _save(nodes, inputs, outputs, inits, path, fusec):
    graph = helper.make_graph(nodes, os.path.basename(path), inputs, outputs, inits)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("ai.fusec", 1)] if fusec else [])
    model = helper.make_model(graph, opset_imports=opsets, producer_name="fusec scripts/lab/make_moe_models.py")
    model.ir_version = 8
    onnx.save(model, path)


def make(name, tokens, out, rng, dtype):
    experts, k, m, top, trans = CASES[name]
    wshape = (experts, m, k) if trans else (experts, k, m)
    w = (rng.standard_normal(wshape, dtype=np.float32) / np.sqrt(k)).astype(dtype)
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.FLOAT16
    picks = np.stack([rng.choice(experts, top, replace=False) for _ in range(tokens)]).reshape(-1).astype(np.int64)
    x = helper.make_tensor_value_info("x", elem, [tokens, k])
    y = helper.make_tensor_value_info("y", elem, [tokens * top, m])
    node = helper.make_node("ExpertMatMul", ["x", "w", "picks"], ["y"], domain="ai.fusec", trans_w=trans, repeat=top)
    _save([node], [x], [y], [numpy_helper.from_array(w, "w"), numpy_helper.from_array(picks, "picks")],
          os.path.join(out, f"{name}.onnx"), fusec=True)
    one = w[0].T if trans else w[0]
    xd = helper.make_tensor_value_info("x", elem, [tokens * top, k])
    yd = helper.make_tensor_value_info("y", elem, [tokens * top, m])
    _save([helper.make_node("MatMul", ["x", "w"], ["y"])], [xd], [yd],
          [numpy_helper.from_array(np.ascontiguousarray(one), "w")], os.path.join(out, f"{name}.dense.onnx"), False)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ",".join(CASES))
    p.add_argument("--dtype", choices=["float16", "float32"], default="float16")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in args.cases.split(","):
        make(name, args.tokens, args.out, rng, np.dtype(args.dtype).type)
        print(f"make_moe_models: {name} ({args.tokens} tokens, {args.dtype}) in {args.out}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes one-node ai.fusec FusedMatMul models at the zoo's MLP shapes, so the GEMM tuner's race
(cuBLASLt plus the activation pass against fusec's wgmma GEMM configurations) can be timed alone:
    python3 scripts/lab/gemm_models.py OUT_DIR
    FUSEC_GEMM_TRACE=1 fusec bench OUT_DIR/llama_gate.onnx --batch 16 --precision fp16 --iterations 5
(on a cold tuning cache: rm -rf ~/.cache/fusec). llama_gate: X [batch, 128, 2048] x W [2048, 8192]
with SiLU, Llama-3.2-1B's gate projection. Weights are seeded numpy draws."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make(path: str, k: int, n: int, act: str) -> None:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), "W")
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 128, k])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 128, n])
    node = helper.make_node("FusedMatMul", ["X", "W"], ["Y"], domain="ai.fusec", activation=act)
    graph = helper.make_graph([node], os.path.basename(path), [x], [y], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.fusec", 1)])
    model.ir_version = 8
    onnx.save(model, path)


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    os.makedirs(sys.argv[1], exist_ok=True)
    make(os.path.join(sys.argv[1], "llama_gate.onnx"), 2048, 8192, "SiLU")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A one-node RNN, GRU or LSTM model with seeded constant weights, for timing fusec's recurrent op
at sizes the zoo's taggers do not have (large hidden sizes and batches).

    python3 scripts/lab/make_rnn_model.py out.onnx --op LSTM --seq 64 --batch 64 --input 512 --hidden 1024
"""
import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--op", choices=("RNN", "GRU", "LSTM"), default="LSTM")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--input", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--direction", choices=("forward", "bidirectional"), default="bidirectional")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[a.op]
    dirs = 2 if a.direction == "bidirectional" else 1
    scale = 1.0 / np.sqrt(a.hidden)
    w = (rng.uniform(-scale, scale, (dirs, gates * a.hidden, a.input))).astype(np.float32)
    r = (rng.uniform(-scale, scale, (dirs, gates * a.hidden, a.hidden))).astype(np.float32)
    b = (rng.uniform(-scale, scale, (dirs, 2 * gates * a.hidden))).astype(np.float32)
    attrs = {"hidden_size": a.hidden, "direction": a.direction}
    if a.op == "GRU":
        attrs["linear_before_reset"] = 1
    node = helper.make_node(a.op, ["X", "W", "R", "B"], ["Y"], **attrs)
    graph = helper.make_graph(
        [node], "rnn",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [a.seq, a.batch, a.input])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [a.seq, dirs, a.batch, a.hidden])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R"), numpy_helper.from_array(b, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, a.out)


if __name__ == "__main__":
    main()

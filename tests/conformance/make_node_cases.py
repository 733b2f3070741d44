#!/usr/bin/env python3
"""Writes ONNX's own node tests of ops newer than the Debian test data, and their function-expanded twins.

Debian's libonnx-testdata (1.12) predates GroupNormalization (opsets 18 and 21), Attention,
RMSNormalization and RotaryEmbedding (23), Swish (24), CumProd (26), opset 28's Mod and BitShift, the cases of
LpNormalization, AffineGrid (20) and the Bitwise ops (18), and the onnx wheel in .venv ships the test *generators*
(onnx/backend/test/case/node/attention.py, ...) but not their data. This script runs those
generators (expected outputs from onnx's reference implementation) and writes them in the layout
fusec_conformance reads:

    OUT/node/test_attention_*/model.onnx
    OUT/node/test_attention_*/test_data_set_0/{input,output}_K.pb

    .venv/bin/python tests/conformance/make_node_cases.py --out build/newer_op_testdata
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import warnings

import numpy as np
from onnx import TensorProto, numpy_helper


def write_tensor(path: str, value, name: str) -> None:
    proto = value if isinstance(value, TensorProto) else numpy_helper.from_array(np.asarray(value), name)
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())


DEFAULT_OPS = ("Attention,RMSNormalization,GroupNormalization,Swish,CumProd,LpNormalization,Mod,BitShift,"
               "AffineGrid,BitwiseAnd,BitwiseOr,BitwiseXor,BitwiseNot,RotaryEmbedding")


def write_op(op: str, root: str) -> int:
    """Writes `op`'s cases under root; returns how many. One op a process: onnx's collector keeps
    the cases of its first call for the life of the process."""
    # Several generators draw unseeded random inputs; a fixed seed makes the data reproducible.
    np.random.seed(0)
    import onnx.backend.test.case.node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # other ops' generators divide by zero on purpose
        cases = node_cases.collect_testcases(op)
    for case in cases:
        case_dir = os.path.join(root, case.name)
        os.makedirs(case_dir)
        with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        for i, (inputs, outputs) in enumerate(case.data_sets):
            data_dir = os.path.join(case_dir, f"test_data_set_{i}")
            os.makedirs(data_dir)
            for j, x in enumerate(inputs):
                write_tensor(os.path.join(data_dir, f"input_{j}.pb"), x, case.model.graph.input[j].name)
            for j, y in enumerate(outputs):
                write_tensor(os.path.join(data_dir, f"output_{j}.pb"), y, case.model.graph.output[j].name)
    return len(cases)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder to write node/test_* into")
    ap.add_argument("--ops", default=DEFAULT_OPS, help=f"comma-separated op types (default {DEFAULT_OPS})")
    ap.add_argument("--one-op", help=argparse.SUPPRESS)  # the child process that writes one op's cases
    args = ap.parse_args()

    root = os.path.join(args.out, "node")
    if args.one_op:
        print(f"wrote {write_op(args.one_op, root)} {args.one_op} node tests to {root}")
        return 0
    if os.path.isdir(root):
        shutil.rmtree(root)
    os.makedirs(root)
    for op in args.ops.split(","):
        subprocess.run([sys.executable, __file__, "--out", args.out, "--one-op", op], check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

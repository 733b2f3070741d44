#!/usr/bin/env python3
"""Writes ONNX's own Attention node tests (and their function-expanded twins) as backend-test data.

Debian's libonnx-testdata (1.12) predates Attention (opset 23), and the onnx wheel in .venv ships
the test *generators* (onnx/backend/test/case/node/attention.py) but not their data. This script
runs those generators (expected outputs from onnx's reference implementation) and writes them in
the layout fusec_conformance reads:

    OUT/node/test_attention_*/model.onnx
    OUT/node/test_attention_*/test_data_set_0/{input,output}_K.pb

    .venv/bin/python tests/conformance/make_attention_cases.py --out build/attention_testdata
"""
from __future__ import annotations

import argparse
import os
import shutil
import warnings

import numpy as np
from onnx import TensorProto, numpy_helper


def write_tensor(path: str, value, name: str) -> None:
    proto = value if isinstance(value, TensorProto) else numpy_helper.from_array(np.asarray(value), name)
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder to write node/test_attention_* into")
    args = ap.parse_args()

    # Several generators draw unseeded random inputs; a fixed seed makes the data reproducible.
    np.random.seed(0)
    import onnx.backend.test.case.node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # other ops' generators divide by zero on purpose
        cases = node_cases.collect_testcases("Attention")

    root = os.path.join(args.out, "node")
    if os.path.isdir(root):
        shutil.rmtree(root)
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
    print(f"wrote {len(cases)} Attention node tests to {root}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

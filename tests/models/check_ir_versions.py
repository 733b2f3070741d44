#!/usr/bin/env python3
"""Every IR version the pinned onnx defines loads; newer ones and unrunnable element types are refused.

fusec's ONNX protobuf classes are generated from the onnx-ml.proto of the onnx release that
requirements.txt pins, so its newest readable IR version is that release's onnx.IR_VERSION. This
checks, through the fusec binary:

  * each models/*.onnx rewritten with IR versions 9 .. onnx.IR_VERSION gives the same outputs
    (bit for bit) as at its own IR version 8, and `inspect` reports the version it read;
  * IR version onnx.IR_VERSION + 1 is refused: exit 2, one error line naming both versions;
  * an initializer or graph input of an element type fusec has no kernels for (the float8
    variants, int4/uint4, float4, ...) is refused with exit 2 and one line naming the type, the
    value and the node that reads it;
  * `optimize` writes the model's own IR version; a rewrite that raises the ai.onnx opset (a
    standard Gelu, opset 20) raises it to the first version onnx's own table allows for that
    opset, and fusec's copy of that table equals the pinned onnx's.

Exit status: 0 when every check passes, 1 otherwise; the last line is a one-line summary.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BATCH = 2


class Failure(Exception):
    pass


def fusec(binary: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=300)


def expect_ok(p: subprocess.CompletedProcess, what: str) -> None:
    if p.returncode != 0:
        raise Failure(f"{what}: exit {p.returncode}: {p.stderr.strip()}")


def expect_refused(p: subprocess.CompletedProcess, what: str, mention: list[str]) -> None:
    errors = [l for l in p.stderr.splitlines() if l.startswith("fusec: error: ")]
    if p.returncode != 2 or len(errors) != 1 or len(p.stderr.strip().splitlines()) != 1:
        raise Failure(f"{what}: expected exit 2 and one error line, got exit {p.returncode}: {p.stderr!r}")
    missing = [m for m in mention if m not in errors[0]]
    if missing:
        raise Failure(f"{what}: the error does not mention {missing}: {errors[0]!r}")


def outputs_of(binary: str, model: str, out_dir: str) -> list[np.ndarray]:
    expect_ok(fusec(binary, "run", model, "--batch", str(BATCH), "--seed", "7", "--device", "cpu",
                    "--output-dir", out_dir, "--format", "npy"), f"run {model}")
    files = sorted(glob.glob(os.path.join(out_dir, "output_*.npy")), key=lambda f: int(f.split("_")[-1][:-4]))
    if not files:
        raise Failure(f"run {model} wrote no outputs")
    return [np.load(f) for f in files]


def check_shipped_models(binary: str, models: str, tmp: str) -> int:
    checked = 0
    for path in sorted(glob.glob(os.path.join(models, "*.onnx"))):
        name = os.path.basename(path)[:-5]
        base = onnx.load(path)
        reference = outputs_of(binary, path, os.path.join(tmp, name, "ir_own"))
        for ir in range(base.ir_version + 1, onnx.IR_VERSION + 1):
            m = onnx.ModelProto()
            m.CopyFrom(base)
            m.ir_version = ir
            p = os.path.join(tmp, name, f"ir{ir}.onnx")
            onnx.save(m, p)
            got = outputs_of(binary, p, os.path.join(tmp, name, f"ir{ir}"))
            if len(got) != len(reference) or any(
                    a.dtype != b.dtype or a.shape != b.shape or not np.array_equal(a, b, equal_nan=True)
                    for a, b in zip(got, reference)):
                raise Failure(f"{name} at IR {ir}: outputs differ from IR {base.ir_version}")
            ins = fusec(binary, "inspect", p, "--batch", str(BATCH))
            expect_ok(ins, f"inspect {p}")
            if f"ir         {ir}," not in ins.stdout:
                raise Failure(f"inspect {p} does not report IR {ir}: {ins.stdout[:200]!r}")
            checked += 1
        newer = onnx.ModelProto()
        newer.CopyFrom(base)
        newer.ir_version = onnx.IR_VERSION + 1
        p = os.path.join(tmp, name, "newer.onnx")
        onnx.save(newer, p)
        expect_refused(fusec(binary, "inspect", p), f"{name} at IR {onnx.IR_VERSION + 1}",
                       [f"IR version {onnx.IR_VERSION + 1}", f"({onnx.IR_VERSION}, as onnx", "--allow-newer-opset"])
    return checked


def relu_model(ir: int, opset: int, init_type: int | None = None, input_type: int = TensorProto.FLOAT):
    """Y = Relu(X) (+ W when `init_type` is given: an initializer W of that element type)."""
    nodes = [helper.make_node("Relu", ["X"], ["R"], name="relu")]
    inits = []
    if init_type is not None:
        nodes.append(helper.make_node("Add", ["R", "W"], ["Y"], name="add_w"))
        inits.append(helper.make_tensor("W", init_type, [2, 4], [0, 1, 2, 3, 0, 1, 2, 3]))
    else:
        nodes.append(helper.make_node("Identity", ["R"], ["Y"], name="out"))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", input_type, [2, 4])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir)


def check_element_types(binary: str, tmp: str) -> int:
    names = {TensorProto.FLOAT8E4M3FN: "float8e4m3fn", TensorProto.FLOAT8E5M2: "float8e5m2",
             TensorProto.INT4: "int4", TensorProto.UINT4: "uint4", TensorProto.FLOAT4E2M1: "float4e2m1"}
    for code, type_name in names.items():
        p = os.path.join(tmp, f"init_{type_name}.onnx")
        onnx.save(relu_model(onnx.IR_VERSION, 21, init_type=code), p)
        for sub in ("inspect", "run"):
            extra = ["--output-dir", os.path.join(tmp, "out")] if sub == "run" else []
            expect_refused(fusec(binary, sub, p, *extra), f"{sub}: a {type_name} initializer",
                           [type_name, "initializer 'W'", "node 'add_w'", "op Add"])
        p = os.path.join(tmp, f"input_{type_name}.onnx")
        onnx.save(relu_model(onnx.IR_VERSION, 21, input_type=code), p)
        expect_refused(fusec(binary, "inspect", p), f"a {type_name} graph input",
                       [type_name, "graph input 'X'", "node 'relu'"])
    return len(names)


def first_ir_for_opset() -> dict[int, int]:
    first: dict[int, int] = {}
    for row in onnx.helper.VERSION_TABLE:
        first.setdefault(row[2], row[1])
    return first


def gelu_model(ir: int, opset: int) -> onnx.ModelProto:
    """Y = GELU(X) written out (x * 0.5 * (1 + erf(x / sqrt 2))): recognize_gelu makes it one Gelu,
    a standard op from opset 20, so optimize raises the model's opset and with it the IR version."""
    c = lambda name, v: numpy_helper.from_array(np.array(v, np.float32), name)
    nodes = [helper.make_node("Div", ["X", "sqrt2"], ["d"], name="div"),
             helper.make_node("Erf", ["d"], ["e"], name="erf"),
             helper.make_node("Add", ["e", "one"], ["a"], name="add"),
             helper.make_node("Mul", ["X", "a"], ["m"], name="mul"),
             helper.make_node("Mul", ["m", "half"], ["Y"], name="half_mul")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 4])],
                          [c("sqrt2", 2 ** 0.5), c("one", 1.0), c("half", 0.5)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir)


def check_written_ir_version(binary: str, source: str, tmp: str) -> int:
    first_ir = first_ir_for_opset()
    # fusec's copy of onnx's table (ir/op_schema.cpp) agrees with the pinned onnx's.
    text = open(os.path.join(source, "ir", "op_schema.cpp")).read()
    body = re.search(r"kFirstIr\[\] = \{(.*?)\};", text, re.S)
    if not body:
        raise Failure("ir/op_schema.cpp has no kFirstIr table")
    pairs = [(int(a), int(b)) for a, b in re.findall(r"\{(\d+), (\d+)\}", body.group(1))]
    ours = lambda opset: max([3] + [ir for first, ir in pairs if opset >= first])
    wrong = {o: (ours(o), ir) for o, ir in first_ir.items() if o >= 6 and ours(o) != ir}
    if wrong:
        raise Failure(f"ir/op_schema.cpp's first IR version per opset differs from onnx's (opset: ours, onnx's): {wrong}")
    checked = 0
    # Nothing raised: the model's own IR version, whatever it is.
    for opset in (14, 17, 18, 20, 21, onnx.defs.onnx_opset_version()):
        for own in (8, onnx.IR_VERSION):
            src = os.path.join(tmp, f"relu_o{opset}_ir{own}.onnx")
            dst = os.path.join(tmp, f"relu_o{opset}_ir{own}.opt.onnx")
            onnx.save(relu_model(own, opset), src)
            expect_ok(fusec(binary, "optimize", src, "-o", dst), f"optimize {src}")
            written = onnx.load(dst)
            if written.ir_version != own:
                raise Failure(f"optimize of an IR {own}, opset {opset} Relu model wrote IR {written.ir_version}")
            checked += 1
    # A rewrite that raises the opset raises the IR version to what onnx's table requires of it.
    for opset, own in ((17, 8), (18, 8), (17, 3)):
        src = os.path.join(tmp, f"gelu_o{opset}_ir{own}.onnx")
        dst = os.path.join(tmp, f"gelu_o{opset}_ir{own}.opt.onnx")
        onnx.save(gelu_model(own, opset), src)
        expect_ok(fusec(binary, "optimize", src, "-o", dst), f"optimize {src}")
        written = onnx.load(dst)
        wrote_opset = {o.domain or "ai.onnx": o.version for o in written.opset_import}.get("ai.onnx")
        if [n.op_type for n in written.graph.node] != ["Gelu"] or wrote_opset != 20:
            raise Failure(f"optimize of the GELU chain (opset {opset}) wrote {[n.op_type for n in written.graph.node]} "
                          f"at opset {wrote_opset}; expected one Gelu at opset 20")
        if written.ir_version != max(own, first_ir[20]):
            raise Failure(f"optimize raised opset {opset} to 20 but wrote IR {written.ir_version}, "
                          f"expected {max(own, first_ir[20])}")
        checked += 1
    return checked


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fusec", required=True)
    ap.add_argument("--models", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fusec_ir_") as tmp:
        try:
            n_models = check_shipped_models(args.fusec, args.models, tmp)
            n_types = check_element_types(args.fusec, tmp)
            n_written = check_written_ir_version(args.fusec, os.path.dirname(os.path.abspath(args.models)), tmp)
        except Failure as e:
            print(f"FAIL: {e}")
            return 1
    print(f"ir versions: ok ({n_models} model x IR runs equal to IR 8, IR {onnx.IR_VERSION + 1} refused, "
          f"{n_types} element types refused by name, {n_written} written IR versions as onnx's table)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

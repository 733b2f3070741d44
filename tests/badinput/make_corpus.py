#!/usr/bin/env python3
"""Writes the bad-input corpus: malformed ONNX files (and paths) that fusec must reject cleanly.

    make_corpus.py DIR          # writes the corpus into DIR and prints its entries

run_corpus.py calls make_corpus(dir) itself, in a fresh temp dir; this file only builds files and
says what is expected of each (see Entry). Everything is deterministic (fixed seeds).

Each entry gets its own sub-folder, so entries with external data cannot see each other's files;
where an external-data file is refused for *where* it is (../, absolute, symlink), the file does
exist and holds valid data, so only the location check can stop it.
"""
from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8


@dataclasses.dataclass
class Entry:
    name: str
    path: str                      # what is passed to fusec as the model
    what: str                      # one-line description
    mention: list[str] = dataclasses.field(default_factory=list)  # the error line must contain each (case-insensitive)
    # The model is valid ONNX that fusec cannot (or need not) run: `inspect` may exit 0 (describing
    # it is its job; its stdout must then contain each of inspect_must_report) and so may `optimize`
    # (a valid model in, a valid model out). `run` and `bench` must still fail with exit 2.
    valid_onnx: bool = False
    inspect_must_report: list[str] = dataclasses.field(default_factory=list)


def _model(nodes, inputs, outputs, inits=(), opset=OPSET, ir_version=IR_VERSION, name="g") -> onnx.ModelProto:
    g = helper.make_graph(list(nodes), name, list(inputs), list(outputs), initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="fusec bad-input corpus")
    m.ir_version = ir_version
    return m


def _vi(name, elem=TensorProto.FLOAT, shape=(2, 2)):
    return helper.make_tensor_value_info(name, elem, list(shape))


def _valid_add(w_init: onnx.TensorProto | None = None) -> onnx.ModelProto:
    """Y = Add(X, W) with X [2,2] input and W [2,2] initializer."""
    w = w_init if w_init is not None else numpy_helper.from_array(np.arange(4, dtype=np.float32).reshape(2, 2), "W")
    return _model([helper.make_node("Add", ["X", "W"], ["Y"], name="add")], [_vi("X")], [_vi("Y")], [w])


def _write(path: str, model_or_bytes) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = model_or_bytes if isinstance(model_or_bytes, bytes) else model_or_bytes.SerializeToString()
    with open(path, "wb") as f:
        f.write(data)
    return path


def _external_w(location: str, offset: int | None = None, length: int | None = None) -> onnx.TensorProto:
    t = TensorProto()
    t.name = "W"
    t.data_type = TensorProto.FLOAT
    t.dims.extend([2, 2])
    t.data_location = TensorProto.EXTERNAL
    kv = [("location", location)]
    if offset is not None:
        kv.append(("offset", str(offset)))
    if length is not None:
        kv.append(("length", str(length)))
    for k, v in kv:
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


W_BYTES = np.arange(4, dtype=np.float32).tobytes()  # valid data for W [2,2] float


def make_corpus(root: str) -> list[Entry]:
    root = os.path.abspath(root)
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(1234)
    E: list[Entry] = []

    def add(name: str, model_or_bytes, what: str, **kw) -> None:
        E.append(Entry(name, _write(os.path.join(root, name, "model.onnx"), model_or_bytes), what, **kw))

    # ---- not a model at all -----------------------------------------------------------------
    add("empty_file", b"", "a zero-byte file")
    add("random_bytes", rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(), "4 KiB of random bytes")
    add("text_file", b"this is not an onnx model\n" * 10, "a text file")
    big = _valid_add(numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "W"))
    big.graph.input[0].CopyFrom(_vi("X", shape=(64, 64)))
    big.graph.output[0].CopyFrom(_vi("Y", shape=(64, 64)))
    data = big.SerializeToString()
    add("truncated_protobuf", data[: len(data) // 2], "a valid model cut in half")
    tp = numpy_helper.from_array(np.ones((3, 4), np.float32), "t").SerializeToString()
    add("tensorproto_as_model", tp, "a TensorProto file given as the model")
    m = onnx.ModelProto()
    m.ir_version = IR_VERSION
    m.opset_import.add().version = OPSET
    add("no_graph", m, "a ModelProto with no graph")

    # ---- graph structure -----------------------------------------------------------------------
    # Valid protobuf, graph with no nodes, inputs or outputs. Decision: inspect (and optimize) may
    # accept it (exit 0: it is well-formed ONNX that computes nothing); run and bench must refuse it
    # (exit 2), since there is nothing to compute and no output to write or time.
    add("empty_graph", _model([], [], []), "a graph with no nodes, inputs or outputs",
        valid_onnx=True)
    add("cycle", _model([helper.make_node("Add", ["X", "B"], ["A"], name="node_a"),
                         helper.make_node("Relu", ["A"], ["B"], name="node_b")], [_vi("X")], [_vi("B")]),
        "node_a reads node_b's output and node_b reads node_a's", mention=["cycle"])
    add("dangling_input", _model([helper.make_node("Add", ["X", "nowhere"], ["Y"], name="add_dangling")],
                                 [_vi("X")], [_vi("Y")]),
        "a node input that no node, graph input or initializer produces", mention=["nowhere", "add_dangling"])
    add("duplicate_producer", _model([helper.make_node("Relu", ["X"], ["Y"], name="relu_1"),
                                      helper.make_node("Neg", ["X"], ["Y"], name="neg_2")], [_vi("X")], [_vi("Y")]),
        "two nodes produce the same value 'Y'", mention=["'Y'"])
    add("duplicate_graph_output", _model([helper.make_node("Relu", ["X"], ["Y"], name="relu")], [_vi("X")],
                                         [_vi("Y"), _vi("Y")]),
        "graph output 'Y' listed twice", mention=["'Y'"])
    add("duplicate_initializer", _model([helper.make_node("Add", ["X", "W"], ["Y"], name="add")], [_vi("X")],
                                        [_vi("Y")], [numpy_helper.from_array(np.ones((2, 2), np.float32), "W"),
                                                     numpy_helper.from_array(np.ones((2, 2), np.float32), "W")]),
        "initializer 'W' defined twice", mention=["'W'"])
    add("undefined_graph_output", _model([helper.make_node("Relu", ["X"], ["Y"], name="relu")], [_vi("X")],
                                         [_vi("Z")]),
        "graph output 'Z' that nothing produces", mention=["'Z'"])

    # ---- tensors and types ----------------------------------------------------------------------
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "W")
    w.raw_data = b"\0" * 8
    add("raw_data_size_mismatch", _model([helper.make_node("Identity", ["W"], ["Y"], name="id")], [],
                                         [_vi("Y", shape=(2, 3))], [w]),
        "initializer W [2,3] float with 8 bytes of raw_data (needs 24)", mention=["'W'"])
    w = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[-1, 2])
    add("negative_dims_initializer", _model([helper.make_node("Identity", ["W"], ["Y"], name="id")], [],
                                            [_vi("Y", shape=(2,))], [w]),
        "initializer with dims [-1, 2]", mention=["'W'"])
    add("negative_dims_input", _model([helper.make_node("Relu", ["X"], ["Y"], name="relu")],
                                      [_vi("X", shape=(2, -3))], [_vi("Y")]),
        "graph input with dim_value -3", mention=["'X'"])
    w = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[2**40, 2**40])
    add("overflow_dims_initializer", _model([helper.make_node("Identity", ["W"], ["Y"], name="id")], [],
                                            [_vi("Y", shape=(2,))], [w]),
        "initializer dims [2^40, 2^40]: the element count overflows int64", mention=["'W'"])
    add("overflow_dims_input", _model([helper.make_node("Relu", ["X"], ["Y"], name="relu")],
                                      [_vi("X", shape=(2**62, 4))], [_vi("Y", shape=(2**62, 4))]),
        "graph input dims [2^62, 4]: the element count overflows int64", mention=["'X'"])
    # Fits int64 but not in memory: inspect may describe it; run/bench must fail cleanly (no crash, no
    # OOM kill: run_corpus.py caps the address space).
    add("huge_input", _model([helper.make_node("Relu", ["X"], ["Y"], name="relu")],
                             [_vi("X", shape=(2**20, 2**20, 16))], [_vi("Y", shape=(2**20, 2**20, 16))]),
        "graph input of 2^44 floats (64 TiB)", valid_onnx=True)
    add("unknown_dtype_input", _model([helper.make_node("Relu", ["X"], ["Y"], name="relu")],
                                      [_vi("X", elem=99)], [_vi("Y")]),
        "graph input with elem_type 99", mention=["'X'"])
    w = TensorProto(name="W", data_type=99, dims=[2], raw_data=b"\0" * 8)
    add("unknown_dtype_initializer", _model([helper.make_node("Identity", ["W"], ["Y"], name="id")], [],
                                            [_vi("Y", shape=(2,))], [w]),
        "initializer with data_type 99", mention=["'W'"])
    w = TensorProto(name="S", data_type=TensorProto.STRING, dims=[2], string_data=[b"a", b"b"])
    add("string_initializer", _model([helper.make_node("Identity", ["S"], ["Y"], name="id")], [],
                                     [_vi("Y", elem=TensorProto.STRING, shape=(2,))], [w]),
        "a STRING initializer", mention=["'S'"])
    seq_in = helper.make_tensor_sequence_value_info("X", TensorProto.FLOAT, [2])
    add("sequence_input", _model([helper.make_node("Identity", ["X"], ["Y"], name="id")], [seq_in], [_vi("Y")]),
        "a graph input of sequence type", mention=["'X'"])

    # ---- ops --------------------------------------------------------------------------------------
    # Valid ONNX with an op fusec does not know: inspect's job is to report what fusec cannot run,
    # so it may exit 0 if its report names the node and the op; run/bench must fail, naming both.
    add("unknown_op", _model([helper.make_node("FrobnicateXYZ", ["X"], ["Y"], name="mystery_node")], [_vi("X")],
                             [_vi("Y")]),
        "node 'mystery_node' with op FrobnicateXYZ", mention=["mystery_node", "FrobnicateXYZ"],
        valid_onnx=True, inspect_must_report=["mystery_node", "FrobnicateXYZ"])
    m = _model([helper.make_node("Frob", ["X"], ["Y"], name="custom_node", domain="com.example")], [_vi("X")],
               [_vi("Y")])
    m.opset_import.add(domain="com.example", version=1)
    add("unknown_domain_op", m, "node 'custom_node' with op com.example.Frob", mention=["custom_node", "Frob"],
        valid_onnx=True, inspect_must_report=["custom_node", "Frob"])
    # Unknown ops with a known op between them: the message (or inspect's report) must name both
    # unknown ops ("every unsupported op at once"), not a knock-on error from the Add after them.
    add("unknown_op_midgraph", _model([helper.make_node("FrobnicateXYZ", ["X"], ["F"], name="mystery_node"),
                                       helper.make_node("Add", ["F", "X"], ["A"], name="add_after"),
                                       helper.make_node("Blorp", ["A"], ["Y"], name="second_unknown")],
                                      [_vi("X")], [_vi("Y")]),
        "FrobnicateXYZ -> Add -> Blorp: two unknown ops around a known one",
        mention=["mystery_node", "FrobnicateXYZ", "second_unknown", "Blorp"],
        valid_onnx=True, inspect_must_report=["mystery_node", "FrobnicateXYZ", "second_unknown", "Blorp"])
    add("wrong_arity", _model([helper.make_node("Add", ["X"], ["Y"], name="add_one_input")], [_vi("X")], [_vi("Y")]),
        "Add with one input", mention=["add_one_input"])
    add("type_mismatch", _model([helper.make_node("Add", ["X", "I"], ["Y"], name="add_mixed")],
                                [_vi("X"), _vi("I", elem=TensorProto.INT64)], [_vi("Y")]),
        "Add of float and int64", mention=["add_mixed"])
    add("reshape_bad_count", _model([helper.make_node("Reshape", ["X", "shape"], ["Y"], name="reshape_bad")],
                                    [_vi("X", shape=(2, 3))], [_vi("Y", shape=(4, 4))],
                                    [numpy_helper.from_array(np.array([4, 4], np.int64), "shape")]),
        "Reshape of 6 elements to [4,4]", mention=["reshape_bad"])
    add("attribute_wrong_type", _model([helper.make_node("Softmax", ["X"], ["Y"], name="softmax_bad", axis=1.5)],
                                       [_vi("X")], [_vi("Y")]),
        "Softmax with a float 'axis'", mention=["softmax_bad"])
    add("opset_zero", _model([helper.make_node("Relu", ["X"], ["Y"], name="relu")], [_vi("X")], [_vi("Y")], opset=0),
        "ai.onnx opset version 0")

    # ---- versions newer than fusec knows (refused unless --allow-newer-opset) ------------------------
    relu = [helper.make_node("Relu", ["X"], ["Y"], name="relu")]
    add("opset_newer", _model(relu, [_vi("X")], [_vi("Y")], opset=999), "ai.onnx opset 999",
        mention=["opset 999", "ai.onnx", "(28)", "--allow-newer-opset"])
    add("ir_version_newer", _model(relu, [_vi("X")], [_vi("Y")], ir_version=99), "IR version 99",
        mention=["IR version 99", f"({onnx.IR_VERSION}, as onnx", "--allow-newer-opset"])
    m = _model(relu, [_vi("X")], [_vi("Y")])
    m.opset_import.add(domain="ai.fusec", version=7)
    add("fusec_domain_newer", m, "ai.fusec opset 7 (fusec has 1)",
        mention=["opset 7", "ai.fusec", "(1)", "--allow-newer-opset"])

    # ---- declared sizes checked before anything is allocated --------------------------------------
    # An 80-byte file declaring an 8 GiB initializer must be refused from the file's own size, not after
    # allocating (the run's address-space cap would turn that into an out-of-memory error instead).
    w = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[2**31], raw_data=b"\0" * 4)
    add("initializer_huge_short_raw", _model([helper.make_node("Add", ["X", "W"], ["Y"], name="add")],
                                             [_vi("X", shape=(1,))], [_vi("Y", shape=(2**31,))], [w]),
        "initializer W of 2^31 floats with 4 bytes of raw_data", mention=["'W'", "needs 8589934592"])
    w = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[2**31], float_data=[1.0, 2.0])
    add("initializer_huge_short_typed", _model([helper.make_node("Add", ["X", "W"], ["Y"], name="add")],
                                               [_vi("X", shape=(1,))], [_vi("Y", shape=(2**31,))], [w]),
        "initializer W of 2^31 floats with 2 float_data values", mention=["'W'", "has 2 values"])

    # ---- external data ------------------------------------------------------------------------
    # ../x.bin: the file exists (one level up, i.e. in root), so only the location check stops it.
    _write(os.path.join(root, "x.bin"), W_BYTES)
    add("external_parent_dir", _valid_add(_external_w("../x.bin")), "external data location '../x.bin'",
        mention=["'W'"])
    outside = os.path.join(root, "outside")
    _write(os.path.join(outside, "w.bin"), W_BYTES)
    add("external_absolute", _valid_add(_external_w(os.path.join(outside, "w.bin"))),
        "external data location is an absolute path (to an existing file)", mention=["'W'"])
    d = os.path.join(root, "external_symlink")
    os.makedirs(d, exist_ok=True)
    link = os.path.join(d, "w.bin")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(os.path.join(outside, "w.bin"), link)
    add("external_symlink", _valid_add(_external_w("w.bin")),
        "external data 'w.bin' is a symlink to a file outside the model's folder", mention=["'W'"])
    d = os.path.join(root, "external_dir_symlink")
    os.makedirs(d, exist_ok=True)
    link = os.path.join(d, "sub")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(outside, link)
    add("external_dir_symlink", _valid_add(_external_w("sub/w.bin")),
        "external data 'sub/w.bin' where 'sub' is a symlink to a folder outside", mention=["'W'"])
    add("external_missing", _valid_add(_external_w("missing.bin")), "external data file does not exist",
        mention=["missing.bin"])
    _write(os.path.join(root, "external_offset_past_end", "w.bin"), W_BYTES)
    add("external_offset_past_end", _valid_add(_external_w("w.bin", offset=1 << 20)),
        "external data offset 1 MiB into a 16-byte file", mention=["'W'"])
    _write(os.path.join(root, "external_short_file", "w.bin"), W_BYTES[:8])
    add("external_short_file", _valid_add(_external_w("w.bin")),
        "external data file holds 8 of the 16 bytes needed", mention=["'W'"])
    _write(os.path.join(root, "external_length_mismatch", "w.bin"), W_BYTES)
    add("external_length_mismatch", _valid_add(_external_w("w.bin", length=12)),
        "external data length 12 for a 16-byte tensor", mention=["'W'"])
    _write(os.path.join(root, "external_bad_offset", "w.bin"), W_BYTES)
    t = _external_w("w.bin")
    e = t.external_data.add()
    e.key, e.value = "offset", "-5"
    add("external_bad_offset", _valid_add(t), "external data offset '-5'", mention=["'W'"])
    _write(os.path.join(root, "external_location_is_dir", "sub", "keep"), b"")
    add("external_location_is_dir", _valid_add(_external_w("sub")), "external data location is a folder",
        mention=["'W'"])

    # ---- paths ---------------------------------------------------------------------------------
    E.append(Entry("nonexistent_path", os.path.join(root, "no_such_dir", "model.onnx"), "a path that does not exist",
                   mention=["no_such_dir"]))
    d = os.path.join(root, "a_directory.onnx")
    os.makedirs(d, exist_ok=True)
    E.append(Entry("directory_as_model", d, "a folder given as the model", mention=["a_directory.onnx"]))
    return E


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: make_corpus.py DIR", file=sys.stderr)
        return 2
    for e in make_corpus(sys.argv[1]):
        print(f"{e.name:<28} {e.path}\n{'':<28} {e.what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

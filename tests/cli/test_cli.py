#!/usr/bin/env python3
"""End-to-end tests of the fusec command line.

    test_cli.py --fusec build/fusec --models models

Most tests use a tiny model built here (c = a + b, d = c * k, inputs a, b float [N,3]), which
needs only Add and Mul; the tests marked [mlp] use models/mlp_small.onnx and need its ops
(MatMul, LayerNormalization, Erf, Dropout, Relu) in the CPU backend.

Exit status 0 when every test passes, 1 otherwise; the last line is a one-line summary.
Runs in a few seconds (every fusec call is capped at 30 s).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback

import jsonschema
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SUBCOMMANDS = ["inspect", "run", "optimize", "bench", "profile", "compare"]
NOT_BUILT = ["optimize", "profile", "compare"]
K = np.array([2.0, 3.0, 4.0], np.float32)


class Failure(Exception):
    pass


class Ctx:
    def __init__(self, fusec: str, models: str, tmp: str):
        self.fusec, self.models, self.tmp = fusec, models, tmp
        self.tiny = os.path.join(tmp, "tiny.onnx")
        self.mlp = os.path.join(models, "mlp_small.onnx")
        self._n = 0

    def fresh(self, name: str) -> str:
        self._n += 1
        d = os.path.join(self.tmp, f"{self._n:02d}_{name}")
        os.makedirs(d)
        return d

    def fusec_run(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        try:
            return subprocess.run([self.fusec, *args], capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise Failure(f"`fusec {' '.join(args)}` did not finish within {timeout:.0f} s")

    def ok(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        p = self.fusec_run(*args, timeout=timeout)
        if p.returncode != 0:
            raise Failure(f"`fusec {' '.join(args)}` exit {p.returncode}: {p.stderr.strip()[:300]}")
        return p

    def usage_error(self, *args: str, mention: tuple[str, ...] = ()) -> str:
        """Expects exit 2 and one 'fusec: error:' line on stderr; returns the line."""
        p = self.fusec_run(*args)
        cmd = f"`fusec {' '.join(args)}`"
        if p.returncode != 2:
            raise Failure(f"{cmd}: exit {p.returncode}, expected 2 (stderr: {p.stderr.strip()[:200]!r})")
        lines = p.stderr.splitlines()
        if len(lines) != 1 or not lines[0].startswith("fusec: error: "):
            raise Failure(f"{cmd}: stderr should be one 'fusec: error: ' line, got {p.stderr!r}")
        for m in mention:
            if m not in lines[0]:
                raise Failure(f"{cmd}: message does not mention {m!r}: {lines[0]}")
        return lines[0]


def build_tiny(path: str) -> None:
    g = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"], name="add"), helper.make_node("Mul", ["c", "k"], ["d"], name="mul")],
        "tiny",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 3]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, ["N", 3]),
         helper.make_tensor_value_info("d", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(K, "k")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="fusec test_cli")
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, path)


def read_pb(path: str) -> tuple[str, np.ndarray]:
    t = TensorProto()
    with open(path, "rb") as f:
        data = f.read()
    try:
        t.ParseFromString(data)
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError
        raise Failure(f"{path} does not parse as an onnx TensorProto: {e}")
    if t.data_type == TensorProto.UNDEFINED:
        raise Failure(f"{path}: the TensorProto has no data_type")
    return t.name, numpy_helper.to_array(t)


def expect_array(got: np.ndarray, want: np.ndarray, what: str) -> None:
    if got.shape != want.shape or got.dtype != want.dtype:
        raise Failure(f"{what}: got {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}")
    if not np.allclose(got, want, rtol=1e-6, atol=1e-6):
        raise Failure(f"{what}: values differ, max abs err {np.abs(got - want).max():.3g}")


def tiny_inputs(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (n, 3)).astype(np.float32), rng.uniform(-1, 1, (n, 3)).astype(np.float32))


# ---- tests ------------------------------------------------------------------------------------

def test_help(c: Ctx):
    p = c.ok("--help")
    missing = [s for s in SUBCOMMANDS if not re.search(rf"^\s+{s}\b", p.stdout, re.M)]
    if missing:
        raise Failure(f"--help does not list {missing}")


def test_version(c: Ctx):
    p = c.ok("--version")
    if not re.match(r"^fusec \d+\.\d+", p.stdout):
        raise Failure(f"--version printed {p.stdout!r}, expected 'fusec X.Y...'")


def not_built_subcommands(c: Ctx) -> set[str]:
    """Subcommands that `fusec --help` marks "[not built yet ...]"."""
    help_text = c.ok("--help").stdout
    return {s for s in SUBCOMMANDS if re.search(rf"^\s+{s}\b.*not built", help_text, re.M)}


def test_not_built(c: Ctx):
    """optimize/profile/compare: while not built, exit 2 saying so; once built, a missing model is a
    usage error (exit 2), never "not built"."""
    pending = not_built_subcommands(c)
    for sub in NOT_BUILT:
        if sub in pending:
            line = c.usage_error(sub, c.tiny)
            if "not built" not in line:
                raise Failure(f"`fusec {sub}` should say it is not built: {line}")
        else:
            line = c.usage_error(sub, os.path.join(c.tmp, "no_such_model.onnx"))
            if "not built" in line:
                raise Failure(f"`fusec --help` lists {sub} as built, but it says: {line}")
    for sub in pending - set(NOT_BUILT):
        raise Failure(f"`fusec --help` marks {sub} as not built")


def test_optimize_roundtrip(c: Ctx):
    """Once `optimize` is built: it writes a valid ONNX model that computes what the original does."""
    if "optimize" in not_built_subcommands(c):
        print("     (optimize not built: checked by test_not_built)")
        return
    import onnxruntime as ort
    d = c.fresh("optimize")
    out = os.path.join(d, "tiny.opt.onnx")
    c.ok("optimize", c.tiny, "-o", out)
    m = onnx.load(out)
    onnx.checker.check_model(m, full_check=True)
    a, b = tiny_inputs(3, seed=5)
    for path in (c.tiny, out):
        if [o.name for o in onnx.load(path).graph.output] != ["c", "d"]:
            raise Failure(f"{os.path.basename(path)}: graph outputs renamed")
    want = ort.InferenceSession(c.tiny, providers=["CPUExecutionProvider"]).run(None, {"a": a, "b": b})
    got = ort.InferenceSession(out, providers=["CPUExecutionProvider"]).run(None, {"a": a, "b": b})
    for k in range(2):
        expect_array(got[k], want[k], f"optimized model output {k} in onnxruntime")


def test_unknown_flag(c: Ctx):
    c.usage_error("inspect", c.tiny, "--no-such-flag", mention=("--no-such-flag",))
    c.usage_error("run", c.tiny, "--output-dir", c.fresh("flag"), "--bogus")
    c.usage_error("--bogus")


def test_no_or_unknown_subcommand(c: Ctx):
    c.usage_error()
    c.usage_error("frobnicate", mention=("frobnicate",))


def test_inspect_json(c: Ctx):
    j = os.path.join(c.fresh("inspect"), "i.json")
    c.ok("inspect", c.tiny, "--batch", "2", "--json", j)
    with open(j) as f:
        r = json.load(f)
    if r.get("schema") != "fusec.inspect/1":
        raise Failure(f"inspect --json schema is {r.get('schema')!r}, expected 'fusec.inspect/1'")
    for key in ["inputs", "outputs", "op_histogram", "parameters", "flops"]:
        if key not in r:
            raise Failure(f"inspect --json lacks '{key}'")
    if [i["name"] for i in r["inputs"]] != ["a", "b"] or [o["name"] for o in r["outputs"]] != ["c", "d"]:
        raise Failure(f"inspect --json I/O: {r['inputs']} -> {r['outputs']}")
    if r["op_histogram"] != {"Add": 1, "Mul": 1}:
        raise Failure(f"op_histogram {r['op_histogram']}")
    if r["parameters"] != 3:
        raise Failure(f"parameters {r['parameters']}, expected 3")
    if r["flops"] is None or r["flops"] <= 0:
        raise Failure(f"flops {r['flops']} at --batch 2 (every shape is static)")


def test_run_default_pb(c: Ctx):
    d = c.fresh("run_pb")
    a, b = tiny_inputs(2)
    np.save(os.path.join(d, "a.npy"), a)
    np.save(os.path.join(d, "b.npy"), b)
    out = os.path.join(d, "out")
    c.ok("run", c.tiny, "--input", f"a={d}/a.npy", "--input", f"b={d}/b.npy", "--output-dir", out)
    files = sorted(os.listdir(out))
    if files != ["output_0.pb", "output_1.pb"]:
        raise Failure(f"run wrote {files}, expected output_0.pb, output_1.pb")
    name0, c0 = read_pb(os.path.join(out, "output_0.pb"))
    name1, d1 = read_pb(os.path.join(out, "output_1.pb"))
    if (name0, name1) != ("c", "d"):
        raise Failure(f"TensorProto names {name0!r}, {name1!r}; expected the graph output names 'c', 'd'")
    expect_array(c0, a + b, "output_0.pb")
    expect_array(d1, (a + b) * K, "output_1.pb")


def test_run_npy(c: Ctx):
    d = c.fresh("run_npy")
    a, b = tiny_inputs(5, seed=1)
    np.save(os.path.join(d, "a.npy"), a)
    np.save(os.path.join(d, "b.npy"), b)
    out = os.path.join(d, "out")
    c.ok("run", c.tiny, "--input", f"a={d}/a.npy", "--input", f"b={d}/b.npy", "--output-dir", out, "--format", "npy")
    if sorted(os.listdir(out)) != ["output_0.npy", "output_1.npy"]:
        raise Failure(f"run --format npy wrote {sorted(os.listdir(out))}")
    expect_array(np.load(os.path.join(out, "output_0.npy")), a + b, "output_0.npy")
    expect_array(np.load(os.path.join(out, "output_1.npy")), (a + b) * K, "output_1.npy")


def test_run_inputs_dir(c: Ctx):
    """The ONNX test_data_set_N layout: input_K.pb in graph-input order (with output_K.pb alongside)."""
    d = c.fresh("inputs_dir")
    ds = os.path.join(d, "test_data_set_0")
    os.makedirs(ds)
    a, b = tiny_inputs(4, seed=2)
    for k, (name, arr) in enumerate([("a", a), ("b", b), ]):
        with open(os.path.join(ds, f"input_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(arr, name).SerializeToString())
    for k, (name, arr) in enumerate([("c", a + b), ("d", (a + b) * K)]):
        with open(os.path.join(ds, f"output_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(arr, name).SerializeToString())
    out = os.path.join(d, "out")
    c.ok("run", c.tiny, "--inputs", ds, "--output-dir", out)
    for k in range(2):
        _, want = read_pb(os.path.join(ds, f"output_{k}.pb"))
        _, got = read_pb(os.path.join(out, f"output_{k}.pb"))
        expect_array(got, want, f"--inputs: output_{k}.pb")
    # A folder missing input_1.pb is a usage error naming what is missing.
    bad = os.path.join(d, "incomplete")
    os.makedirs(bad)
    with open(os.path.join(bad, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(a, "a").SerializeToString())
    c.usage_error("run", c.tiny, "--inputs", bad, "--output-dir", out, mention=("input_1",))


def test_batch_binding(c: Ctx):
    out = os.path.join(c.fresh("batch"), "out")
    c.ok("run", c.tiny, "--batch", "3", "--output-dir", out, "--format", "npy")
    for k in range(2):
        got = np.load(os.path.join(out, f"output_{k}.npy"))
        if got.shape != (3, 3) or got.dtype != np.float32:
            raise Failure(f"--batch 3: output_{k} is {got.dtype}{list(got.shape)}, expected float32[3, 3]")
    c0, d1 = (np.load(os.path.join(out, f"output_{k}.npy")) for k in range(2))
    expect_array(d1, c0 * K, "--batch 3: d = c * k")
    if not np.all((np.abs(c0) < 2) & (c0 != 0)):
        raise Failure("--batch 3: random inputs should be uniform in [-1, 1): a + b outside (-2, 2) or zero")
    # A symbolic batch with no binding is an error that says how to bind it.
    c.usage_error("run", c.tiny, "--output-dir", out, mention=("--batch",))
    c.usage_error("run", c.tiny, "--output-dir", out, "--batch", "0")
    c.usage_error("run", c.tiny, "--output-dir", out, "--batch", "-2")


def test_seed(c: Ctx):
    d = c.fresh("seed")
    outs = {}
    for tag, seed in [("s1", "7"), ("s1_again", "7"), ("s2", "8")]:
        out = os.path.join(d, tag)
        c.ok("run", c.tiny, "--batch", "2", "--seed", seed, "--output-dir", out, "--format", "npy")
        outs[tag] = np.load(os.path.join(out, "output_0.npy"))
    if not np.array_equal(outs["s1"], outs["s1_again"]):
        raise Failure("the same --seed gave different random inputs")
    if np.array_equal(outs["s1"], outs["s2"]):
        raise Failure("different --seed values gave the same random inputs")


def test_shape_flag(c: Ctx):
    out = os.path.join(c.fresh("shape"), "out")
    c.ok("run", c.tiny, "--shape", "a:4x3", "--shape", "b:4x3", "--output-dir", out, "--format", "npy")
    got = np.load(os.path.join(out, "output_1.npy"))
    if got.shape != (4, 3):
        raise Failure(f"--shape a:4x3 b:4x3: output is {list(got.shape)}, expected [4, 3]")
    line = c.usage_error("run", c.tiny, "--shape", "nosuch:4x3", "--output-dir", out, mention=("nosuch",))
    if not re.search(r"\ba\b.*\bb\b", line):
        raise Failure(f"unknown --shape name: the message should list the real inputs a, b: {line}")
    c.usage_error("inspect", c.tiny, "--shape", "nosuch:4x3", mention=("nosuch", "a", "b"))
    c.usage_error("run", c.tiny, "--shape", "a:4xq", "--output-dir", out)
    c.usage_error("run", c.tiny, "--shape", "a:4x3x2", "--output-dir", out, mention=("rank",))
    c.usage_error("run", c.tiny, "--shape", "a:4x5", "--output-dir", out)  # dim 1 is fixed at 3
    c.usage_error("run", c.tiny, "--shape", "a:4x3", "--shape", "b:5x3", "--output-dir", out)  # N is 4 and 5


def test_input_errors(c: Ctx):
    d = c.fresh("input_errors")
    out = os.path.join(d, "out")
    a, _ = tiny_inputs(2)
    np.save(os.path.join(d, "a.npy"), a)
    line = c.usage_error("run", c.tiny, "--input", f"zzz={d}/a.npy", "--batch", "2", "--output-dir", out,
                         mention=("zzz",))
    if not re.search(r"\ba\b.*\bb\b", line):
        raise Failure(f"unknown --input name: the message should list the real inputs a, b: {line}")
    c.usage_error("run", c.tiny, "--input", f"a={d}/missing.npy", "--batch", "2", "--output-dir", out,
                  mention=("missing.npy",))
    c.usage_error("run", c.tiny, "--input", "no-equals-sign", "--batch", "2", "--output-dir", out)
    c.usage_error("run", c.tiny, "--batch", "2", "--output-dir", out, "--format", "csv", mention=("csv",))
    c.usage_error("run", c.tiny, "--batch", "2")  # --output-dir is required
    # Inputs whose batch sizes disagree (N would be 2 and 5).
    np.save(os.path.join(d, "b5.npy"), np.zeros((5, 3), np.float32))
    c.usage_error("run", c.tiny, "--input", f"a={d}/a.npy", "--input", f"b={d}/b5.npy", "--output-dir", out)
    # An input of the wrong dtype.
    np.save(os.path.join(d, "a64.npy"), np.zeros((2, 3), np.float64))
    np.save(os.path.join(d, "b.npy"), np.zeros((2, 3), np.float32))
    c.usage_error("run", c.tiny, "--input", f"a={d}/a64.npy", "--input", f"b={d}/b.npy", "--output-dir", out)
    # A file that is not .npy, and a .pb that is not a TensorProto.
    with open(os.path.join(d, "junk.npy"), "wb") as f:
        f.write(b"not numpy")
    c.usage_error("run", c.tiny, "--input", f"a={d}/junk.npy", "--batch", "2", "--output-dir", out)


def test_output_dir_error(c: Ctx):
    """An --output-dir that cannot be created is bad input (exit 2), not an internal error."""
    d = c.fresh("output_dir")
    with open(os.path.join(d, "a_file"), "w") as f:
        f.write("x")
    c.usage_error("run", c.tiny, "--batch", "2", "--output-dir", os.path.join(d, "a_file", "sub"),
                  mention=("a_file",))


def test_external_data(c: Ctx):
    """A model whose initializer lives in a side file next to it loads and runs."""
    d = c.fresh("external")
    k = np.array([0.5, -1.0, 2.0], np.float32)
    t = TensorProto(name="k", data_type=TensorProto.FLOAT, dims=[3], data_location=TensorProto.EXTERNAL)
    with open(os.path.join(d, "weights.bin"), "wb") as f:
        f.write(b"\xff" * 8 + k.tobytes())
    for key, val in [("location", "weights.bin"), ("offset", "8"), ("length", "12")]:
        e = t.external_data.add()
        e.key, e.value = key, val
    g = helper.make_graph([helper.make_node("Mul", ["x", "k"], ["y"], name="mul")], "ext",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [t])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = os.path.join(d, "ext.onnx")
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.save(os.path.join(d, "x.npy"), x)
    c.ok("run", path, "--input", f"x={d}/x.npy", "--output-dir", os.path.join(d, "out"), "--format", "npy")
    expect_array(np.load(os.path.join(d, "out", "output_0.npy")), x * k, "external data: y = x * k")


def test_bench_json(c: Ctx):
    j = os.path.join(c.fresh("bench"), "b.json")
    p = c.ok("bench", c.tiny, "--batch", "2", "--iterations", "5", "--json", j, "--quiet", "--device", "cpu")
    with open(j) as f:
        r = json.load(f)
    if r.get("schema") != "fusec.bench/2":
        raise Failure(f"bench --json schema is {r.get('schema')!r}, expected 'fusec.bench/2'")
    schema_file = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "schemas", "bench.schema.json")
    with open(schema_file) as f:
        jsonschema.validate(r, json.load(f))
    names = [v.get("name") for v in r.get("variants", [])]
    if names != ["as_given", "optimized"]:
        raise Failure(f"bench compares the model as given and optimized by default; variants are {names}")
    need = ["min", "mean", "median", "p90", "p95", "p99", "max"]
    for v in r["variants"]:
        lat = v["latency_ms"]
        if not (0 <= lat["min"] <= lat["median"] <= lat["p90"] <= lat["p95"] <= lat["p99"] <= lat["max"]):
            raise Failure(f"bench latencies are not ordered min <= median <= p90 <= p95 <= p99 <= max: {lat}")
        if v["iterations"] != 5 or len(v["samples_ms"]) != 5:
            raise Failure(f"bench --iterations 5 reports {v['iterations']} iterations, {len(v['samples_ms'])} samples")
        if abs(sorted(v["samples_ms"])[2] - lat["median"]) > 1e-9:
            raise Failure("bench's median is not the median of its samples")
    if r["speedup_median"] is None or abs(r["speedup_median"] - r["variants"][0]["latency_ms"]["median"] / r["variants"][1]["latency_ms"]["median"]) > 1e-6:
        raise Failure(f"speedup_median {r['speedup_median']} is not as-given median / optimized median")
    if r.get("batch") != 2 or r.get("device") != "cpu" or r.get("precision") != "fp32":
        raise Failure(f"bench reports batch {r.get('batch')}, device {r.get('device')}, precision {r.get('precision')}")
    if "median ms" not in p.stdout or "speedup" not in p.stdout:
        raise Failure("bench prints no latency table and speedup on stdout")
    p = c.ok("bench", c.tiny, "--batch", "2", "--iterations", "3", "--no-compare", "--json", j, "--quiet", "--device", "cpu")
    with open(j) as f:
        r = json.load(f)
    if [v["name"] for v in r["variants"]] != ["as_given"] or r["speedup_median"] is not None:
        raise Failure("bench --no-compare should run the model as given only")
    c.usage_error("bench", c.tiny, "--batch", "2", "--iterations", "0")
    c.usage_error("bench", c.tiny, "--batch", "2", "--iterations", "5", "--duration", "1")
    c.usage_error("bench", c.tiny, "--batch", "2", "--device", "tpu", mention=("--device",))
    c.usage_error("bench", c.tiny, "--batch", "2", "--device", "cpu", "--precision", "fp16", mention=("fp16",))
    c.usage_error("bench", c.tiny, "--batch", "2", "--precision", "fp8", mention=("--precision",))


def test_optimize_device_flags(c: Ctx):
    """The engine's decisions are asked for with --explain --device cuda only: --device without
    --explain, and --precision/--gpu without --device cuda, are usage errors naming the flag, and
    nothing is written."""
    d = c.fresh("optimize_device")
    out = os.path.join(d, "o.onnx")
    c.usage_error("optimize", c.tiny, "--batch", "2", "-o", out, "--device", "cuda", mention=("--explain",))
    c.usage_error("optimize", c.tiny, "--batch", "2", "-o", out, "--precision", "fp16", mention=("--precision",))
    c.usage_error("optimize", c.tiny, "--batch", "2", "-o", out, "--gpu", "1", mention=("--gpu",))
    if os.path.exists(out):
        raise Failure("optimize wrote a model after a usage error")
    p = c.ok("optimize", c.tiny, "--batch", "2", "-o", out, "--explain", "--device", "cpu")
    if "device decisions" in p.stdout:
        raise Failure("optimize --explain --device cpu built an engine and named device decisions")


def test_no_gpu_errors(c: Ctx):
    """Without a usable GPU, asking for one is one clear error (exit 2), never a crash; auto picks the CPU."""
    probe = subprocess.run([c.fusec, "run", c.tiny, "--batch", "2", "--output-dir", c.fresh("auto")],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise Failure(f"run with the default device failed: {probe.stderr}")
    if "device cuda" in probe.stdout:
        return  # this machine has a GPU: nothing to check here
    if "device cpu" not in probe.stdout:
        raise Failure(f"run does not say which device it used: {probe.stdout!r}")
    for sub in (["run", c.tiny, "--batch", "2", "--output-dir", c.fresh("cuda")], ["bench", c.tiny, "--batch", "2"],
                ["profile", c.tiny, "--batch", "2"], ["profile", c.tiny, "--batch", "2", "--counters"],
                ["optimize", c.tiny, "--batch", "2", "--explain", "-o", os.path.join(c.fresh("opt_cuda"), "o.onnx")]):
        p = subprocess.run([c.fusec] + sub + ["--device", "cuda"], capture_output=True, text=True)
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        # Either no usable GPU, or (a build without the CUDA backend, as the ASan build) no CUDA.
        if p.returncode != 2 or len(lines) != 1 or not lines[0].startswith("fusec: error:") or \
                ("GPU" not in lines[0] and "CUDA" not in lines[0]):
            raise Failure(f"{sub[0]} --device cuda without a GPU: exit {p.returncode}, stderr {p.stderr!r}")


def test_mlp_inspect(c: Ctx):
    """[mlp] inspect of the committed MLP: I/O, parameter count, op histogram, FLOPs."""
    model = onnx.load(c.mlp)
    j = os.path.join(c.fresh("mlp_inspect"), "i.json")
    c.ok("inspect", c.mlp, "--batch", "2", "--json", j)
    with open(j) as f:
        r = json.load(f)
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    if r["parameters"] != params:
        raise Failure(f"parameters {r['parameters']}, the file holds {params}")
    hist: dict[str, int] = {}
    for n in model.graph.node:
        hist[n.op_type] = hist.get(n.op_type, 0) + 1
    if r["op_histogram"] != hist:
        raise Failure(f"op_histogram {r['op_histogram']} != {hist}")
    if r["inputs"][0]["name"] != "x" or r["inputs"][0]["shape"] != "2x64":
        raise Failure(f"inputs {r['inputs']}, expected x of shape 2x64 at --batch 2")
    # 24 x (64x64 MatMul) + 64x32 + 32x10, 2 FLOPs per multiply-add, batch 2: a lower bound.
    matmul_flops = 2 * 2 * (24 * 64 * 64 + 64 * 32 + 32 * 10)
    if r["flops"] is None or r["flops"] < matmul_flops:
        raise Failure(f"flops {r['flops']} < the MatMuls' {matmul_flops}")
    if r.get("unsupported"):
        raise Failure(f"inspect says fusec cannot run {r['unsupported']}")


def test_mlp_run(c: Ctx):
    """[mlp] run the committed MLP at --batch 2 with pb and npy output; both agree."""
    d = c.fresh("mlp_run")
    c.ok("run", c.mlp, "--batch", "2", "--output-dir", os.path.join(d, "pb"))
    c.ok("run", c.mlp, "--batch", "2", "--output-dir", os.path.join(d, "npy"), "--format", "npy")
    name, y = read_pb(os.path.join(d, "pb", "output_0.pb"))
    if name != "y" or y.shape != (2, 10) or y.dtype != np.float32 or not np.all(np.isfinite(y)):
        raise Failure(f"mlp output {name!r} {y.dtype}{list(y.shape)}; expected finite float32 'y' [2, 10]")
    expect_array(np.load(os.path.join(d, "npy", "output_0.npy")), y, "mlp: npy vs pb output")


def _tiny_with(c: Ctx, d: str, edit) -> str:
    """A copy of the tiny model with `edit(model)` applied, saved in d."""
    m = onnx.load(c.tiny)
    edit(m)
    path = os.path.join(d, "model.onnx")
    onnx.save(m, path)
    return path


def test_newer_opset(c: Ctx):
    """A newer opset or IR version is refused by every model-loading subcommand, naming the domain
    and both versions; --allow-newer-opset loads it with exactly one warning line."""
    d = c.fresh("newer_opset")
    newer = _tiny_with(c, d, lambda m: m.opset_import[0].__setattr__("version", 999))
    out = os.path.join(d, "out")
    for sub, extra in [("inspect", []), ("run", ["--output-dir", out]), ("optimize", ["-o", os.path.join(d, "o.onnx")]),
                       ("bench", ["--iterations", "1", "--quiet"])]:
        c.usage_error(sub, newer, "--batch", "2", *extra, mention=("opset 999", "ai.onnx", "(28)", "--allow-newer-opset"))
        p = c.ok(sub, newer, "--batch", "2", "--allow-newer-opset", *extra)
        warnings = [l for l in p.stderr.splitlines() if l.startswith("fusec: warning: ")]
        if len(warnings) != 1 or "opset 999" not in warnings[0] or len(p.stderr.splitlines()) != 1:
            raise Failure(f"{sub} --allow-newer-opset: expected one warning line, got {p.stderr!r}")
    ir = _tiny_with(c, d, lambda m: m.__setattr__("ir_version", 99))
    c.usage_error("inspect", ir, mention=("IR version 99", f"({onnx.IR_VERSION}, as onnx"))
    c.ok("inspect", ir, "--allow-newer-opset")


def test_max_memory(c: Ctx):
    """--max-memory caps what fusec allocates: past it, one error naming what needed the memory."""
    d = c.fresh("max_memory")
    out = os.path.join(d, "out")
    c.ok("run", c.tiny, "--batch", "4", "--output-dir", out, "--max-memory", "64K")
    c.usage_error("run", c.tiny, "--batch", "100000", "--output-dir", out, "--max-memory", "64K",
                  mention=("needs", "memory limit is 64.00 KiB", "--max-memory"))
    c.usage_error("run", c.tiny, "--batch", "2", "--output-dir", out, "--max-memory", "lots", mention=("--max-memory",))
    # A model whose declared input alone is larger than the machine: refused by the default limit.
    big = _tiny_with(c, d, lambda m: [dim.__setattr__("dim_value", 1 << 40) for dim in
                                      (m.graph.input[0].type.tensor_type.shape.dim[0], m.graph.input[1].type.tensor_type.shape.dim[0])])
    c.usage_error("run", big, "--output-dir", out, mention=("needs", "memory limit"))


def test_outputs_replaced_whole(c: Ctx):
    """optimize keeps external data when the input has it, writes through temporary files (none
    left behind) and can overwrite its previous output."""
    d = c.fresh("atomic")
    k = np.linspace(-1, 1, 600).astype(np.float32)
    g = helper.make_graph([helper.make_node("Mul", ["a", "k"], ["y"], name="mul")], "big_k",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 600])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 600])],
                          [numpy_helper.from_array(k, "k")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    src = os.path.join(d, "src")
    os.makedirs(src)
    onnx.save(m, os.path.join(src, "model.onnx"), save_as_external_data=True, location="model.onnx.data",
              size_threshold=0)
    for _ in range(2):
        c.ok("optimize", os.path.join(src, "model.onnx"), "--batch", "2", "-o", os.path.join(d, "opt.onnx"))
    names = sorted(os.listdir(d))
    if names != ["opt.onnx", "opt.onnx.data", "src"]:
        raise Failure(f"expected the model, its external data and nothing else, got {names}")
    back = onnx.load(os.path.join(d, "opt.onnx"))
    onnx.checker.check_model(back)
    if numpy_helper.to_array(next(t for t in back.graph.initializer if t.name == "k")).shape != (600,):
        raise Failure("the optimized model's k does not load back")


def profile_json(c: Ctx, model: str, *extra: str) -> tuple[dict, subprocess.CompletedProcess]:
    d = c.fresh("profile")
    j = os.path.join(d, "p.json")
    t = os.path.join(d, "t.json")
    # A profile without cached peaks measures them first (a large GEMM and a copy): 24 s under
    # ASan on two cores, and past 30 s while ctest runs another test beside it.
    p = c.ok("profile", model, "--device", "cpu", "--iterations", "4", "--warmup", "1", "--report", j, "--trace", t,
             *extra, timeout=120)
    with open(j) as f:
        r = json.load(f)
    schema_file = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "schemas", "profile.schema.json")
    with open(schema_file) as f:
        jsonschema.validate(r, json.load(f))
    with open(t) as f:
        trace = json.load(f)
    slices = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    if not slices or any(e["dur"] < 0 or e["ts"] < 0 for e in slices):
        raise Failure(f"profile --trace: {len(slices)} slices, or negative times")
    return r, p


def test_profile_cpu(c: Ctx):
    """The CPU profile of every shipped model: schema, every node present, per-iteration node times
    within the wall time, FLOPs and bytes equal to the cost model's (inspect's totals)."""
    os.environ["FUSEC_PEAKS_CACHE"] = os.path.join(c.tmp, "peaks.json")
    for name in sorted(os.listdir(c.models)):
        if not name.endswith(".onnx") or name.startswith("near_miss"):
            continue
        model = os.path.join(c.models, name)
        ij = os.path.join(c.fresh("inspect"), "i.json")
        c.ok("inspect", model, "--batch", "2", "--json", ij)
        with open(ij) as f:
            ins = json.load(f)
        r, p = profile_json(c, model, "--batch", "2", "--as-given")
        if r["variant"] != "as_given" or r["device"]["kind"] != "cpu" or r["iterations"] != 4:
            raise Failure(f"{name}: variant {r['variant']}, device {r['device']}, iterations {r['iterations']}")
        names = [n["name"] for n in r["nodes"]]
        want = [n.name for n in onnx.load(model).graph.node]
        if len(names) != ins["nodes"] or sorted(names) != sorted(want):
            raise Failure(f"{name}: profile nodes differ from the model's: missing {set(want) - set(names)}, extra {set(names) - set(want)}")
        wall = r["modes"][0]["samples_ms"]
        for i, w in enumerate(wall):
            s = sum(n["samples_ms"][i] for n in r["nodes"])
            if not 0 < s <= w:
                raise Failure(f"{name}: iteration {i}: the nodes' times sum to {s} ms, the wall time is {w} ms")
        for k in ("flops", "bytes_read", "bytes_written"):
            if abs(r["totals"][k] - ins[k]) > 1e-6 * max(1.0, ins[k]):
                raise Failure(f"{name}: profile {k} {r['totals'][k]} != the cost model's {ins[k]} (inspect)")
        for n in r["nodes"]:
            if n["flops"] is not None and n["median_ms"] > 0 and n["flops"] + n["bytes_read"] + n["bytes_written"] > 0:
                if abs(n["bytes_per_s"] - (n["bytes_read"] + n["bytes_written"]) / (n["median_ms"] * 1e-3)) > 1e-6 * n["bytes_per_s"]:
                    raise Failure(f"{name}: node {n['name']}: bytes_per_s is not bytes / median time")
                if n["bound"] not in ("memory", "compute") or not n["pct_of_peak"] > 0:
                    raise Failure(f"{name}: node {n['name']}: no roofline verdict: {n['bound']}, {n['pct_of_peak']}")
        if "top 10 nodes by time" not in p.stdout or "peaks" not in p.stdout:
            raise Failure(f"{name}: profile prints no summary: {p.stdout[:300]}")
    # The peaks are cached after the first profile, and a second profile says so.
    r, _ = profile_json(c, c.mlp, "--batch", "2")
    if r["peaks"]["source"] != "cache" or r["peaks"]["cache_path"] != os.environ["FUSEC_PEAKS_CACHE"]:
        raise Failure(f"the second profile did not use the cached peaks: {r['peaks']}")
    if r["variant"] != "optimized":
        raise Failure("profile runs the optimized model by default")
    # --compare-unfused: the MLP's fusions are listed, and the node count drops.
    r, p = profile_json(c, c.mlp, "--batch", "2", "--compare-unfused")
    u = r["compare_unfused"]
    if not u["fusions"] or u["nodes_after"] >= u["nodes_before"] or "fusion (as given -> optimized" not in p.stdout:
        raise Failure(f"--compare-unfused lists no fusion: {u['nodes_before']} -> {u['nodes_after']}, {len(u['fusions'])} rows")
    for f in u["fusions"]:
        if len(f["originals"]) < 1 or f["ms_saved"] != f["ms_saved"]:
            raise Failure(f"--compare-unfused row without originals: {f}")


def test_profile_project(c: Ctx):
    """Without a model, profile runs every model of ./fusec.toml (examples/ci), one report each;
    without a project file either, one error saying what to do."""
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "ci")
    d = c.fresh("profile_project")
    p = subprocess.run([c.fusec, "profile", "--device", "cpu", "--iterations", "2", "--warmup", "0",
                        "--report", os.path.join(d, "p.json")], cwd=example, capture_output=True, text=True,
                       timeout=120, stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise Failure(f"profile in examples/ci: exit {p.returncode}: {p.stderr.strip()[:300]}")
    reports = sorted(f for f in os.listdir(d) if f.startswith("p.") and f.endswith(".json"))
    if len(reports) < 2 or p.stdout.count("\n== ") + p.stdout.startswith("== ") != len(reports):
        raise Failure(f"profile in examples/ci wrote {reports}; stdout: {p.stdout[:300]}")
    p = subprocess.run([c.fusec, "profile"], cwd=d, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    if p.returncode != 2 or "fusec.toml" not in p.stderr or not p.stderr.startswith("fusec: error:"):
        raise Failure(f"profile with no model and no fusec.toml: exit {p.returncode}, {p.stderr!r}")


def test_profile_errors(c: Ctx):
    c.usage_error("profile", c.tiny, "--batch", "2", "--device", "cpu", "--iterations", "0", mention=("--iterations",))
    c.usage_error("profile", c.tiny, "--batch", "2", "--device", "cpu", "--counters", mention=("--counters",))
    c.usage_error("profile", c.tiny, "--batch", "2", "--device", "cpu", "--as-given", "--compare-unfused")
    c.usage_error("profile", c.tiny, "--device", "cpu", mention=("--batch",))
    c.usage_error("profile", os.path.join(c.tmp, "missing.onnx"), "--device", "cpu", mention=("missing.onnx",))
    d = c.fresh("profile_err")
    c.usage_error("profile", c.tiny, "--batch", "2", "--device", "cpu", "--report", os.path.join(d, "no", "such", "dir", "r.json"))


def test_optimize_verifies_masks_or_refuses(c: Ctx):
    """A (1 - m)·finfo.min mask from an int input: read only as a float value, it is drawn as 0/1
    from the start and the report names it; squared first (integer arithmetic: not only a mask),
    random ids in [0, 64) make the original NaN everywhere, so verification retries with 0/1 and
    says so; an output that is NaN whatever the inputs is NOT VERIFIED (exit 3, nothing written),
    never "ok"."""
    d = c.fresh("verify_nan")
    fmin = numpy_helper.from_array(np.array(np.finfo(np.float32).min, np.float32), "fmin")
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    g = helper.make_graph(
        [helper.make_node("Cast", ["attention_mask"], ["f"], to=TensorProto.FLOAT, name="cast"),
         helper.make_node("Sub", ["one", "f"], ["inv"], name="sub"),
         helper.make_node("Mul", ["inv", "fmin"], ["mask"], name="mul"),
         helper.make_node("Add", ["x", "mask"], ["s"], name="add"),
         helper.make_node("Softmax", ["s"], ["y"], axis=-1, name="softmax")],
        "mask", [helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [2, 8]),
                 helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], [one, fmin])
    def save(graph, path):
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        onnx.save(m, path)

    mask_model = os.path.join(d, "mask.onnx")
    save(g, mask_model)
    p = c.ok("optimize", mask_model, "-o", os.path.join(d, "mask.opt.onnx"))
    if "0/1 for 'attention_mask'" not in p.stdout or not re.search(r"\by +max abs .* ok", p.stdout):
        raise Failure(f"mask model: expected a verified output with the mask drawn 0/1, got:\n{p.stdout}")
    g.node.insert(0, helper.make_node("Mul", ["attention_mask", "attention_mask"], ["squared"], name="square"))
    g.node[1].input[0] = "squared"
    squared_model = os.path.join(d, "squared.onnx")
    save(g, squared_model)
    p = c.ok("optimize", squared_model, "-o", os.path.join(d, "squared.opt.onnx"))
    if "integer inputs 0/1" not in p.stdout or not re.search(r"\by +max abs .* ok", p.stdout):
        raise Failure(f"squared mask model: expected a verified output with 0/1 integer inputs, got:\n{p.stdout}")
    inf = numpy_helper.from_array(np.array(np.inf, np.float32), "inf")
    g = helper.make_graph([helper.make_node("Mul", ["x", "inf"], ["p"], name="mul"),
                           helper.make_node("Sub", ["p", "p"], ["y"], name="sub")],
                          "nan", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], [inf])
    nan_model, out = os.path.join(d, "nan.onnx"), os.path.join(d, "nan.opt.onnx")
    save(g, nan_model)
    p = c.fusec_run("optimize", nan_model, "-o", out)
    if p.returncode != 3 or "NOT VERIFIED" not in p.stdout or os.path.exists(out):
        raise Failure(f"all-NaN model: exit {p.returncode}, wrote {os.path.exists(out)}, stdout:\n{p.stdout}")
    c.ok("optimize", nan_model, "-o", out, "--no-check")


def test_made_up_inputs_a_model_refuses(c: Ctx):
    """Positions as a running sum of an int mask, then a table lookup (OPT's learned positions):
    random ints in [0, 64) index past the table, so bench, profile and run draw them from {0, 1}
    instead and say so on stderr; a model that refuses 0/1 too gets its own error, one line, exit 2.
    An input given as a file is never redrawn."""
    d = c.fresh("made_up_inputs")
    axis = numpy_helper.from_array(np.array(1, np.int64), "axis")

    def save(table_rows: int, name: str) -> str:
        t = numpy_helper.from_array(np.arange(table_rows * 4, dtype=np.float32).reshape(table_rows, 4), "table")
        g = helper.make_graph(
            [helper.make_node("CumSum", ["attention_mask", "axis"], ["pos"], name="positions"),
             helper.make_node("Gather", ["table", "pos"], ["y"], axis=0, name="lookup")],
            "positions", [helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [2, 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 4])], [t, axis])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        path = os.path.join(d, name)
        onnx.save(m, path)
        return path

    model = save(10, "positions.onnx")  # running sums of 0/1 over 8 tokens stay below 10
    note = "drawn from {0, 1} instead"
    for args in (("bench", model, "--device", "cpu", "--iterations", "2", "--warmup", "0"),
                 ("profile", model, "--device", "cpu", "--iterations", "2", "--warmup", "0"),
                 ("run", model, "--output-dir", os.path.join(d, "out"))):
        p = c.ok(*args)
        if note not in p.stderr or "is out of range" not in p.stderr:
            raise Failure(f"`fusec {args[0]}`: expected the note naming the refusal, stderr: {p.stderr!r}")
    out = read_pb(os.path.join(d, "out", "output_0.pb"))[1]
    if out.shape != (2, 8, 4) or out.max() > 39:
        raise Failure(f"run on 0/1 masks: output {out.shape}, max {out.max()}")
    # A table of one row: 0/1 masks index past it too; the error is the model's, once, exit 2.
    c.usage_error("bench", save(1, "one_row.onnx"), "--device", "cpu", "--iterations", "2",
                  mention=("is out of range", "lookup"))
    # The mask given as a file is the user's data: not redrawn, its error stands.
    mask = os.path.join(d, "mask.npy")
    np.save(mask, np.full((2, 8), 5, np.int64))
    p = c.fusec_run("run", model, "--input", f"attention_mask={mask}", "--output-dir", os.path.join(d, "out2"))
    if p.returncode != 2 or note in p.stderr or "is out of range" not in p.stderr:
        raise Failure(f"run with a given mask: exit {p.returncode}, stderr {p.stderr!r}")


def test_numeric_flags_are_checked(c: Ctx):
    """Every numeric flag is a finite number in its range (project/numbers.h), else one error naming
    the flag and the value, exit 2, before any work: NaN once made bench run forever and optimize
    verify nothing."""
    out = c.fresh("numeric_flags")
    m = os.path.join(out, "m.onnx")
    bench = ["bench", c.tiny, "--batch", "2", "--device", "cpu", "--no-compare", "--quiet"]
    cases = [
        (bench + ["--duration", "nan"], "--duration must be a number of seconds greater than 0", "'nan'"),
        (bench + ["--duration", "inf"], "--duration must be", "'inf'"),
        (bench + ["--duration", "-1"], "--duration must be", "'-1'"),
        (bench + ["--iterations", "0"], "--iterations must be an integer from 1", "'0'"),
        (bench + ["--iterations", "1e3"], "--iterations must be an integer", "'1e3'"),
        (bench + ["--warmup", "-1"], "--warmup must be an integer from 0", "'-1'"),
        (bench + ["--seed", "-1"], "--seed must be an integer", "'-1'"),
        (["optimize", c.tiny, "-o", m, "--rtol", "nan"], "--rtol must be a number greater than 0", "'nan'"),
        (["optimize", c.tiny, "-o", m, "--atol", "nan"], "--atol must be a number greater than 0", "'nan'"),
        (["optimize", c.tiny, "-o", m, "--rtol", "-1"], "--rtol must be a number greater than 0", "'-1'"),
        (["optimize", c.tiny, "-o", m, "--atol", "inf"], "--atol must be", "'inf'"),
        (["optimize", c.tiny, "-o", m, "--check", "-1"], "--check must be an integer from 0", "'-1'"),
        (["optimize", c.tiny, "-o", m, "--fold-cap-mb", "inf"], "--fold-cap-mb must be a number of MiB", "'inf'"),
        (["profile", c.tiny, "--batch", "2", "--device", "cpu", "--top", "0"], "--top must be", "'0'"),
        (["profile", c.tiny, "--batch", "2", "--device", "cpu", "--iterations", "nan"], "--iterations must be", "'nan'"),
        (["inspect", c.tiny, "--batch", "0"], "--batch must be an integer of at least 1", "'0'"),
        (["run", c.tiny, "--output-dir", out, "--gpu", "-1"], "--gpu must be an integer from 0", "'-1'"),
    ]
    for args, *mention in cases:
        c.usage_error(*args, mention=tuple(mention))
    if os.path.exists(m):
        raise Failure("optimize wrote a model despite a bad flag")
    # The same flags at good values still work, tolerances exactly as given.
    report = os.path.join(out, "r.json")
    c.ok("optimize", c.tiny, "--batch", "2", "-o", m, "--rtol", "4e-7", "--atol", "2.5e-6", "--report", report)
    v = json.load(open(report))["verification"]
    if v["rtol"] != 4e-7 or v["atol"] != 2.5e-6:
        raise Failure(f"tolerances changed on the way: {v['rtol']}, {v['atol']}")
    c.ok("bench", c.tiny, "--batch", "2", "--device", "cpu", "--no-compare", "--quiet", "--duration", "0.05")


def test_errors_are_one_line(c: Ctx):
    """A value echoed in an error keeps its control characters escaped: one line, never a second,
    forged `fusec: error:` line."""
    line = c.usage_error("inspect", c.tiny, "--shape", "x:2x64\nfusec: error: forged", mention=("x:2x64\\nfusec: error: forged",))
    if line.count("fusec: error:") != 2:  # the real prefix and the escaped, quoted one
        raise Failure(line)
    c.usage_error("bogus\x1b[2Jcmd", mention=("bogus\\x1b[2Jcmd",))
    c.usage_error("optimize", c.tiny, "--rtol", "1\n2", mention=("'1\\n2'",))
    d = c.fresh("one_line_toml")
    open(os.path.join(d, "fusec.toml"), "w").write('baselines = "b"\n[[model]]\npath = "x\\nfusec: error: all good"\n')
    p = subprocess.run([c.fusec, "check"], capture_output=True, text=True, cwd=d, timeout=30)
    lines = p.stderr.splitlines()
    if p.returncode != 2 or len(lines) != 1 or "x\\nfusec: error: all good" not in lines[0]:
        raise Failure(f"fusec.toml path with a newline: exit {p.returncode}, stderr {p.stderr!r}")


def test_json_outputs_escape_non_utf8(c: Ctx):
    """A model file or node name that is not UTF-8 is written to JSON with its bytes as \\xNN, not an
    internal error: inspect --json, optimize --report, profile --report."""
    d = c.fresh("non_utf8")
    model = os.path.join(os.fsencode(d), b"m\xff.onnx")
    with open(c.tiny, "rb") as src, open(model, "wb") as dst:
        dst.write(src.read())
    node = os.path.join(d, "node.onnx")
    m = onnx.load(c.tiny)
    m.graph.node[0].name = "add_XX"
    open(node, "wb").write(m.SerializeToString().replace(b"add_XX", b"add_\xff\xfe"))

    def run(*args) -> None:
        p = subprocess.run([c.fusec, *args], capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            raise Failure(f"{args}: exit {p.returncode}: {p.stderr[-300:]!r}")

    j1, j2, j3 = (os.path.join(d, f) for f in ("i.json", "o.json", "p.json"))
    run("inspect", model, "--batch", "2", "--json", j1)
    if json.load(open(j1))["model"] != d + "/m\\xff.onnx":
        raise Failure(f"inspect --json model: {json.load(open(j1))['model']!r}")
    run("optimize", node, "--batch", "2", "-o", os.path.join(d, "n.opt.onnx"), "--report", j2)
    run("profile", node, "--batch", "2", "--device", "cpu", "--iterations", "2", "--warmup", "0", "--as-given", "--report", j3)
    names = [n["name"] for n in json.load(open(j3))["nodes"]]
    if "add_\\xff\\xfe" not in names:
        raise Failure(f"profile --report node names: {names}")
    json.load(open(j2))


def test_data_dependent_shapes(c: Ctx):
    """A model whose shapes its data decides past some node (NonZero: the positive entries of
    Relu(x), gathered and summed) runs, benches and profiles on the CPU: only the inputs must be
    bound. The sum matches numpy's; bench's and profile's JSON follow their schemas; the NonZero and
    the nodes after it, whose costs the shapes cannot give, are in the profile all the same."""
    d = c.fresh("data_dependent")
    model = os.path.join(d, "nz.onnx")
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("NonZero", ["r"], ["nz"], name="nonzero"),
         helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0], name="indices"),
         helper.make_node("GatherND", ["r", "idx"], ["picked"], name="picked"),
         helper.make_node("ReduceSum", ["picked"], ["sum"], keepdims=0, name="sum")],
        "nonzero_tail",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5])],
        [helper.make_tensor_value_info("sum", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("idx", TensorProto.INT64, ["K", 2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="fusec test_cli")
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, model)
    x = np.random.default_rng(3).uniform(-1, 1, (4, 5)).astype(np.float32)
    np.save(os.path.join(d, "x.npy"), x)
    out = os.path.join(d, "out")
    c.ok("run", model, "--input", "x=" + os.path.join(d, "x.npy"), "--format", "npy", "--output-dir", out,
         "--device", "cpu")
    got = np.load(os.path.join(out, "output_0.npy"))
    if got.shape != () or not np.isclose(got, np.maximum(x, 0).sum(), rtol=1e-5):
        raise Failure(f"run: sum {got} (shape {got.shape}), numpy {np.maximum(x, 0).sum()}")
    j = os.path.join(d, "b.json")
    c.ok("bench", model, "--batch", "3", "--iterations", "3", "--json", j, "--quiet", "--device", "cpu")
    with open(j) as f:
        r = json.load(f)
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "schemas", "bench.schema.json")) as f:
        jsonschema.validate(r, json.load(f))
    if [v["iterations"] for v in r["variants"]] != [3, 3]:
        raise Failure(f"bench of the NonZero model: iterations {[v['iterations'] for v in r['variants']]}")
    r, _ = profile_json(c, model, "--batch", "3", "--as-given")
    names = {n["name"]: n for n in r["nodes"]}
    if set(names) != {"relu", "nonzero", "indices", "picked", "sum"}:
        raise Failure(f"profile of the NonZero model: nodes {sorted(names)}")
    if names["relu"]["flops"] is None or names["picked"]["flops"] is not None:
        raise Failure("profile: Relu's cost comes from its shapes, GatherND's (after the NonZero) cannot: "
                      f"{names['relu']['flops']}, {names['picked']['flops']}")
    # An input left unbound is still an error that says how to bind it.
    c.usage_error("bench", model, "--device", "cpu", mention=("--batch",))


TESTS = [test_help, test_version, test_not_built, test_optimize_roundtrip, test_unknown_flag, test_no_or_unknown_subcommand,
         test_inspect_json, test_run_default_pb, test_run_npy, test_run_inputs_dir, test_batch_binding, test_seed,
         test_shape_flag, test_input_errors, test_output_dir_error, test_external_data, test_bench_json, test_optimize_device_flags, test_no_gpu_errors,
         test_mlp_inspect, test_mlp_run, test_newer_opset, test_max_memory, test_outputs_replaced_whole, test_profile_cpu,
         test_profile_project, test_profile_errors, test_optimize_verifies_masks_or_refuses, test_made_up_inputs_a_model_refuses,
         test_numeric_flags_are_checked,
         test_errors_are_one_line, test_json_outputs_escape_non_utf8, test_data_dependent_shapes]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fusec", required=True)
    ap.add_argument("--models", required=True, help="folder with mlp_small.onnx")
    ap.add_argument("-k", dest="only", help="run only tests whose name contains this")
    args = ap.parse_args()
    fusec = os.path.abspath(args.fusec)
    if not os.access(fusec, os.X_OK):
        print(f"cli: FAIL: {args.fusec} is not an executable")
        return 1
    t0 = time.monotonic()
    failed = []
    tests = [t for t in TESTS if not args.only or args.only in t.__name__]
    with tempfile.TemporaryDirectory(prefix="fusec_cli_") as tmp:
        c = Ctx(fusec, os.path.abspath(args.models), tmp)
        build_tiny(c.tiny)
        for t in tests:
            t1 = time.monotonic()
            try:
                t(c)
                print(f"ok   {t.__name__:<32} ({time.monotonic() - t1:.2f} s)")
            except Failure as e:
                failed.append(t.__name__)
                print(f"FAIL {t.__name__:<32} {e}")
            except Exception:  # noqa: BLE001 - a crash in a test is a failure, not an abort
                failed.append(t.__name__)
                print(f"FAIL {t.__name__:<32} raised:\n{traceback.format_exc()}")
            sys.stdout.flush()
    secs = time.monotonic() - t0
    if failed:
        print(f"cli: FAIL: {len(failed)}/{len(tests)} tests failed ({secs:.1f} s): {', '.join(failed)}")
        return 1
    print(f"cli: ok: {len(tests)}/{len(tests)} tests passed ({secs:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

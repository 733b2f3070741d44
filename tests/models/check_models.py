#!/usr/bin/env python3
"""Model-level equivalence: fusec (CPU) against ONNX Runtime (CPU) on every models/*.onnx.

For each model: seeded random inputs at batch 2 (floats uniform in [-1, 1); int64 ids in [0, 64)),
written as .npy; ONNX Runtime computes the reference; then

    fusec run MODEL --batch 2 --input NAME=FILE ... --output-dir D --format npy
    fusec inspect MODEL --batch 2 --json J

Pass criteria, per output:
  * same shape and dtype as ONNX Runtime's, all values finite;
  * max|fusec - ort| <= 1e-4 * max(max|ort|, 1e-6), i.e. every element's absolute error is within
    1e-4 of the reference output's largest magnitude ("max relative error" <= 1e-4, normalised by
    the output's scale rather than per element, so values near zero do not blow it up).
And `inspect --json` succeeds and has the keys schema, inputs, outputs, op_histogram, parameters,
flops.

Exit status: 0 when every model passes, 1 otherwise. The last line is a one-line summary.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto

TOL = 1e-4
BATCH = 2
INSPECT_KEYS = ["schema", "inputs", "outputs", "op_histogram", "parameters", "flops"]


def make_inputs(model: onnx.ModelProto, batch: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = []
        for i, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                shape.append(d.dim_value)
            elif i == 0:
                shape.append(batch)
            else:
                raise ValueError(f"input '{vi.name}' has a symbolic non-leading dim; check_models binds only the batch")
        if tt.elem_type == TensorProto.INT64:
            feeds[vi.name] = rng.integers(0, 64, shape, dtype=np.int64)
        elif tt.elem_type == TensorProto.INT32:
            feeds[vi.name] = rng.integers(0, 64, shape, dtype=np.int32)
        elif tt.elem_type == TensorProto.FLOAT:
            feeds[vi.name] = rng.uniform(-1.0, 1.0, shape).astype(np.float32)
        else:
            raise ValueError(f"input '{vi.name}' has elem_type {tt.elem_type}, which check_models does not generate")
    return feeds


def run_cmd(cmd: list[str], timeout: float) -> tuple[int, str, str, float]:
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr, time.monotonic() - t0
    except subprocess.TimeoutExpired:
        return -999, "", f"timed out after {timeout:.0f} s", time.monotonic() - t0


def last_line(text: str) -> str:
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1] if lines else ""


def check_model(fusec: str, path: str, work: str, seed: int, timeout: float) -> tuple[bool, list[str]]:
    """Returns (ok, table rows)."""
    name = os.path.splitext(os.path.basename(path))[0]
    rows: list[str] = []
    ok = True
    model = onnx.load(path, load_external_data=False)
    feeds = make_inputs(model, BATCH, seed)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    # No graph rewrites in the reference: its numbers are the plain op-by-op evaluation.
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    ref_names = [o.name for o in sess.get_outputs()]
    refs = sess.run(None, feeds)

    mdir = os.path.join(work, name)
    outdir = os.path.join(mdir, "out")
    os.makedirs(mdir, exist_ok=True)
    cmd = [fusec, "run", path, "--batch", str(BATCH), "--output-dir", outdir, "--format", "npy"]
    for k, (iname, arr) in enumerate(feeds.items()):
        f = os.path.join(mdir, f"input_{k}.npy")
        np.save(f, arr)
        cmd += ["--input", f"{iname}={f}"]
    rc, out, err, secs = run_cmd(cmd, timeout)
    if rc != 0:
        rows.append(f"  {'run':<28} FAIL exit {rc} after {secs:.1f} s: {last_line(err) or last_line(out)}")
        ok = False
    else:
        for k, (oname, ref) in enumerate(zip(ref_names, refs)):
            f = os.path.join(outdir, f"output_{k}.npy")
            if not os.path.exists(f):
                rows.append(f"  {oname:<28} FAIL: fusec wrote no {os.path.basename(f)}")
                ok = False
                continue
            got = np.load(f)
            if got.shape != ref.shape or got.dtype != ref.dtype:
                rows.append(f"  {oname:<28} FAIL: fusec gives {got.dtype}{list(got.shape)}, "
                            f"onnxruntime {ref.dtype}{list(ref.shape)}")
                ok = False
                continue
            g64, r64 = got.astype(np.float64), ref.astype(np.float64)
            if not np.all(np.isfinite(g64)):
                rows.append(f"  {oname:<28} FAIL: fusec output has non-finite values")
                ok = False
                continue
            scale = max(float(np.abs(r64).max()) if r64.size else 0.0, 1e-6)
            max_abs = float(np.abs(g64 - r64).max()) if r64.size else 0.0
            rel = max_abs / scale
            passed = rel <= TOL
            ok &= passed
            rows.append(f"  {oname:<28} {str(list(ref.shape)):<16} max|ref| {scale:10.4g}  max abs err {max_abs:10.3e}"
                        f"  rel {rel:10.3e}  {'ok' if passed else 'FAIL'}  ({secs:.1f} s)")
        extra = sorted(glob.glob(os.path.join(outdir, "output_*.npy")))
        if len(extra) != len(refs):
            rows.append(f"  {'outputs':<28} FAIL: fusec wrote {len(extra)} output files, the model has {len(refs)}")
            ok = False

    jpath = os.path.join(mdir, "inspect.json")
    rc, out, err, secs = run_cmd([fusec, "inspect", path, "--batch", str(BATCH), "--json", jpath], timeout)
    if rc != 0:
        rows.append(f"  {'inspect':<28} FAIL exit {rc}: {last_line(err)}")
        ok = False
    else:
        try:
            with open(jpath) as f:
                j = json.load(f)
            missing = [k for k in INSPECT_KEYS if k not in j]
            if missing:
                raise ValueError(f"missing keys {missing}")
            nodes = sum(j["op_histogram"].values())
            if nodes != len(model.graph.node):
                raise ValueError(f"op_histogram counts {nodes} nodes, the model has {len(model.graph.node)}")
            rows.append(f"  {'inspect --json':<28} ok: {j['schema']}, {j['parameters']:.0f} params, flops {j['flops']}")
        except Exception as e:  # noqa: BLE001 - any problem with the report is a failure
            rows.append(f"  {'inspect --json':<28} FAIL: {e}")
            ok = False
    return ok, rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fusec", required=True, help="path to the fusec binary")
    ap.add_argument("--models", required=True, help="folder whose *.onnx are checked (not recursive)")
    ap.add_argument("--only", action="append", default=[], help="check only models whose file name contains this")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=300, help="seconds per fusec call")
    ap.add_argument("--keep", help="keep inputs/outputs in this folder instead of a temp dir")
    args = ap.parse_args()

    models = sorted(glob.glob(os.path.join(args.models, "*.onnx")))
    if args.only:
        models = [m for m in models if any(s in os.path.basename(m) for s in args.only)]
    if not models:
        print(f"check_models: FAIL: no *.onnx in {args.models}")
        return 1
    if not os.access(args.fusec, os.X_OK):
        print(f"check_models: FAIL: {args.fusec} is not an executable")
        return 1

    failed = []
    with tempfile.TemporaryDirectory(prefix="fusec_models_") as tmp:
        work = args.keep or tmp
        os.makedirs(work, exist_ok=True)
        for path in models:
            name = os.path.basename(path)
            try:
                ok, rows = check_model(args.fusec, path, work, args.seed, args.timeout)
            except Exception as e:  # noqa: BLE001 - report and go on with the next model
                ok, rows = False, [f"  FAIL: {type(e).__name__}: {e}"]
            print(f"{name}: {'ok' if ok else 'FAIL'}")
            for r in rows:
                print(r)
            if not ok:
                failed.append(name)
            sys.stdout.flush()
    n = len(models)
    if failed:
        print(f"check_models: FAIL: {len(failed)}/{n} models differ from onnxruntime or fail: {', '.join(failed)} "
              f"(tolerance max abs err <= {TOL:g} * max|ref|)")
        return 1
    print(f"check_models: ok: {n}/{n} models match onnxruntime within {TOL:g} * max|ref| at batch {BATCH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

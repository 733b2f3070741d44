#!/usr/bin/env python3
"""End-to-end tests of how fusec writes and reads files (importer/output_file.h, input_file.h).

    test_files.py --fusec build/fusec --models models

What a user sees: `-` and /dev/stdout carry the machine output while the human one goes to
stderr; outputs never land on the input, its external data or each other; run's outputs never
follow a link in the folder; devices are refused as inputs and streams are bounded; an interrupted
command leaves no temporary file or folder (a fake Graphviz `dot` that sleeps holds fusec at a
known point); an ignored SIGHUP stays ignored. The /dev cases run in a private mount namespace
with its own /dev (root and unshare needed; skipped, saying so, otherwise): never on the real /dev.

Exit status 0 when every test passes, 1 otherwise; the last line is a one-line summary.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_cli import Ctx, Failure, build_tiny  # noqa: E402


def one_error(c: Ctx, *args: str, mention: tuple[str, ...] = ()) -> str:
    return c.usage_error(*args, mention=mention)


def model_with_external_data(path: str, location: str) -> None:
    k = np.linspace(-1, 1, 600).astype(np.float32)
    g = helper.make_graph([helper.make_node("Mul", ["a", "k"], ["y"], name="mul")], "ext",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 600])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 600])],
                          [numpy_helper.from_array(k, "k")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path, save_as_external_data=True, location=location, size_threshold=0)


def fake_dot(d: str, seconds: float) -> str:
    """A folder with a `dot` that records its pid, sleeps, then writes a tiny SVG."""
    bin_dir = os.path.join(d, "bin")
    os.makedirs(bin_dir)
    path = os.path.join(bin_dir, "dot")
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\necho $$ > {d}/dot.pid\nsleep {seconds}\ncat > /dev/null\necho '<svg/>'\n")
    os.chmod(path, 0o755)
    return bin_dir


def wait_for(cond, what: str, timeout: float = 20) -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise Failure(f"timed out waiting for {what}")
        time.sleep(0.02)


def kill_recorded(d: str) -> None:
    try:
        with open(os.path.join(d, "dot.pid")) as f:
            os.kill(int(f.read()), signal.SIGKILL)
    except (OSError, ValueError):
        pass


# ---- tests ------------------------------------------------------------------------------------

def test_dash_is_stdout(c: Ctx):
    """`--json -` and `--json /dev/stdout`: stdout is exactly the JSON; the table goes to stderr."""
    for dest in ("-", "/dev/stdout"):
        p = c.ok("inspect", c.tiny, "--json", dest)
        try:
            j = json.loads(p.stdout)
        except json.JSONDecodeError as e:
            raise Failure(f"--json {dest}: stdout is not one JSON document ({e}): {p.stdout[:120]!r}")
        if j.get("schema") != "fusec.inspect/1" or "runnable" not in p.stderr:
            raise Failure(f"--json {dest}: schema {j.get('schema')!r}, human table on stderr: {'runnable' in p.stderr}")
    one_error(c, "profile", c.tiny, "--batch", "2", "--device", "cpu", "--iterations", "2",
              "--report", "-", "--trace", "/dev/stdout", mention=("is also --report",))


def test_outputs_never_on_inputs_or_each_other(c: Ctx):
    d = c.fresh("collide")
    model = os.path.join(d, "in.onnx")
    shutil.copy(c.tiny, model)
    before = open(model, "rb").read()
    one_error(c, "optimize", model, "--batch", "2", "-o", os.path.join(d, "o.onnx"), "--report", model,
              mention=("--report", "is the input model"))
    os.symlink("in.onnx", os.path.join(d, "alias.onnx"))
    one_error(c, "profile", model, "--batch", "2", "--device", "cpu", "--iterations", "2",
              "--html", os.path.join(d, "alias.onnx"), mention=("--html", "is the input model"))
    one_error(c, "optimize", model, "--batch", "2", "-o", os.path.join(d, "x.onnx"),
              "--report", os.path.join(d, "x.onnx"), mention=("is also -o",))
    one_error(c, "optimize", model, "--batch", "2", "-o", os.path.join(d, "y.onnx"),
              "--dot", f"{d}/g.dot,{d}/./g.dot", mention=("--dot (after)", "is also --dot (before)"))
    if open(model, "rb").read() != before:
        raise Failure("the input model changed")
    if sorted(os.listdir(d)) != ["alias.onnx", "in.onnx"]:
        raise Failure(f"a refused command left files: {sorted(os.listdir(d))}")
    # compare's outputs may not replace the reports it reads.
    r = os.path.join(d, "r.json")
    c.ok("bench", c.tiny, "--batch", "2", "--device", "cpu", "--iterations", "20", "--no-compare", "--json", r)
    one_error(c, "compare", r, r, "--markdown", r, mention=("--markdown", "is a report this command reads"))


def test_output_data_file_is_not_the_inputs(c: Ctx):
    """optimize m.onnx -o o.onnx when m.onnx's weights are in o.onnx.data: refused, nothing changed."""
    d = c.fresh("datafile")
    model_with_external_data(os.path.join(d, "m.onnx"), "o.onnx.data")
    data = open(os.path.join(d, "o.onnx.data"), "rb").read()
    one_error(c, "optimize", os.path.join(d, "m.onnx"), "--batch", "2", "-o", os.path.join(d, "o.onnx"),
              mention=("o.onnx.data", "external data of", "does not write over its own inputs"))
    one_error(c, "optimize", os.path.join(d, "m.onnx"), "--batch", "2", "-o", os.path.join(d, "o.onnx.data"),
              mention=("o.onnx.data",))
    if open(os.path.join(d, "o.onnx.data"), "rb").read() != data:
        raise Failure("the input's external data changed")
    if sorted(os.listdir(d)) != ["m.onnx", "o.onnx.data"]:
        raise Failure(f"files appeared: {sorted(os.listdir(d))}")


def test_run_outputs_replace_links_never_follow(c: Ctx):
    d = c.fresh("runlink")
    out = os.path.join(d, "out")
    os.makedirs(out)
    with open(os.path.join(d, "precious.txt"), "w") as f:
        f.write("precious")
    os.symlink("../precious.txt", os.path.join(out, "output_0.pb"))
    os.symlink("missing/x.pb", os.path.join(out, "output_1.pb"))  # a link to nothing: replaced all the same
    c.ok("run", c.tiny, "--batch", "2", "--output-dir", out)
    if open(os.path.join(d, "precious.txt")).read() != "precious":
        raise Failure("run wrote through a link in its output folder")
    if any(os.path.islink(os.path.join(out, n)) for n in os.listdir(out)) or sorted(os.listdir(out)) != ["output_0.pb", "output_1.pb"]:
        raise Failure(f"expected two regular outputs, got {sorted(os.listdir(out))}")


def test_inputs_refused_or_bounded(c: Ctx):
    d = c.fresh("inputs")
    one_error(c, "inspect", "/dev/zero", mention=("/dev/zero", "is a device"))
    one_error(c, "run", c.tiny, "--batch", "2", "--input", "a=/dev/urandom", "--output-dir", d, mention=("is a device",))
    one_error(c, "inspect", "/proc/self/mem", mention=("cannot read", "Input/output error"))
    # A stream is read up to --max-memory, then refused.
    with subprocess.Popen(["head", "-c", str(64 << 20), "/dev/zero"], stdout=subprocess.PIPE) as zeros:
        p = subprocess.run([c.fusec, "inspect", "/dev/stdin", "--max-memory", "1M"], stdin=zeros.stdout,
                           capture_output=True, text=True, timeout=30)
        zeros.kill()
    if p.returncode != 2 or "is not a regular file and gives more than" not in p.stderr:
        raise Failure(f"inspect of a 64 MiB stream with --max-memory 1M: exit {p.returncode}, {p.stderr.strip()!r}")
    # ... and a model on a pipe within the bound loads.
    with open(c.tiny, "rb") as f:
        p = subprocess.run([c.fusec, "inspect", "/dev/stdin"], stdin=f, capture_output=True, text=True, timeout=30)
    if p.returncode != 0 or "inputs" not in p.stdout:
        raise Failure(f"inspect /dev/stdin: exit {p.returncode}, {p.stderr.strip()!r}")
    # A FIFO nobody writes reads as empty: an error, not a hang.
    fifo = os.path.join(d, "model.fifo")
    os.mkfifo(fifo)
    one_error(c, "inspect", fifo, mention=("empty",))


def test_npy_declared_size_first(c: Ctx):
    d = c.fresh("npy")
    h = b"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 500000000), }"
    h += b" " * ((64 - (10 + len(h) + 1) % 64) % 64) + b"\n"
    path = os.path.join(d, "big.npy")
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h + b"\0" * 512)
    t0 = time.monotonic()
    one_error(c, "run", c.tiny, "--input", f"a={path}", "--output-dir", d, "--max-memory", "16M",
              mention=("holds 512 data bytes", "needs 4000000000"))
    if time.monotonic() - t0 > 5:
        raise Failure("the size check came after a slow allocation")


def test_system_refusals_are_exit_2(c: Ctx):
    d = c.fresh("paths")
    one_error(c, "optimize", c.tiny, "--batch", "2", "-o", os.path.join(d, "x" * 300 + ".onnx"),
              mention=("File name too long",))
    os.symlink("loop", os.path.join(d, "loop"))
    one_error(c, "optimize", c.tiny, "--batch", "2", "-o", os.path.join(d, "loop", "x.onnx"),
              mention=("loop/x.onnx", "symbolic links"))
    one_error(c, "optimize", c.tiny, "--batch", "2", "-o", os.path.join(d, "no", "x.onnx"), mention=("folder",))


def _svg_run(c: Ctx, d: str, seconds: float, preexec=None) -> subprocess.Popen:
    env = dict(os.environ, PATH=fake_dot(d, seconds) + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.Popen([c.fusec, "optimize", c.tiny, "--batch", "2", "-o", os.path.join(d, "o.onnx"),
                             "--svg", f"{d}/before.svg,{d}/after.svg"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, preexec_fn=preexec)


def test_signals_remove_temporaries(c: Ctx):
    """SIGINT/SIGTERM/SIGHUP while Graphviz renders into fusec's temporary: the temporary goes, the
    signal ends fusec, the previous output stays."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        d = c.fresh(f"sig_{sig.name}")
        with open(os.path.join(d, "before.svg"), "w") as f:
            f.write("previous")
        p = _svg_run(c, d, 30, preexec=lambda s=sig: signal.signal(s, signal.SIG_DFL))
        try:
            wait_for(lambda: glob.glob(os.path.join(d, ".before.svg.tmp-*")) and os.path.exists(os.path.join(d, "dot.pid")),
                     "the SVG's temporary file")
            p.send_signal(sig)
            p.wait(timeout=20)
        finally:
            kill_recorded(d)
            if p.poll() is None:
                p.kill()
        if p.returncode != -sig:
            raise Failure(f"{sig.name}: exit {p.returncode}, expected death by the signal ({p.stderr.read()!r})")
        left = sorted(n for n in os.listdir(d) if n.startswith("."))
        if left or open(os.path.join(d, "before.svg")).read() != "previous":
            raise Failure(f"{sig.name}: left {left}, before.svg intact: {open(os.path.join(d, 'before.svg')).read() == 'previous'}")


def test_ignored_sighup_stays_ignored(c: Ctx):
    """Under nohup (SIGHUP ignored), SIGHUP neither stops fusec nor costs its output."""
    d = c.fresh("nohup")
    p = _svg_run(c, d, 1, preexec=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        wait_for(lambda: os.path.exists(os.path.join(d, "dot.pid")), "Graphviz to start")
        p.send_signal(signal.SIGHUP)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    if p.returncode != 0 or open(os.path.join(d, "after.svg")).read().strip() != "<svg/>":
        raise Failure(f"exit {p.returncode}: {p.stderr.read()!r}")


def test_interrupted_check_leaves_nothing(c: Ctx):
    """SIGTERM to `fusec check` mid-step: the step is stopped, the temporary reports folder goes."""
    d = c.fresh("check")
    tmp = os.path.join(d, "tmp")
    os.makedirs(tmp)
    shutil.copy(c.tiny, os.path.join(d, "tiny.onnx"))
    with open(os.path.join(d, "fusec.toml"), "w") as f:
        f.write('baselines = "baselines"\n[defaults]\ndevice = "cpu"\nbatch = 2\niterations = 100000000\n'
                '[[model]]\npath = "tiny.onnx"\n')
    p = subprocess.Popen([c.fusec, "check", "--update-baselines"], cwd=d, env=dict(os.environ, TMPDIR=tmp),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))

    def step_running() -> list[int]:
        pids = []
        for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
            try:
                if tmp.encode() in open(cmdline, "rb").read() and b"bench" in open(cmdline, "rb").read():
                    pids.append(int(cmdline.split("/")[2]))
            except OSError:
                pass
        return pids
    try:
        wait_for(lambda: glob.glob(os.path.join(tmp, "fusec_check_*")) and step_running(), "the bench step", timeout=60)
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    steps = step_running()
    for pid in steps:
        os.kill(pid, signal.SIGKILL)
    if p.returncode != -signal.SIGTERM or os.listdir(tmp) or steps:
        raise Failure(f"exit {p.returncode}, left in TMPDIR: {os.listdir(tmp)}, steps still running: {steps}")


def test_dev_in_a_private_namespace(c: Ctx):
    """As root, in a mount namespace with its own /dev: --json /dev/null, a peaks cache at /dev/zero
    and --json /dev/stdout write in place; /dev stays what it was."""
    if os.geteuid() != 0 or subprocess.run(["unshare", "-m", "--propagation", "private", "true"],
                                           capture_output=True).returncode != 0:
        print("     (skipped: needs root and unshare -m)")
        return
    script = f"""
      set -e
      mount -t tmpfs tmpfs /dev
      mknod -m 666 /dev/null c 1 3; mknod -m 666 /dev/zero c 1 5; ln -s /proc/self/fd/1 /dev/stdout; mkfifo /dev/fifo
      {c.fusec} inspect {c.tiny} --json /dev/null > /dev/null
      FUSEC_PEAKS_CACHE=/dev/zero {c.fusec} profile {c.tiny} --batch 2 --device cpu --iterations 2 > /dev/null
      {c.fusec} inspect {c.tiny} --json /dev/stdout 2> /dev/null | grep -c '"schema"'
      {c.fusec} inspect {c.tiny} --json /dev/fifo 2>&1 >/dev/null | grep -c 'no process is reading' || true
      stat -c %F /dev/null /dev/zero /dev/stdout /dev/fifo
    """
    p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], capture_output=True,
                       text=True, timeout=60)
    want = ["1", "1", "character special file", "character special file", "symbolic link", "fifo"]
    if p.returncode != 0 or p.stdout.split("\n")[:6] != want:
        raise Failure(f"exit {p.returncode}, got {p.stdout.splitlines()}, expected {want}; {p.stderr.strip()[-300:]}")


TESTS = [test_dash_is_stdout, test_outputs_never_on_inputs_or_each_other, test_output_data_file_is_not_the_inputs,
         test_run_outputs_replace_links_never_follow, test_inputs_refused_or_bounded, test_npy_declared_size_first,
         test_system_refusals_are_exit_2, test_signals_remove_temporaries, test_ignored_sighup_stays_ignored,
         test_interrupted_check_leaves_nothing, test_dev_in_a_private_namespace]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fusec", required=True)
    ap.add_argument("--models", required=True, help="folder with mlp_small.onnx")
    ap.add_argument("-k", dest="only", help="run only tests whose name contains this")
    args = ap.parse_args()
    fusec = os.path.abspath(args.fusec)
    t0 = time.monotonic()
    failed = []
    tests = [t for t in TESTS if not args.only or args.only in t.__name__]
    with tempfile.TemporaryDirectory(prefix="fusec_files_") as tmp:
        c = Ctx(fusec, os.path.abspath(args.models), tmp)
        build_tiny(c.tiny)
        for t in tests:
            t1 = time.monotonic()
            try:
                t(c)
                print(f"ok   {t.__name__:<44} ({time.monotonic() - t1:.2f} s)")
            except Failure as e:
                failed.append(t.__name__)
                print(f"FAIL {t.__name__:<44} {e}")
            except Exception:  # noqa: BLE001 - a crash in a test is a failure, not an abort
                failed.append(t.__name__)
                print(f"FAIL {t.__name__:<44} raised:\n{traceback.format_exc()}")
            sys.stdout.flush()
    secs = time.monotonic() - t0
    if failed:
        print(f"files: FAIL: {len(failed)}/{len(tests)} tests failed ({secs:.1f} s): {', '.join(failed)}")
        return 1
    print(f"files: ok: {len(tests)}/{len(tests)} tests passed ({secs:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The CUDA backend is a plugin (backend/gpu_plugin.h): fusec itself links no CUDA library, and the
CPU path works when the plugin is missing or cannot be loaded (what a machine without the CUDA
libraries sees: dlopen fails on the plugin's dependencies).

    test_plugin.py --fusec build/fusec --models models

A machine without the CUDA libraries is made for real where possible: in a private mount namespace
(root and unshare), empty folders are mounted over every folder the plugin's CUDA libraries load
from, so dlopen fails on them as it would there (skipped, saying so, without root). The plugin
missing, or not a loadable library, is FUSEC_CUDA_PLUGIN pointing at no file and at a text file.
Exit status 0 when every check passes, 1 otherwise.
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

CUDA_LIBS = ("libcudart", "libcublas", "libcublasLt", "libcudnn", "libnvrtc", "libcupti", "libcuda.")


def run(fusec: str, args: list[str], plugin: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if plugin is not None:
        env["FUSEC_CUDA_PLUGIN"] = plugin
    return subprocess.run([fusec, *args], env=env, capture_output=True, text=True, timeout=300)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fusec", required=True)
    ap.add_argument("--models", required=True)
    a = ap.parse_args()
    failures: list[str] = []

    def check(ok: bool, what: str, detail: str = "") -> None:
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what + (": " + detail if detail else ""))

    ldd = subprocess.run(["ldd", a.fusec], capture_output=True, text=True).stdout
    linked = [lib for lib in CUDA_LIBS if lib in ldd]
    check(not linked, "fusec links no CUDA library", ", ".join(linked))

    model = os.path.join(a.models, "mlp_small.onnx")
    plugin_file = os.path.join(os.path.dirname(os.path.abspath(a.fusec)), "libfusec_cuda.so")
    cpu_only = not os.path.exists(plugin_file)
    with tempfile.TemporaryDirectory() as d:
        broken = os.path.join(d, "libfusec_cuda.so")
        with open(broken, "w") as f:
            f.write("not a shared library\n")
        for label, plugin in (("unloadable", broken), ("missing", os.path.join(d, "absent.so"))):
            r = run(a.fusec, ["--version"], plugin)
            check(r.returncode == 0 and r.stdout.startswith("fusec "), f"--version with the plugin {label}", r.stderr)
            r = run(a.fusec, ["inspect", model, "--batch", "4"], plugin)
            check(r.returncode == 0, f"inspect with the plugin {label}", r.stderr)
            out = os.path.join(d, "out_" + label)
            r = run(a.fusec, ["run", model, "--batch", "4", "--output-dir", out], plugin)
            check(r.returncode == 0 and "auto: no usable GPU" in r.stdout + r.stderr,
                  f"run --device auto falls back to the CPU, saying why, with the plugin {label}", r.stdout + r.stderr)
            r = run(a.fusec, ["run", model, "--batch", "4", "--device", "cpu", "--output-dir", out], plugin)
            check(r.returncode == 0, f"run --device cpu with the plugin {label}", r.stderr)
            r = run(a.fusec, ["bench", model, "--batch", "4", "--device", "cuda", "--iterations", "1"], plugin)
            lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
            # A CPU-only build (no plugin beside fusec) never looks for one: it says how it was built.
            if cpu_only:
                want, start = "built without the CUDA backend", "fusec: error: --device cuda: this fusec was built"
            else:
                want = "could not be loaded" if label == "unloadable" else "is not installed"
                start = "fusec: error: --device cuda: the CUDA backend"
            check(r.returncode == 2 and len(lines) == 1 and lines[0].startswith(start) and want in lines[0],
                  f"--device cuda is one clear error with the plugin {label}", r.stderr)
    if cpu_only:
        print("skip the machine without CUDA libraries: no plugin beside fusec (a CPU-only build)")
    elif os.geteuid() != 0 or not shutil.which("unshare"):
        print("skip the machine without CUDA libraries: needs root and unshare for a private mount namespace")
    else:
        deps = subprocess.run(["ldd", plugin_file], capture_output=True, text=True).stdout
        dirs = sorted({os.path.dirname(os.path.realpath(line.split("=>")[1].split("(")[0].strip()))
                       for line in deps.splitlines() if "=>" in line and any(lib in line for lib in CUDA_LIBS)})
        with tempfile.TemporaryDirectory() as d:
            empty = os.path.join(d, "empty")
            os.mkdir(empty)
            hide = "; ".join(f"mount --bind {shlex.quote(empty)} {shlex.quote(x)}" for x in dirs)
            out = os.path.join(d, "out")
            script = (f"{hide}; {shlex.quote(a.fusec)} run {shlex.quote(model)} --batch 4 --output-dir {shlex.quote(out)}; "
                      f"echo rc=$?; {shlex.quote(a.fusec)} bench {shlex.quote(model)} --batch 4 --device cuda; echo rc=$?")
            r = subprocess.run(["unshare", "-m", "bash", "-c", script], capture_output=True, text=True, timeout=300)
            text = r.stdout + r.stderr
            check(bool(dirs) and "could not be loaded" in text and "cannot open shared object file" in text and "rc=0" in text
                  and "auto: no usable GPU" in text, "without the CUDA libraries, run --device auto falls back to the CPU", text)
            check("rc=2" in text and "fusec: error: --device cuda: the CUDA backend" in text,
                  "without the CUDA libraries, --device cuda is one error naming the missing library", text)
    print(f"{'FAILED' if failures else 'passed'}: {len(failures)} failure(s)")
    for f in failures:
        print("  " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

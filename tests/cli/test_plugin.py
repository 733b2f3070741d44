#!/usr/bin/env python3
"""The CUDA backend is a plugin (backend/gpu_plugin.h): fusec itself links no CUDA library, and the
CPU path works when the plugin is missing or cannot be loaded (what a machine without the CUDA
libraries sees: dlopen fails on the plugin's dependencies).

    test_plugin.py --fusec build/fusec --models models

The missing-libraries case is simulated with FUSEC_CUDA_PLUGIN pointing at a file that is not a
loadable library, and at no file at all. Exit status 0 when every check passes, 1 otherwise.
"""
from __future__ import annotations

import argparse
import os
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
            want = "could not be loaded" if label == "unloadable" else "is not installed"
            check(r.returncode == 2 and len(lines) == 1 and lines[0].startswith("fusec: error: --device cuda: the CUDA backend")
                  and want in lines[0], f"--device cuda is one clear error with the plugin {label}", r.stderr)
    print(f"{'FAILED' if failures else 'passed'}: {len(failures)} failure(s)")
    for f in failures:
        print("  " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Start-up cost of fusec where the GPU is not needed: wall time and peak RSS of `fusec --version`,
`inspect` and a CPU `run` of a small model, each the median of N runs (the CUDA backend is a plugin
that these never load). Targets (issue 26): --version, inspect and CPU runs start in under 50 ms
and 60 MiB.

    python3 scripts/bench_startup.py [--fusec build/fusec] [--runs 20] [--json startup.json]

Exit status 1 when a command misses a target.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

TARGET_S, TARGET_MIB = 0.050, 60.0


def main() -> int:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser()
    ap.add_argument("--fusec", default=os.path.join(root, "build", "fusec"))
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--json")
    a = ap.parse_args()
    model = os.path.join(root, "models", "mlp_small.onnx")
    with tempfile.TemporaryDirectory() as out:
        cases = {
            "version": [a.fusec, "--version"],
            "inspect": [a.fusec, "inspect", model, "--batch", "4"],
            "run_cpu": [a.fusec, "run", model, "--batch", "4", "--device", "cpu", "--output-dir", out],
        }
        results, ok = {}, True
        for name, cmd in cases.items():
            # ru_maxrss of RUSAGE_CHILDREN is a maximum over all children: measure each command in
            # a fresh interpreter so one command's peak is not another's.
            probe = subprocess.run([sys.executable, "-c", f"""
import json, resource, statistics, subprocess, time
walls = []
for _ in range({a.runs}):
    t = time.perf_counter()
    subprocess.run({cmd!r}, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    walls.append(time.perf_counter() - t)
print(json.dumps({{"median_s": statistics.median(walls), "max_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}}))
"""], capture_output=True, text=True, check=True)
            r = json.loads(probe.stdout)
            r["meets_target"] = r["median_s"] <= TARGET_S and r["max_rss_mib"] <= TARGET_MIB
            ok &= r["meets_target"]
            results[name] = r
            print(f"{name:8s} median {r['median_s'] * 1000:6.1f} ms   peak RSS {r['max_rss_mib']:6.1f} MiB   "
                  f"{'ok' if r['meets_target'] else 'MISSES the target'} (<= {TARGET_S * 1000:.0f} ms, <= {TARGET_MIB:.0f} MiB)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"runs": a.runs, "targets": {"seconds": TARGET_S, "mib": TARGET_MIB}, "results": results}, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

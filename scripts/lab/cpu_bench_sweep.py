"""Whether `fusec optimize`'s output is ever slower than the model as given on the CPU reference:
`fusec bench --device cpu` (as given and optimized in one process, fp32) of every export in the
folders, one row each with both medians and their ratio; a row above --bound (default 1.02) is
marked "slower". Exit status 0 when every bench ran, else 1.

    python3 scripts/lab/cpu_bench_sweep.py --fusec build/fusec [--batch 2] [--duration 3] DIR [DIR ...]

DIR: folders of .onnx files, such as scripts/export_zoo.py writes. On a machine with few cores,
run nothing else alongside: both variants share its cores and the ratio moves with any load.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fusec", default="build/fusec")
    p.add_argument("--batch", type=int, default=2, help="binds a symbolic batch dim (default 2)")
    p.add_argument("--duration", type=float, default=3.0, help="seconds per variant (default 3)")
    p.add_argument("--bound", type=float, default=1.02, help="optimized / as given above this is 'slower'")
    p.add_argument("dirs", nargs="+")
    a = p.parse_args()
    failed = slower = 0
    print(f"{'export':44s} {'as given ms':>12s} {'optimized ms':>13s} {'ratio':>6s}")
    with tempfile.TemporaryDirectory() as tmp:
        for d in a.dirs:
            for f in sorted(glob.glob(os.path.join(d, "*.onnx"))):
                if ".opt." in os.path.basename(f):
                    continue
                out = os.path.join(tmp, "bench.json")
                r = subprocess.run([a.fusec, "bench", f, "--device", "cpu", "--batch", str(a.batch), "--duration",
                                    str(a.duration), "--quiet", "--json", out], capture_output=True, text=True)
                name = os.path.basename(f)
                if r.returncode:
                    failed += 1
                    last = (r.stderr.strip().splitlines() or [f"rc {r.returncode}"])[-1]
                    print(f"{name:44s} failed: {last[:160]}", flush=True)
                    continue
                with open(out) as fh:
                    med = {v["name"]: v["latency_ms"]["median"] for v in json.load(fh)["variants"]}
                given, opt = med["as_given"], med["optimized"]
                ratio = opt / given
                slower += ratio > a.bound
                mark = "  slower" if ratio > a.bound else ""
                print(f"{name:44s} {given:12.3f} {opt:13.3f} {ratio:6.3f}{mark}", flush=True)
    print(f"{slower} export(s) slower optimized than as given (ratio > {a.bound}); {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

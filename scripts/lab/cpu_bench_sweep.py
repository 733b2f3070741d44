"""Whether `fusec optimize`'s output is ever slower than the model as given on the CPU reference:
`fusec bench --device cpu` (as given and optimized in one process, fp32) of every export in the
folders, one row each with both medians and their ratio; a row above --bound (default 1.02) is
marked "slower". With --base OLD_FUSEC, each export is benched by the old build and then by
--fusec, model by model so that drift hits both alike, and the row gives both builds' medians.
Exit status 0 when every bench ran, else 1.

    python3 scripts/lab/cpu_bench_sweep.py --fusec build/fusec [--base OLD/fusec] [--batch 2] [--duration 3] \
        DIR_OR_ONNX [...]

DIR_OR_ONNX: folders of .onnx files, such as scripts/export_zoo.py writes, or .onnx files. On a machine with few cores,
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
    p.add_argument("--base", help="an older fusec to bench first, model by model (an A/B of two builds)")
    p.add_argument("--batch", type=int, default=2, help="binds a symbolic batch dim (default 2)")
    p.add_argument("--duration", type=float, default=3.0, help="seconds per variant (default 3)")
    p.add_argument("--bound", type=float, default=1.02, help="optimized / as given above this is 'slower'")
    p.add_argument("dirs", nargs="+")
    a = p.parse_args()
    failed = slower = 0
    builds = ([("base", a.base)] if a.base else []) + [("new", a.fusec)]
    print(f"{'export':44s}" + "".join(f" {tag + ' as given':>15s} {tag + ' optimized':>15s} {'ratio':>6s}"
                                      for tag, _ in builds))
    files = []
    for d in a.dirs:
        files += [d] if d.endswith(".onnx") else sorted(glob.glob(os.path.join(d, "*.onnx")))
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            if ".opt." in os.path.basename(f):
                continue
            name, row, mark = os.path.basename(f), "", ""
            for _, binary in builds:
                out = os.path.join(tmp, "bench.json")
                r = subprocess.run([binary, "bench", f, "--device", "cpu", "--batch", str(a.batch), "--duration",
                                    str(a.duration), "--quiet", "--json", out], capture_output=True, text=True)
                if r.returncode:
                    failed += 1
                    last = (r.stderr.strip().splitlines() or [f"rc {r.returncode}"])[-1]
                    row += f" failed: {last[:120]}"
                    break
                with open(out) as fh:
                    med = {v["name"]: v["latency_ms"]["median"] for v in json.load(fh)["variants"]}
                given, opt = med["as_given"], med["optimized"]
                ratio = opt / given
                row += f" {given:15.3f} {opt:15.3f} {ratio:6.3f}"
                mark = "  slower" if ratio > a.bound else ""  # the last build's (--fusec's) verdict
            slower += mark != ""
            print(f"{name:44s}{row}{mark}", flush=True)
    print(f"{slower} export(s) slower optimized than as given (ratio > {a.bound}); {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

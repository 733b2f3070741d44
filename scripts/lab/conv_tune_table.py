#!/usr/bin/env python3
"""Summarizes the conv tuner's FUSEC_CONV_TRACE lines (stderr of a fusec build with
FUSEC_CONV_TRACE=1; scripts/gpu_check.sh fp32 keeps them as $OUT/fp32_<model>_<variant>.trace):
per conv shape, the best cuDNN algorithm, the best cuBLASLt GEMM (the 1x1 route), the best of fusec's implicit-GEMM
configurations (and, with --own REGEX, the best of those whose name matches), and the pick (ms).

    python3 scripts/lab/conv_tune_table.py fp32_resnet50_DEFAULT.trace [--own streamK]
"""
import argparse
import re
import sys

LINE = re.compile(r"^conv tune (?P<key>.*?): (?P<what>.*?) (?P<ms>[0-9.]+) ms(?P<chosen>  <- chosen)?$")
SHAPE = re.compile(r"(x[0-9x]+) w([0-9x]+) y[0-9x]+ (p\d+s\d+d\d+)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--own", help="also the best implicit-GEMM configuration whose name matches this regex")
    args = ap.parse_args()
    rows = {}
    order = []
    with open(args.trace) as f:
        for line in f:
            m = LINE.match(line.rstrip("\n"))
            if not m:
                continue
            key = m["key"]
            s = SHAPE.search(key)
            if not s:
                continue
            name = f"{s[1]} w{s[2]} {s[3]}" + (" res" if " residual" in key else "") + re.search(r" act\d+", key)[0]
            if name not in rows:
                rows[name] = {"cudnn": None, "lt": None, "own": None, "sel": None, "pick": None}
                order.append(name)
            r = rows[name]
            ms, what = float(m["ms"]), m["what"]
            if what.startswith("implicit GEMM"):
                cfg = what[len("implicit GEMM ["):-1]
                kind = "own"
                if args.own and re.search(args.own, cfg) and (r["sel"] is None or ms < r["sel"][0]):
                    r["sel"] = (ms, cfg)
            elif what.startswith("GEMM candidate"):
                kind, cfg = "lt", what
            else:
                kind, cfg = "cudnn", what
            if r[kind] is None or ms < r[kind][0]:
                r[kind] = (ms, cfg)
            if m["chosen"]:
                r["pick"] = (ms, kind)
    if not order:
        sys.exit(f"{args.trace}: no conv tune lines (was FUSEC_CONV_TRACE=1 set?)")
    fmt = lambda v: "   -   " if v is None else f"{v[0]:.4f}"
    for name in order:
        r = rows[name]
        own = f"own {fmt(r['own'])} [{r['own'][1]}]" if r["own"] else "own    -   "
        sel = f"  {args.own} {fmt(r['sel'])}" if args.own else ""
        pick = f"-> {r['pick'][0]:.4f} {r['pick'][1]}" if r["pick"] else "-> (not timed)"
        print(f"{name:<46} cuDNN {fmt(r['cudnn'])}  Lt {fmt(r['lt'])}  {own}{sel}  {pick}")


if __name__ == "__main__":
    main()

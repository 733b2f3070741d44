#!/usr/bin/env python3
"""Reads the per-instruction CSV that scripts/lab/ncu_stalls.sh writes (ncu --page source --print-source
sass) and prints where a kernel's warp-stall samples fall: totals by stall reason, the reasons by
opcode, and runs of instructions that execute equally often (a loop body, a per-tile section, the
epilogue) with their share of all samples.
    python3 scripts/lab/ncu_sass_stalls.py sass_4.csv [min_share]"""
import collections
import csv
import sys


def main() -> None:
    rows = list(csv.reader(open(sys.argv[1])))
    min_share = float(sys.argv[2]) if len(sys.argv) > 2 else 0.005
    header, data = rows[1], rows[2:]
    ix = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    def count(row, col):
        v = row[ix[col]].replace(",", "")
        return int(v) if v.isdigit() else 0

    total = collections.Counter()
    by_op = collections.defaultdict(collections.Counter)
    for r in data:
        words = r[ix["Source"]].split()
        op = (words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "")).split(".")[0]
        for c in reasons:
            total[c] += count(r, c)
            by_op[c][op] += count(r, c)
    samples = sum(total.values()) or 1
    print(f"{samples} samples: " + ", ".join(f"{c[6:]} {100 * n / samples:.1f}%" for c, n in total.most_common(10)))
    for c, _ in total.most_common(8):
        print(f"  {c[6:]:<18} " + ", ".join(f"{op} {n}" for op, n in by_op[c].most_common(6)))
    print("runs of equally executed instructions with at least %.1f%% of the samples:" % (100 * min_share))
    start, cur, acc = 0, None, 0
    for n, r in enumerate(data + [None]):
        key = count(r, "Instructions Executed") if r else None
        if n and key != cur:
            if acc >= samples * min_share:
                print(f"  {start:5d}-{n - 1:5d}  executed {cur:>9} x  {acc:6d} samples ({100 * acc / samples:4.1f}%)  "
                      f"first: {data[start][ix['Source']].strip()[:48]}")
            start, acc = n, 0
        cur = key
        if r:
            acc += count(r, "# Samples")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""scripts/bench_peers.py --merge on the results of two real H100 runs (bench_peers.py's JSON, kept
as fixtures beside this file: ResNet-50 in one run, BERT-base and the MLP in the other): one table
and one set of issue-9 verdicts for the three models, and a refusal (exit 2, naming the field) when
the runs differ in GPU, fusec, torch or batch. Needs no GPU and no torch.

    test_bench_peers_merge.py [--root REPO]
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile


def run(root, files):
    return subprocess.run([sys.executable, os.path.join(root, "scripts", "bench_peers.py"), "--merge", *files],
                          capture_output=True, text=True, timeout=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    root = os.path.abspath(ap.parse_args().root)
    fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
    a = os.path.join(fixtures, "bench_peers_resnet50.json")
    b = os.path.join(fixtures, "bench_peers_bert_mlp.json")
    failures = []

    def expect(cond, what):
        print(("ok    " if cond else "FAIL  ") + what)
        if not cond:
            failures.append(what)

    p = run(root, [a, b])
    out = p.stdout
    expect(p.returncode == 0, f"merge of two runs exits 0 (got {p.returncode}: {p.stderr.strip()[:200]})")
    rows = [line.split("|")[0].strip() for line in out.splitlines() if "|" in line and not line.startswith("model")]
    expect(rows == ["resnet50", "bert", "mlp"], f"one table row per model, in order (got {rows})")
    expect("5.565" in out and "9.179" in out and "0.496" in out, "each model's fp32 figure comes from its own run")
    expect("fp32   5.565 ms <= 3.5 (NOT met)" in out, "ResNet-50's fp32 verdict")
    expect("fp16   0.206 ms <= 0.23 (met)" in out, "the MLP's fp16 verdict")
    expect("max-autotune fp16 (s)" in out, "the max-autotune column is kept")

    with open(b) as f:
        other = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        for field, value in (("gpu", "NVIDIA H200"), ("fusec_version", "9.9.9"), ("batch", 8)):
            bad = copy.deepcopy(other)
            if field == "batch":
                bad["settings"]["batch"] = value
            else:
                bad[field] = value
            path = os.path.join(tmp, f"bad_{field}.json")
            with open(path, "w") as f:
                json.dump(bad, f)
            p = run(root, [a, path])
            expect(p.returncode == 2 and field in p.stderr and "not merged" in p.stderr,
                   f"runs differing in {field} are refused, naming it (exit {p.returncode}: {p.stderr.strip()[:160]})")
        p = run(root, [a, os.path.join(tmp, "missing.json")])
        expect(p.returncode == 2 and "cannot read" in p.stderr, "a missing file is one clear error")

    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

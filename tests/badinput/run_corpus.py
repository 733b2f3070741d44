#!/usr/bin/env python3
"""Runs fusec on the bad-input corpus (make_corpus.py) and checks it fails cleanly.

For every entry,

    fusec inspect MODEL
    fusec run MODEL --output-dir OUT
    fusec optimize MODEL -o OUT/model.opt.onnx     (once `fusec --help` lists optimize as built)
    fusec bench MODEL --iterations 1 --quiet       (likewise)

must: exit with code exactly 2; write exactly one line to stderr, starting "fusec: error: ";
not die from a signal; finish within 20 s (under an 8 GiB address-space cap, so a runaway
allocation fails instead of taking the machine down). Where the entry lists `mention` strings,
the error line must contain each (case-insensitive): e.g. an unknown op names the node and the op.

Some entries are valid ONNX that fusec merely cannot run (see make_corpus.py): an empty graph,
unknown ops, a 64 TiB input. For those `inspect` may also exit 0 (describing the model is its job),
in which case its stdout must name what it cannot run, and `optimize` may exit 0 (valid model in,
valid model out); `run` and `bench` must still exit 2.

Then the committed fuzzing reproducers (tests/fuzz_findings/*.onnx, from ../shared/fuzz-findings:
models that once crashed fusec, made it wrap a shape, or allocate before checking) go through
inspect, optimize and run: each must exit 0, or exit 2 with exactly one "fusec: error:" line, in
time and without a signal; under ASan/UBSan (FUSEC_SANITIZED=1) a sanitizer report fails the run.

Exit status 0 when every check passes, 1 otherwise; the last line is a one-line summary.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_corpus import Entry, make_corpus  # noqa: E402

TIME_LIMIT_S = 20.0
ADDRESS_SPACE_CAP = 8 << 30
PREFIX = "fusec: error: "


def _limit():
    # AddressSanitizer reserves terabytes of shadow address space, so the cap would stop it from
    # starting; its allocator enforces its own limits (allocator_may_return_null=1 in scripts/test.sh).
    if os.environ.get("FUSEC_SANITIZED") != "1":
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def invoke(cmd: list[str]) -> tuple[int | None, str, str, float]:
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=TIME_LIMIT_S, preexec_fn=_limit, stdin=subprocess.DEVNULL)
        return (p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"),
                time.monotonic() - t0)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode("utf-8", "replace")
        err = (e.stderr or b"").decode("utf-8", "replace")
        return None, out, err, time.monotonic() - t0


def judge(e: Entry, sub: str, rc: int | None, out: str, err: str, secs: float) -> list[str]:
    """Returns the list of problems (empty: pass)."""
    if rc is None:
        return [f"did not finish within {TIME_LIMIT_S:.0f} s"]
    if rc < 0:
        return [f"killed by signal {-rc}"]
    if sub in ("inspect", "optimize") and e.valid_onnx and rc == 0:
        if sub == "optimize":
            return []
        missing = [s for s in e.inspect_must_report if s.lower() not in out.lower()]
        return [f"inspect exit 0 but its report does not mention {missing}"] if missing else []
    problems = []
    if rc != 2:
        problems.append(f"exit {rc}, expected 2")
    lines = err.splitlines()
    if len(lines) != 1 or not err.endswith("\n"):
        problems.append(f"stderr has {len(lines)} lines, expected exactly 1")
    if not lines or not lines[0].startswith(PREFIX):
        problems.append(f"stderr does not start with '{PREFIX}'")
    missing = [s for s in e.mention if s.lower() not in err.lower()]
    if missing and rc != 0:
        problems.append(f"message does not mention {missing}")
    return problems


FUZZ_FINDINGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fuzz_findings")


def judge_reproducer(rc: int | None, err: str) -> list[str]:
    """A fuzzing reproducer may be a valid model (exit 0) or a bad one (exit 2, one error line)."""
    if rc is None:
        return [f"did not finish within {TIME_LIMIT_S:.0f} s"]
    if rc < 0:
        return [f"killed by signal {-rc}"]
    if rc == 0:
        return []
    problems = [] if rc == 2 else [f"exit {rc}, expected 0 or 2"]
    lines = err.splitlines()
    if len(lines) != 1 or not lines[0].startswith(PREFIX):
        problems.append(f"stderr has {len(lines)} lines, expected exactly one '{PREFIX}' line")
    return problems


def run_reproducers(fusec: str, subs: list[str], work: str, verbose: bool) -> tuple[int, int, list[str]]:
    """Returns (checks, failures, failed file names)."""
    files = sorted(f for f in os.listdir(FUZZ_FINDINGS) if f.endswith(".onnx"))
    checks = failures = 0
    failed: list[str] = []
    for f in files:
        path = os.path.join(FUZZ_FINDINGS, f)
        out_dir = os.path.join(work, "_fuzz_out", f)
        os.makedirs(out_dir, exist_ok=True)
        for sub in subs:
            cmd = [fusec, sub, path]
            if sub == "run":
                cmd += ["--output-dir", out_dir]
            elif sub == "optimize":
                cmd += ["-o", os.path.join(out_dir, "model.opt.onnx")]
            elif sub == "bench":
                cmd += ["--iterations", "1", "--quiet"]
            rc, out, err, secs = invoke(cmd)
            problems = judge_reproducer(rc, err)
            checks += 1
            if problems:
                failures += 1
                if f not in failed:
                    failed.append(f)
                shown = err.strip().replace("\n", "\\n")[:400] or "(no stderr)"
                print(f"FAIL {f:<44} {sub:<8} exit {rc} ({secs:.1f} s): {'; '.join(problems)}")
                print(f"     {'':<44} {'':<8} stderr: {shown}")
            elif verbose:
                print(f"ok   {f:<44} {sub:<8} exit {rc} ({secs:.1f} s): {err.strip() or '(accepted)'}")
    return checks, failures, failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fusec", required=True, help="path to the fusec binary")
    ap.add_argument("--keep", help="write the corpus here instead of a temp dir (and keep it)")
    ap.add_argument("--only", action="append", default=[], help="run only entries whose name contains this")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every error line, not just failures")
    args = ap.parse_args()
    fusec = os.path.abspath(args.fusec)
    if not os.access(fusec, os.X_OK):
        print(f"bad_input_corpus: FAIL: {args.fusec} is not an executable")
        return 1

    help_text = subprocess.run([fusec, "--help"], capture_output=True, text=True, timeout=TIME_LIMIT_S).stdout
    subs = ["inspect", "run"] + [s for s in ("optimize", "bench")
                                 if re.search(rf"^\s+{s}\b", help_text, re.M)
                                 and not re.search(rf"^\s+{s}\b.*not built", help_text, re.M)]
    with tempfile.TemporaryDirectory(prefix="fusec_badinput_") as tmp:
        root = os.path.abspath(args.keep or tmp)
        entries = make_corpus(root)
        if args.only:
            entries = [e for e in entries if any(s in e.name for s in args.only)]
        checks = failures = 0
        failed_names = []
        for e in entries:
            entry_failed = False
            for sub in subs:
                cmd = [fusec, sub, e.path]
                out_dir = os.path.join(root, "_out", e.name)
                if sub == "run":
                    cmd += ["--output-dir", out_dir]
                elif sub == "optimize":
                    os.makedirs(out_dir, exist_ok=True)
                    cmd += ["-o", os.path.join(out_dir, "model.opt.onnx")]
                elif sub == "bench":
                    cmd += ["--iterations", "1", "--quiet"]
                rc, out, err, secs = invoke(cmd)
                problems = judge(e, sub, rc, out, err, secs)
                checks += 1
                first = err.splitlines()[0] if err.strip() else "(no stderr)"
                if problems:
                    failures += 1
                    entry_failed = True
                    print(f"FAIL {e.name:<28} {sub:<7} exit {rc} ({secs:.1f} s): {'; '.join(problems)}")
                    print(f"     {'':<28} {'':<7} input: {e.what}")
                    shown = err.strip().replace("\n", "\\n")[:400] or "(no stderr)"
                    print(f"     {'':<28} {'':<7} stderr: {shown}")
                elif args.verbose:
                    print(f"ok   {e.name:<28} {sub:<7} exit {rc} ({secs:.1f} s): {first if rc else '(accepted: valid ONNX)'}")
            if entry_failed:
                failed_names.append(e.name)
        f_checks, f_failures, f_failed = run_reproducers(fusec, [s for s in subs if s != "bench"], root,
                                                         args.verbose)
        sys.stdout.flush()
    if f_failures:
        print(f"bad_input_corpus: FAIL: {f_failures}/{f_checks} checks failed on fuzzing reproducers: "
              f"{', '.join(f_failed)}")
    if failures:
        print(f"bad_input_corpus: FAIL: {failures}/{checks} checks failed on {len(failed_names)}/{len(entries)} entries: "
              f"{', '.join(failed_names)}")
    if failures or f_failures:
        return 1
    print(f"bad_input_corpus: ok: {checks} checks ({', '.join(subs)}) on {len(entries)} entries, "
          f"all exit 2 with one 'fusec: error:' line; {f_checks} checks on fuzzing reproducers, all exit 0 or 2")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""End-to-end tests of `fusec compare` (and `fusec check` on the sample project examples/ci/).

    test_compare.py --fusec build/fusec --models models [--examples examples] [-k NAME]

Real reports: each shipped model benched against itself is "~" (exit 0); the same model with the
fusion passes skipped is a regression in latency and nodes (exit 3); every bad input is one
`fusec: error:` line and exit 2. Benches use 200 short iterations of the small models (well under a
second each; 30 under the sanitizer, which checks no latency verdict). ctest runs this file alone
(RUN_SERIAL): timings are what it checks.

Exit status 0 when every test passes, 1 otherwise; the last line is a one-line summary.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMAS = os.path.join(HERE, "..", "..", "docs", "schemas")
SMALL_MODELS = ["mlp_small", "bert_small", "mobilenetv2_small", "resnet50_small"]
# Under AddressSanitizer (scripts/test.sh's second pass sets ASAN_OPTIONS; tests/CMakeLists.txt sets
# FUSEC_SANITIZED) the instrumentation changes what each kernel costs: the unfused MLP once ran faster
# than the fused one there (CI check, 2026-11-26, with a steady control). The optimized build's pass
# checks latency verdicts; the sanitized one checks memory errors, counts and exit codes. So it
# times fewer runs: at 200 this test took 228 of the sanitized suite's 379 s on CI's two cores, all
# of it alone (RUN_SERIAL).
SANITIZED = "ASAN_OPTIONS" in os.environ or os.environ.get("FUSEC_SANITIZED") == "1"
ITERATIONS, PROFILE_ITERATIONS = (30, 10) if SANITIZED else (200, 50)
BENCH = ["--batch", "4", "--iterations", str(ITERATIONS), "--warmup", "5", "--device", "cpu", "--quiet"]
# Every pass that fuses, folds or recognizes: what a user turns off to see what fusion buys.
FUSION_PASSES = ["fold_batchnorm", "recognize_gelu", "recognize_layernorm", "fuse_skip_layernorm",
                 "fuse_layernorm_gelu", "fuse_conv_activation", "fuse_matmul_bias", "merge_qkv", "fuse_elementwise"]
# compare's note when the as-given model, the same in both reports, changed speed: the machine did.
DRIFT = "ran the same graph in both reports, yet its latency moved"


class Failure(Exception):
    pass


class Ctx:
    def __init__(self, fusec: str, models: str, examples: str, tmp: str):
        self.fusec, self.models, self.examples, self.tmp = fusec, models, examples, tmp
        self._n = 0
        self._bench_cache: dict[tuple, str] = {}

    def fresh(self, name: str) -> str:
        self._n += 1
        d = os.path.join(self.tmp, f"{self._n:02d}_{name}")
        os.makedirs(d)
        return d

    def model(self, name: str) -> str:
        return os.path.join(self.models, name + ".onnx")

    def run(self, *args: str, cwd: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        try:
            return subprocess.run([self.fusec, *args], capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL, cwd=cwd)
        except subprocess.TimeoutExpired:
            raise Failure(f"`fusec {' '.join(args)}` did not finish within {timeout:.0f} s")

    def expect(self, code: int, *args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
        p = self.run(*args, cwd=cwd)
        if p.returncode != code:
            raise Failure(f"`fusec {' '.join(args)}`: exit {p.returncode}, expected {code}\n"
                          f"stdout: {p.stdout[-1500:]}\nstderr: {p.stderr.strip()[-600:]}")
        if code != 0:
            lines = p.stderr.splitlines()
            if len(lines) != 1 or not lines[0].startswith("fusec: error: "):
                raise Failure(f"`fusec {' '.join(args)}`: stderr should be one 'fusec: error: ' line, got {p.stderr!r}")
        return p

    def error(self, *args: str, mention: tuple[str, ...] = (), cwd: str | None = None) -> str:
        """Expects exit 2 and one 'fusec: error:' line mentioning each of `mention`; returns it."""
        line = self.expect(2, *args, cwd=cwd).stderr.strip()
        for m in mention:
            if m not in line:
                raise Failure(f"`fusec {' '.join(args)}`: the error does not mention {m!r}: {line}")
        return line

    def bench(self, model: str, tag: str, *extra: str) -> str:
        """A bench report of models/<model>.onnx (cached per (model, tag, extra))."""
        key = (model, tag, extra)
        if key not in self._bench_cache:
            out = os.path.join(self.fresh(f"bench_{model}_{tag}"), "bench.json")
            self.expect(0, "bench", self.model(model), *BENCH, *extra, "--json", out)
            self._bench_cache[key] = out
        return self._bench_cache[key]


def rows(p: subprocess.CompletedProcess) -> dict[tuple[str, str], str]:
    """The compare table as {(group, metric): verdict}, groups carried down as printed."""
    out, group, in_table = {}, "", False
    for line in p.stdout.splitlines():
        if re.match(r"^\s+metric\s+base\s+new", line):
            in_table = True
            continue
        if not in_table:
            continue
        if not line.strip():
            break
        cells = re.split(r"\s{2,}", line.rstrip())
        if not line.startswith(" "):
            group = cells[0]
            cells = cells[1:]
        else:
            cells = cells[1:] if cells and cells[0] == "" else cells
        verdict = next((c for c in cells if c in ("~", "REGRESSION", "improved")), "")
        out[(group, cells[0])] = verdict
    if not out:
        raise Failure(f"no table in the output:\n{p.stdout}")
    return out


def load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def validate(path: str, schema: str) -> dict:
    r = load(path)
    jsonschema.validate(r, load(os.path.join(SCHEMAS, schema)))
    return r


# ---- tests ------------------------------------------------------------------------------------

def test_self_is_unchanged(c: Ctx):
    """Each shipped model's bench against itself: every row "~", exit 0; --markdown and --json written."""
    for m in SMALL_MODELS:
        a = c.bench(m, "a")
        d = c.fresh(f"self_{m}")
        md, js = os.path.join(d, "t.md"), os.path.join(d, "v.json")
        p = c.expect(0, "compare", a, a, "--markdown", md, "--json", js)
        bad = {k: v for k, v in rows(p).items() if v != "~"}
        if bad:
            raise Failure(f"{m}: a report against itself should be all '~', got {bad}\n{p.stdout}")
        v = validate(js, "compare.schema.json")
        if v["regressions"] != 0 or any(r["verdict"] != "same" for r in v["rows"]):
            raise Failure(f"{m}: --json verdicts are not all 'same': {v}")
        text = open(md).read()
        if "| optimized | latency |" not in text or "no regression" not in text:
            raise Failure(f"{m}: --markdown table lacks the optimized latency row or the summary:\n{text}")


def test_two_runs_are_unchanged(c: Ctx):
    """Two separate benches of one model: exact rows "~" and exit 0. Timings of two runs drift on
    a shared 2-core CI machine, so this uses --threshold 100% (the fusion loss below is checked
    at the default threshold)."""
    # This VM's speed has swung by 85% between two benches seconds apart (2026-11-26), and by
    # 53-62% in three pairs in a row in a later CI check, with the test running alone: a pair
    # whose only regressions are latencies is measured again, at most three times.
    for m in ["mlp_small", "resnet50_small"]:
        for attempt in range(3):
            a, b = c.bench(m, f"a{attempt}"), c.bench(m, f"b{attempt}")
            p = c.run("compare", a, b, "--threshold", "100%")
            r = rows(p)
            worse = [k for k, v in r.items() if v == "REGRESSION"]
            if p.returncode != 3 or any(k[1] != "latency" for k in worse):
                break
            print(f"     (attempt {attempt + 1}: {m}: only latencies moved: {worse}; again)")
        # Three drifting pairs in a row do happen there: then compare must have said why.
        if p.returncode == 3 and all(k[1] == "latency" for k in worse) and DRIFT in p.stdout:
            print(f"     ({m}: the machine drifted in every pair, and compare noted it)")
        elif p.returncode != 0:
            raise Failure(f"{m}: two runs of one model: exit {p.returncode}, expected 0\n{p.stdout}\n{p.stderr}")
        for key in [("optimized", "nodes"), ("optimized", "activations"), ("as_given", "nodes")]:
            if r.get(key) != "~":
                raise Failure(f"{m}: {key} of two runs of one model should be '~', got {r.get(key)}\n{p.stdout}")


def planted(c: Ctx, src: str, tag: str, scale: dict[str, float]) -> str:
    """A copy of the bench report `src` with each named variant's samples (and median) times its factor."""
    r = load(src)
    for v in r["variants"]:
        f = scale.get(v["name"], 1.0)
        v["samples_ms"] = [x * f for x in v["samples_ms"]]
        for k in v["latency_ms"]:
            v["latency_ms"][k] *= f
    out = os.path.join(c.fresh(f"planted_{tag}"), "bench.json")
    json.dump(r, open(out, "w"))
    return out


def test_fusion_off_is_a_regression(c: Ctx):
    """The same model with the fusion passes skipped (bench --skip): latency and nodes regress, exit 3,
    the error line names them; the reverse direction is an improvement (exit 0). A planted slowdown
    is a latency regression whatever the machine does; a moved as-given model is noted as drift."""
    # The latency threshold is 2%, not the default 5%: on CI's 2-core machine the unfused small MLP
    # measured only 4.1% slower than the fused one (0.2574 against 0.2473 ms, p < 0.001, CI check
    # 2026-11-27), a real slowdown the default threshold calls "~".
    gate = ("--threshold", "2%")
    # The verdict logic on timings, with no machine in it: the optimized variant's samples 25% slower.
    base = c.bench("mlp_small", "a0")
    slow = planted(c, base, "slow", {"optimized": 1.25})
    t = rows(p := c.expect(3, "compare", base, slow, *gate))
    if t.get(("optimized", "latency")) != "REGRESSION" or t.get(("as_given", "latency")) != "~" or DRIFT in p.stdout:
        raise Failure(f"a planted 25% slowdown of the optimized variant should be its one latency regression:\n{p.stdout}")
    # The same with the whole machine 40% faster in `new`: compare keeps the verdicts and says why.
    fast = planted(c, base, "fast", {"as_given": 0.6, "optimized": 0.6})
    p = c.run("compare", base, fast, *gate)
    if p.returncode != 0 or "as_given ran the same graph in both reports, yet its latency moved -40.0%" not in p.stdout:
        raise Failure(f"a machine 40% faster should read as improvements with a drift note:\n{p.stdout}")
    # Sanitized (SANITIZED above), the real pair's latency verdicts are not checked.
    # The real pair. The as-given model is the same in both runs: a control. On the 2-core CI VM it
    # moved by 45% between two benches seconds apart, three pairs running, with the test alone
    # (CI, 2026-12-03); then compare must say so (the drift note), and the pair's latency verdicts
    # say nothing about fusion. A pair with a steady control must show the fused model's lead
    # (a few percent there; one pair in three missed it, CI checks 2026-11-28).
    steady = False
    for attempt in range(5):
        base = c.bench("mlp_small", f"a{attempt}")
        off = c.bench("mlp_small", f"off{attempt}", "--skip", ",".join(FUSION_PASSES))
        p = c.expect(3, "compare", base, off, *gate)
        t = rows(p)
        steady = t.get(("as_given", "latency")) == "~"
        if steady and DRIFT in p.stdout:
            raise Failure(f"a steady control should not be noted as drift:\n{p.stdout}")
        if not steady and DRIFT not in p.stdout:
            raise Failure(f"the as-given model's latency moved; compare should note the drift:\n{p.stdout}")
        if steady and (SANITIZED or t.get(("optimized", "latency")) == "REGRESSION"):
            break
        print(f"     (attempt {attempt + 1}: " + ("the fused model's lead was not measured" if steady else
              "the unchanged as-given model's latency moved too, and compare noted the drift") + "; again)")
    r = load(off)
    if r.get("pipeline", {}).get("skip") != FUSION_PASSES:
        raise Failure(f"bench --skip is not recorded in the report: {r.get('pipeline')}")
    timed = steady and not SANITIZED
    if not steady:
        print("     (the control never held still in five pairs: the real pair's latency verdicts are not checked)")
    checked = [("optimized", "latency"), ("optimized", "nodes")] if timed else [("optimized", "nodes")]
    for key in checked:
        if t.get(key) != "REGRESSION":
            raise Failure(f"fusion off: {key} should be a REGRESSION, got {t.get(key)}\n{p.stdout}")
    if t.get(("as_given", "nodes")) != "~":
        raise Failure(f"fusion off: the as-given model did not change, got {t.get(('as_given', 'nodes'))}")
    if ("optimized latency" not in p.stderr and timed) or "optimized nodes" not in p.stderr:
        raise Failure(f"the error line should name the regressions: {p.stderr}")
    if "skip fold_batchnorm" not in p.stdout:
        raise Failure(f"the table should note the skipped passes:\n{p.stdout}")
    d = c.fresh("off_json")
    c.expect(3, "compare", base, off, *gate, "--json", os.path.join(d, "v.json"), "--markdown", os.path.join(d, "t.md"))
    v = validate(os.path.join(d, "v.json"), "compare.schema.json")
    worse = {(x["group"], x["metric"]) for x in v["rows"] if x["verdict"] == "worse"}
    if not set(checked) <= worse:
        raise Failure(f"--json lists as worse only {worse}")
    if (DRIFT in " ".join(v["notes"])) == steady:
        raise Failure(f"--json's notes should carry the drift note exactly when the control moved: {v['notes']}")
    if "**regression**" not in open(os.path.join(d, "t.md")).read():
        raise Failure("--markdown does not mark the regressions")
    # The reverse direction: an improvement, exit 0 (on a steady machine; else only the exact rows).
    p = c.run("compare", off, base, *gate)
    back = rows(p)
    worse = sorted(k for k, v in back.items() if v == "REGRESSION")
    if (timed and p.returncode != 0) or any(k[1] != "latency" for k in worse):
        raise Failure(f"fusion back on: exit {p.returncode}, expected 0\n{p.stdout}\n{p.stderr}")
    if (back.get(("optimized", "latency")) != "improved" and timed) or back.get(("optimized", "nodes")) != "improved":
        raise Failure(f"fusion back on should be an improvement:\n{p.stdout}")


def test_optimize_reports(c: Ctx):
    """optimize --report: the same model is "~"; with fusion passes skipped the node count regresses."""
    d = c.fresh("optimize")
    full, off = os.path.join(d, "full.json"), os.path.join(d, "off.json")
    c.expect(0, "optimize", c.model("mobilenetv2_small"), "-o", os.path.join(d, "a.onnx"), "--report", full)
    c.expect(0, "optimize", c.model("mobilenetv2_small"), "-o", os.path.join(d, "b.onnx"), "--report", off,
             "--skip", ",".join(FUSION_PASSES))
    t = rows(c.expect(0, "compare", full, full))
    if set(t.values()) - {"~", ""}:
        raise Failure(f"an optimize report against itself should be all '~': {t}")
    p = c.expect(3, "compare", full, off)
    t = rows(p)
    if t.get(("graph", "nodes")) != "REGRESSION" or t.get(("verification", "ok")) != "~":
        raise Failure(f"fusion off: nodes should regress and verification stay ok:\n{p.stdout}")
    if "fold_batchnorm" not in p.stdout:
        raise Failure(f"the table should show which passes stopped rewriting:\n{p.stdout}")


def test_profile_reports(c: Ctx):
    """profile --report: a profile against itself is "~"; the model as given (no fusion) against the
    optimized one regresses in latency, nodes, kernels and launches, and the table notes the variants."""
    d = c.fresh("profile")
    prof = ["--batch", "4", "--iterations", "100", "--warmup", "3", "--device", "cpu"]
    opt = os.path.join(d, "opt.json")
    c.expect(0, "profile", c.model("mlp_small"), *prof, "--report", opt)
    validate(opt, "profile.schema.json")
    t = rows(c.expect(0, "compare", opt, opt))
    if set(t.values()) - {"~", ""}:
        raise Failure(f"a profile against itself should be all '~': {t}")
    # Latency is measured again (up to three times) if a busy machine hid a 1.5x slowdown; the
    # counts are exact every time.
    for attempt in range(3):
        given = os.path.join(d, f"given{attempt}.json")
        c.expect(0, "profile", c.model("mlp_small"), *prof, "--as-given", "--report", given)
        p = c.expect(3, "compare", opt, given)
        t = rows(p)
        for key in [("graph", "nodes"), ("graph", "kernels"), ("cpu", "launches")]:
            if t.get(key) != "REGRESSION":
                raise Failure(f"as given vs optimized: {key} should be a REGRESSION, got {t.get(key)}\n{p.stdout}")
        if t.get(("cpu", "latency")) == "REGRESSION":
            break
    else:
        raise Failure(f"as given vs optimized: the latency regression was not flagged in three tries\n{p.stdout}")
    if "note: variant: base optimized, new as_given" not in p.stdout:
        raise Failure(f"the table should note that the variants differ:\n{p.stdout}")


def test_bad_inputs(c: Ctx):
    """Every bad input: one error line naming the file, exit 2."""
    d = c.fresh("bad")
    a = c.bench("mlp_small", "a")
    missing = os.path.join(d, "missing.json")
    c.error("compare", missing, a, mention=(missing, "does not exist"))
    c.error("compare", a, d, mention=(d, "directory"))
    notjson = os.path.join(d, "notjson.json")
    open(notjson, "w").write("this is not json\n")
    c.error("compare", a, notjson, mention=(notjson, "not JSON"))
    noschema = os.path.join(d, "noschema.json")
    json.dump({"model": "m.onnx"}, open(noschema, "w"))
    c.error("compare", noschema, a, mention=(noschema, "schema", "fusec.bench/2"))
    inspect = os.path.join(d, "inspect.json")
    c.expect(0, "inspect", c.model("mlp_small"), "--json", inspect)
    c.error("compare", inspect, inspect, mention=(inspect, "fusec.inspect/1", "fusec.bench/2", "fusec.optimize/1",
                                                  "fusec.profile/1"))
    newer = os.path.join(d, "newer.json")
    r = load(a)
    r["schema"] = "fusec.bench/3"
    json.dump(r, open(newer, "w"))
    c.error("compare", a, newer, mention=(newer, "fusec.bench/3", "newer", "upgrade fusec"))
    older = os.path.join(d, "older.json")
    r["schema"] = "fusec.bench/1"
    json.dump(r, open(older, "w"))
    c.error("compare", older, a, mention=(older, "older"))
    truncated = os.path.join(d, "truncated.json")
    r = load(a)
    del r["variants"][1]["samples_ms"]
    json.dump(r, open(truncated, "w"))
    c.error("compare", a, truncated, mention=(truncated, "samples_ms"))
    opt = os.path.join(d, "opt.json")
    c.expect(0, "optimize", c.model("mlp_small"), "-o", os.path.join(d, "m.onnx"), "--report", opt)
    c.error("compare", a, opt, mention=("fusec.bench", "fusec.optimize", "one kind"))
    # Mismatched runs: another model, another batch. Allowed with --allow-different, and noted.
    bert = c.bench("bert_small", "a")
    c.error("compare", a, bert, mention=("model 'mlp_small.onnx' vs 'bert_small.onnx'", "--allow-different"))
    p = c.run("compare", a, bert, "--allow-different")
    if p.returncode not in (0, 3) or "note: model differs" not in p.stdout:
        raise Failure(f"--allow-different should compare and note the difference: exit {p.returncode}\n{p.stdout}{p.stderr}")
    batch8 = os.path.join(d, "batch8.json")
    c.expect(0, "bench", c.model("mlp_small"), "--batch", "8", "--iterations", "20", "--warmup", "1", "--device", "cpu",
             "--quiet", "--json", batch8)
    c.error("compare", a, batch8, mention=("batch '4' vs '8'",))
    other_device = os.path.join(d, "other_device.json")
    r = load(a)
    r["device_name"] = "cuda:0 NVIDIA H100 80GB HBM3 (sm_90)"
    r["precision"] = "fp16"
    json.dump(r, open(other_device, "w"))
    c.error("compare", a, other_device, mention=("device_name", "precision 'fp32' vs 'fp16'"))
    # JSON every reader parses through ir/json_text.h: nesting past 64 levels (100k levels crashed
    # dump() with a stack overflow) and numbers no double holds are bad input, named.
    deep = os.path.join(d, "deep.json")
    text = json.dumps(load(a))
    open(deep, "w").write(text.replace('"variants": [', '"variants_x": ' + "[" * 100000 + "]" * 100000 + ', "variants": [', 1))
    c.error("compare", a, deep, mention=(deep, "deeper than 64 levels"))
    c.error("compare", deep, a, "--html", os.path.join(d, "deep.html"), mention=(deep, "deeper than 64 levels"))
    huge = os.path.join(d, "huge.json")
    open(huge, "w").write(text.replace('"samples_ms": [', '"samples_ms": [1e999, ', 1))
    c.error("compare", a, huge, mention=(huge, "outside the range of a double", "1e999"))
    # Flags.
    c.error("compare", a, a, "--threshold", "5", mention=("--threshold", "5%"))
    c.error("compare", a, a, "--alpha", "1.5", mention=("--alpha",))
    c.error("compare", a, a, "--alpha", "nan", mention=("--alpha must be a number greater than 0 and below 1", "'nan'"))
    c.error("compare", a, mention=())
    c.error("bench", c.model("mlp_small"), *BENCH, "--skip", "no_such_pass", mention=("no_such_pass", "fuse_elementwise"))
    c.error("bench", c.model("mlp_small"), *BENCH, "--skip", "fuse_elementwise", "--no-compare", mention=("--no-compare",))


def project_copy(c: Ctx, name: str) -> str:
    """examples/ci copied into a fresh folder (models/ linked beside it, as in the repository); returns
    the copy's examples/ci folder."""
    root = c.fresh(name)
    shutil.copytree(os.path.join(c.examples, "ci"), os.path.join(root, "examples", "ci"))
    os.symlink(c.models, os.path.join(root, "models"))
    if SANITIZED:  # fewer timed runs, as BENCH's (the baselines keep their 200 samples)
        toml = os.path.join(root, "examples", "ci", "fusec.toml")
        text = open(toml).read()
        for key, n in [("iterations", ITERATIONS), ("profile_iterations", PROFILE_ITERATIONS)]:
            text, found = re.subn(rf"^{key} = \d+", f"{key} = {n}", text, flags=re.M)
            if found != 1:
                raise Failure(f"examples/ci/fusec.toml has no single '{key} = N' line to lower under the sanitizer")
        open(toml, "w").write(text)
    return os.path.join(root, "examples", "ci")


def check_until_steady(c: Ctx, cwd: str, *extra: str) -> subprocess.CompletedProcess:
    """`fusec check` expecting exit 0. A timing regression alone is measured again (at most three
    runs): the baselines were recorded on a quieter or busier moment of a shared machine. Anything
    else that regresses fails at once."""
    for attempt in range(3):
        js = os.path.join(cwd, "verdicts.json")
        p = c.run("check", "--json", js, *extra, cwd=cwd, timeout=300)
        if p.returncode == 0:
            return p
        if p.returncode != 3:
            raise Failure(f"fusec check: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr}")
        v = validate(js, "check.schema.json")
        compare_schema = load(os.path.join(SCHEMAS, "compare.schema.json"))
        for m in v["models"]:
            for rep in m["reports"].values():
                jsonschema.validate(rep, compare_schema)
        worse = [(m["name"], k, r["group"], r["metric"], r["kind"]) for m in v["models"] for k, rep in m["reports"].items()
                 for r in rep["rows"] if r["verdict"] == "worse"]
        if any(w[4] != "timing" for w in worse):
            raise Failure(f"fusec check on the sample project: regressions {worse}\n{p.stdout[-3000:]}")
        print(f"     (attempt {attempt + 1}: only timings moved: {worse}; again)")
    raise Failure(f"fusec check: timings regressed in three runs in a row\n{p.stdout[-3000:]}")


def test_check_example_project(c: Ctx):
    """examples/ci: `fusec check` passes against the committed baselines; after planted regressions
    (a pass turned off in fusec.toml, a baseline with half the memory) it exits 3 with a table that
    names them; a baseline from another CPU gates everything but timings, and says so."""
    d = project_copy(c, "check_example")
    # Timings against baselines recorded on another day depend on the machine's load (CI failed once
    # at +21% while a fuzzer shared its two cores), and an ASan build runs several times slower:
    # this test gates everything but timings (a threshold no timing reaches). Timing regressions
    # are tested where both sides are measured in the same run (test_fusion_off_is_a_regression, the statistics).
    timing = ["--threshold", "100000%"]
    p = check_until_steady(c, d, *timing)
    if "fusec check: 4 models" not in p.stdout or "no regression" not in p.stdout:
        raise Failure(f"fusec check should report 4 models and no regression:\n{p.stdout[-1500:]}")
    for m in ["mlp_small", "bert_small", "mobilenetv2_small", "resnet50_small"]:
        if not re.search(rf"^{m}\s+optimize\s+graph\s+nodes", p.stdout, re.M):
            raise Failure(f"the table has no optimize row for {m}:\n{p.stdout[-3000:]}")
    # Planted: mlp_small loses its LayerNorm+GELU fusion; mobilenetv2's baseline needed half the memory.
    toml = os.path.join(d, "fusec.toml")
    text = open(toml).read()
    text = text.replace('path = "../../models/mlp_small.onnx"\n',
                        'path = "../../models/mlp_small.onnx"\nskip = ["fuse_layernorm_gelu", "recognize_gelu"]\n')
    open(toml, "w").write(text)
    base = os.path.join(d, "baselines", "cpu", "mobilenetv2_small.bench.json")
    r = load(base)
    r["variants"][1]["memory"]["peak_activation_bytes"] //= 2
    json.dump(r, open(base, "w"))
    md = os.path.join(d, "check.md")
    p = c.expect(3, "check", "--markdown", md, *timing, cwd=d)
    for pattern in [r"^mlp_small\s+optimize\s+graph\s+nodes\s+50\s+74\s+\+24 \(\+48\.0%\)\s+REGRESSION",
                    r"^\s+activations\s+120\.00 KiB\s+240\.00 KiB\s+\+100%\s+REGRESSION"]:
        if not re.search(pattern, p.stdout, re.M):
            raise Failure(f"the table does not show the planted regression ({pattern}):\n{p.stdout}")
    if "mlp_small: optimize graph nodes" not in p.stderr or "mobilenetv2_small: bench optimized activations" not in p.stderr:
        raise Failure(f"the error line should name the planted regressions: {p.stderr}")
    if "**regression**" not in open(md).read():
        raise Failure("--markdown does not mark the regressions")
    # A baseline from another CPU: timings shown without a verdict, with a note; the rest still gates.
    d2 = project_copy(c, "check_other_cpu")
    bench_file = os.path.join(d2, "baselines", "cpu", "mlp_small.bench.json")
    r = load(bench_file)
    r["cpu_model"] = "Some Other CPU @ 1.0GHz"
    r["variants"][1]["samples_ms"] = [x / 3 for x in r["variants"][1]["samples_ms"]]  # a 3x faster CPU
    json.dump(r, open(bench_file, "w"))
    profile_file = os.path.join(d2, "baselines", "cpu", "mlp_small.profile.json")
    r = load(profile_file)
    r["peaks"]["device"] = "cpu: Some Other CPU @ 1.0GHz x2 threads"
    r["modes"][0]["samples_ms"] = [x / 3 for x in r["modes"][0]["samples_ms"]]
    json.dump(r, open(profile_file, "w"))
    p = c.expect(0, "check", "--model", "mlp_small", cwd=d2)
    if "mlp_small profile: timings not compared" not in p.stdout:
        raise Failure(f"the profile's baseline from another CPU should be noted:\n{p.stdout}")
    if "timings not compared: the baseline comes from another machine" not in p.stdout or \
            "not compared: another machine" not in p.stdout:
        raise Failure(f"a baseline from another CPU should be noted and its timings not judged:\n{p.stdout}")


def write_project(c: Ctx, d: str, body: str) -> str:
    os.symlink(c.models, os.path.join(d, "models"))
    f = os.path.join(d, "fusec.toml")
    open(f, "w").write(body)
    return f


# The timing margin is 100%: at 50%, a 2-core VM ran the same CPU bench 50% slower in three checks
# in a row, seconds after recording (2026-11-26).
SMALL_PROJECT = """baselines = "baselines/{device}"
[defaults]
device = "cpu"
batch = 2
iterations = 30
warmup = 1
profile_iterations = 10
# These tests check the gate's plumbing (recording, staleness, exact rows) right after recording,
# on a machine other tests share: timings get a wide margin here (the timing tests are above).
[thresholds]
latency = "100%"
node = "100%"
[[model]]
path = "models/mlp_small.onnx"
[[model]]
path = "models/bert_small.onnx"
name = "bert"
"""


def test_check_records_and_gates(c: Ctx):
    """A new project: check says to record baselines; --update-baselines records them; check passes;
    a baseline for another batch is stale (an error saying what to do), not a regression."""
    d = c.fresh("check_new")
    write_project(c, d, SMALL_PROJECT)
    c.error("check", cwd=d, mention=("no baseline", "--update-baselines"))
    p = c.expect(0, "check", "--update-baselines", cwd=d)
    if "recorded 6 baselines in" not in p.stdout:
        raise Failure(f"--update-baselines should record 6 reports:\n{p.stdout}")
    for f in ["mlp_small.optimize.json", "mlp_small.bench.json", "mlp_small.profile.json", "bert.bench.json"]:
        if not os.path.exists(os.path.join(d, "baselines", "cpu", f)):
            raise Failure(f"--update-baselines did not write baselines/cpu/{f}")
    validate(os.path.join(d, "baselines", "cpu", "bert.bench.json"), "bench.schema.json")
    check_until_steady(c, d)
    open(os.path.join(d, "fusec.toml"), "w").write(SMALL_PROJECT.replace("batch = 2", "batch = 3"))
    c.error("check", cwd=d, mention=("batch '2'", "'3'", "--update-baselines"))
    c.error("check", "--model", "nope", cwd=d, mention=("nope", "mlp_small, bert"))


def test_check_reports_apart_from_baselines(c: Ctx):
    """--reports that is, holds or lies in a baseline folder is refused before anything runs: the new
    reports would replace the baselines and each be compared with itself."""
    d = c.fresh("check_reports")
    write_project(c, d, SMALL_PROJECT)
    os.makedirs(os.path.join(d, "baselines", "cpu"))
    os.symlink(os.path.join(d, "baselines", "cpu"), os.path.join(d, "link"))
    for reports, how in [("baselines/cpu", " is the baseline folder"), ("baselines/cpu/", " is the baseline folder"),
                         ("link", " is the baseline folder"), ("baselines", " holds the baseline folder"),
                         (".", " holds the baseline folder"), ("baselines/cpu/new", " is inside the baseline folder")]:
        for update in ([], ["--update-baselines"]):
            c.error("check", "--reports", reports, *update, cwd=d, mention=("--reports " + reports + how, "another folder"))
    if os.listdir(os.path.join(d, "baselines", "cpu")):
        raise Failure(f"a refused check wrote into the baselines: {os.listdir(os.path.join(d, 'baselines', 'cpu'))}")


def test_check_records_valid_baselines(c: Ctx):
    """A model file named like a flag (-h) is passed as ./-h, fusec.toml's tolerances reach optimize
    exactly (4e-7 was once passed as 0.000000), and every baseline recorded is non-empty and valid
    against its schema."""
    d = c.fresh("check_flag_named_model")
    shutil.copy(c.model("mlp_small"), os.path.join(d, "-h"))
    open(os.path.join(d, "fusec.toml"), "w").write(
        'baselines = "baselines/{device}"\n[defaults]\ndevice = "cpu"\nbatch = 2\niterations = 5\n'
        'profile_iterations = 3\nwarmup = 0\nrtol = 4e-7\natol = 4e-7\n[[model]]\npath = "-h"\nname = "dash"\n')
    p = c.expect(0, "check", "--update-baselines", "--reports", "rep", cwd=d)
    if "recorded 3 baselines" not in p.stdout:
        raise Failure(f"expected 3 baselines:\n{p.stdout}")
    for kind in ("optimize", "bench", "profile"):
        r = validate(os.path.join(d, "baselines", "cpu", f"dash.{kind}.json"), f"{kind}.schema.json")
        if kind == "optimize" and (r["verification"]["rtol"], r["verification"]["atol"]) != (4e-7, 4e-7):
            raise Failure(f"tolerances reached optimize as {r['verification']['rtol']}, {r['verification']['atol']}")
    out = open(os.path.join(d, "rep", "dash.optimize.out")).read()
    if "(rtol 4e-07, atol 4e-07)" not in out:
        raise Failure(f"optimize's output does not show the project's tolerances:\n{out}")


def test_project_file_errors(c: Ctx):
    """fusec.toml mistakes are one error line with the file and line; no project and no model says what to do."""
    d = c.fresh("no_project")
    c.error("check", cwd=d, mention=("fusec.toml", "--project"))
    c.error("bench", cwd=d, mention=("no model given", "fusec bench MODEL.onnx", "fusec.toml"))
    cases = [
        (SMALL_PROJECT.replace("iterations = 30", "iteratons = 30"), ("fusec.toml:5", "unknown key 'iteratons'", "iterations")),
        (SMALL_PROJECT.replace("batch = 2", "batch = two"), ("fusec.toml:4", "not valid TOML")),
        (SMALL_PROJECT.replace("models/bert_small.onnx", "models/bert_large.onnx"), ("fusec.toml:16", "bert_large.onnx", "does not exist")),
        (SMALL_PROJECT.replace('name = "bert"', 'name = "mlp_small"'), ("two models are named 'mlp_small'",)),
        (SMALL_PROJECT.replace('baselines = "baselines/{device}"', ""), ("no 'baselines' folder",)),
        (SMALL_PROJECT + '[model.thresholds]\nlatency = 5\n', ("latency must be a percentage in quotes",)),
        (SMALL_PROJECT + '[model.thresholds]\nlatency = "5"\n', ("write a percentage",)),
        (SMALL_PROJECT.replace('latency = "100%"', 'latency = "100%"\nlatncy = "5%"'), ("unknown key 'latncy' in [thresholds]",)),
        (SMALL_PROJECT.replace('device = "cpu"', 'device = "tpu"'), ("device must be auto, cpu or cuda",)),
    ]
    for i, (body, mention) in enumerate(cases):
        di = c.fresh(f"bad_project_{i}")
        write_project(c, di, body)
        c.error("check", cwd=di, mention=mention)
    c.error("check", "--project", os.path.join(d, "missing.toml"), mention=("missing.toml", "does not exist"))


def test_bench_without_model(c: Ctx):
    """In a project folder `fusec bench` benches every model of fusec.toml, one report per model."""
    d = c.fresh("bench_project")
    write_project(c, d, SMALL_PROJECT)
    p = c.expect(0, "bench", "--iterations", "5", "--warmup", "0", "--json", "out.json", "--quiet", cwd=d)
    if "== mlp_small" not in p.stdout or "== bert" not in p.stdout:
        raise Failure(f"bench should bench each project model:\n{p.stdout}")
    for name in ["mlp_small", "bert"]:
        r = validate(os.path.join(d, f"out.{name}.json"), "bench.schema.json")
        if r["batch"] != 2 or r["variants"][0]["iterations"] != 5:
            raise Failure(f"bench {name}: batch {r['batch']} (project: 2), {r['variants'][0]['iterations']} iterations (flag: 5)")
    c.expect(0, "bench", "--batch", "3", "--iterations", "3", "--warmup", "0", "--json", "b3.json", "--quiet", cwd=d)
    if load(os.path.join(d, "b3.mlp_small.json"))["batch"] != 3:
        raise Failure("a --batch flag should override the project's batch")


def test_optimize_pictures(c: Ctx):
    """optimize --dot before.dot,after.dot: every node drawn; each fused node coloured and labelled
    with the nodes it absorbed, which share its colour in the before picture. --svg renders them with
    Graphviz when it is installed; without it, or with one path, a clear error."""
    d = c.fresh("dot")
    before, after = os.path.join(d, "before.dot"), os.path.join(d, "after.dot")
    report = os.path.join(d, "r.json")
    c.expect(0, "optimize", c.model("resnet50_small"), "-o", os.path.join(d, "m.onnx"), "--report", report,
             "--dot", f"{before},{after}")
    r = load(report)
    b, a = open(before).read(), open(after).read()
    boxes = lambda text: re.findall(r'^  n\d+ \[label="([^"]*)"(.*)\];$', text, re.M)
    if len(boxes(b)) != r["nodes"]["before"] or len(boxes(a)) != r["nodes"]["after"]:
        raise Failure(f"the pictures should have {r['nodes']['before']} and {r['nodes']['after']} nodes, "
                      f"have {len(boxes(b))} and {len(boxes(a))}")
    # layer1.0.downsample absorbed its BN, the residual Add and the Relu: one colour in both pictures.
    fused = [(label, attrs) for label, attrs in boxes(a) if "layer1.0.downsample\\n" in label]
    if not fused or "absorbed 4:" not in fused[0][0] or "layer1.0.add (Add)" not in fused[0][0]:
        raise Failure(f"the fused downsample conv should list what it absorbed: {fused}")
    color = re.search(r'fillcolor="(#[0-9a-f]{6})"', fused[0][1]).group(1)
    for name in ["layer1.0.downsample", "layer1.0.downsample.bn", "layer1.0.add", "layer1.0.relu3"]:
        node = [attrs for label, attrs in boxes(b) if f"\\n{name}\\n" in label]
        if not node or color not in node[0]:
            raise Failure(f"before: {name} should have its fused node's colour {color}: {node}")
    if not shutil.which("dot"):
        c.error("optimize", c.model("mlp_small"), "-o", os.path.join(d, "m2.onnx"), "--svg", "a.svg,b.svg",
                mention=("Graphviz",))
    else:
        svgs = [os.path.join(d, "before.svg"), os.path.join(d, "after.svg")]
        c.expect(0, "optimize", c.model("resnet50_small"), "-o", os.path.join(d, "m3.onnx"), "--svg", ",".join(svgs))
        for svg, n in zip(svgs, [r["nodes"]["before"], r["nodes"]["after"]]):
            text = open(svg).read()
            drawn = text.count('class="node"')
            if "<svg" not in text or drawn != n + 2:  # + the input and the output
                raise Failure(f"{svg}: {drawn} nodes drawn, expected {n} + input + output")
        env_path = os.environ.get("PATH", "")
        try:
            os.environ["PATH"] = "/nonexistent"
            c.error("optimize", c.model("mlp_small"), "-o", os.path.join(d, "m4.onnx"), "--svg", "a.svg,b.svg",
                    mention=("Graphviz", "apt install graphviz"))
        finally:
            os.environ["PATH"] = env_path
    c.error("optimize", c.model("mlp_small"), "-o", os.path.join(d, "m5.onnx"), "--dot", "only_one.dot",
            mention=("--dot needs two paths",))


TESTS = [test_self_is_unchanged, test_two_runs_are_unchanged, test_fusion_off_is_a_regression, test_optimize_reports,
         test_profile_reports, test_bad_inputs, test_check_example_project, test_check_records_and_gates,
         test_project_file_errors, test_bench_without_model, test_optimize_pictures, test_check_reports_apart_from_baselines,
         test_check_records_valid_baselines]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fusec", required=True)
    ap.add_argument("--models", required=True, help="folder with the small models")
    ap.add_argument("--examples", default=os.path.join(HERE, "..", "..", "examples"), help="folder with ci/")
    ap.add_argument("-k", dest="only", help="run only tests whose name contains this")
    args = ap.parse_args()
    fusec = os.path.abspath(args.fusec)
    if not os.access(fusec, os.X_OK):
        print(f"compare: FAIL: {args.fusec} is not an executable")
        return 1
    t0 = time.monotonic()
    failed = []
    tests = [t for t in TESTS if not args.only or args.only in t.__name__]
    with tempfile.TemporaryDirectory(prefix="fusec_compare_") as tmp:
        c = Ctx(fusec, os.path.abspath(args.models), os.path.abspath(args.examples), tmp)
        for t in tests:
            t1 = time.monotonic()
            try:
                t(c)
                print(f"ok   {t.__name__:<36} ({time.monotonic() - t1:.2f} s)")
            except Failure as e:
                failed.append(t.__name__)
                print(f"FAIL {t.__name__:<36} {e}")
            except Exception:  # noqa: BLE001 - a crash in a test is a failure, not an abort
                failed.append(t.__name__)
                print(f"FAIL {t.__name__:<36} raised:\n{traceback.format_exc()}")
            sys.stdout.flush()
    secs = time.monotonic() - t0
    if failed:
        print(f"compare: FAIL: {len(failed)}/{len(tests)} tests failed ({secs:.1f} s): {', '.join(failed)}")
        return 1
    print(f"compare: ok: {len(tests)}/{len(tests)} tests passed ({secs:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

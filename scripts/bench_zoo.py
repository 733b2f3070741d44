#!/usr/bin/env python3
"""The model zoo against PyTorch on one GPU, both export forms, in one run (issue 27, work item 1).

Models (--models, comma-separated; default all, in this order): resnet50, mobilenet_v3_large,
efficientnet_b0, convnext_tiny, vit_b_16 (torchvision, 3x224x224), bert (bert-base), gpt2, llama
(4 layers of Llama-3.2-1B's sizes), built with seeded random weights by scripts/export_zoo.py (its
docstring says how), at --batch 16 and seq 128 for the text models. Per model:

  1. Exports. export_zoo.py's export_one_model writes, into --zoo DIR, <model>.<form>.onnx for each
     --exports form (legacy: TorchScript, opset 17; dynamo: torch.export), the inputs, torch's fp32
     outputs and torch's own fp16 error (<model>.json). Files already there are reused when their
     JSON has this batch, seq and seed, every asked form and a reference from the same torch
     device; --re-export always exports again.
  2. fusec, per export form (commands recorded in zoo.json):
       fusec optimize M -o W/M.opt.onnx --batch B --no-check      (--optimize-check N: verify on the CPU)
       fusec run W/M.opt.onnx --device cuda --precision fp16       vs torch fp32: the check (below)
       fusec bench M --device cuda --batch B --precision fp16 --json   as given and optimized, one process,
                                                                   with empty tuning/NVRTC caches of its own
     as_given_ms and optimized_ms are bench's medians; engine_build_s is the optimized variant's
     engine_build_ms (import + passes + plan with tuning + first run, cold caches); "reverted" is
     copied when bench's JSON names decisions the device reverted (issue 27, item 2).
  3. PyTorch peers, once per model, in this process: copy.deepcopy(model).half() on the GPU (a model
     that fails under .half(), as RAFT does, runs in float32 under torch.autocast float16 instead:
     export_zoo.fp16_module; its rows' torch_fp16 and zoo.md's notes say so), channels_last for the
     torchvision models (channels_last_3d for the video models), the same input files fusec ran;
     CUDA events per call after --warmup calls, median (bench_peers.py's time_torch):
       eager; torch.compile default; torch.compile mode="reduce-overhead"; mode="max-autotune" (only
       with --max-autotune); eager + manual CUDA graph (last: a failed capture must not cost the
       others). transformers' models cannot be captured by hand (their mask code copies from the
       host, docs in GPU.md): that peer's value then reads "unsupported: ..." and is not an error,
       reduce-overhead being the graph-captured peer for them.
     Each peer but eager runs --peer-trials times (default 2; a compiled peer is compiled afresh each
     time) and keeps its fastest trial's figures, every trial's median listed in its peer_details
     (trials_median_ms): reduce-overhead's median on ConvNeXt-T moved from 1.455 to 1.716 ms between
     two runs of the same day, and a target judged against the slow trial would be met by luck.
     best_torch_ms is the fastest peer measured, best_torch its name.

The check (fusec's fp16 against torch's fp32, as check_exports.py judges it): per output,
err = max|fusec - torch fp32| / max|torch fp32| (check_exports.max_rel: inf when the shape differs
or fusec's output is not finite), and the export passes when every output's
err <= max(2 x torch's own fp16 error for that output, --fp16-floor = 1e-3). Twice torch's error is
check_exports.py's bound; the floor (about two fp16 roundings of the largest output) only keeps a
model whose torch fp16 happens to be almost exact from failing on one rounding. When torch's fp16
error is unknown (no CUDA reference) or torch's own fp16 output is not finite, fp16 cannot be judged
against it: fusec's optimized model is then run at fp32 instead and passes when err <= 1e-3
(bench_peers.py's fp32 bound); --fusec-device cpu always judges that way, the CPU backend running
fp32. "check" is "ok" or a short reason; check_detail, max_rel and bound say more.

Targets (issue 27), per row: optimized <= 0.8 x best torch; optimized <= 1.02 x as given.

Outputs, in --out (default docs/benchmarks), rewritten after every stage so that a run killed at the
device's 10-minute limit keeps what it measured:
  zoo.json  {"gpu", "driver", "date", "torch", "fusec", "batch", "command", "rows": [{"model",
             "export", "as_given_ms", "optimized_ms", "best_torch_ms", "best_torch", "engine_build_s",
             "check", "peers": {config: ms or a reason}, "vs_best_torch", "vs_as_given", ...}], ...}
  zoo.md    the header (GPU, driver, date, the command) and the tables
  zoo.log   everything printed
Bulky files (optimized models, fusec outputs, bench JSON) go to --work (default ZOO/bench_zoo). The
table is printed last (the device returns only the last 12,000 characters of output).

Exit status: 0 when every row's check is "ok" and no stage errored, else 1 (2: bad arguments, or a
--merge refused). Skipped stages (over --time-budget, --skip-compile, torch on the CPU) and models
not started for the budget are listed, not errors. A row whose best torch misses a peer the budget
skipped reads "unknown" against the 0.8 target instead of "met", and --merge prefers a row that
measured that peer over a later one that did not.

On the lent GPU (repo root, fusec built into build-gpu/ with its lib/; one call per line, each under
10 minutes; then merge):
    python3 scripts/bench_zoo.py --models resnet50,mobilenet_v3_large,efficientnet_b0 --out $OUT
    python3 scripts/bench_zoo.py --models convnext_tiny,vit_b_16,bert --out $OUT
    python3 scripts/bench_zoo.py --models gpt2,llama --out $OUT
    python3 scripts/bench_zoo.py --merge A/zoo.json B/zoo.json C/zoo.json --out docs/benchmarks
Without a GPU (exercises everything but CUDA: torch fp32 eager on the CPU, fusec --device cpu):
    python3 scripts/bench_zoo.py --models mobilenet_v3_large --batch 2 --device-torch cpu --fusec-device cpu \\
        --fusec build/fusec --zoo /tmp/zoo --out /tmp/zoo-out
Needs torch, torchvision, transformers, onnx, onnxscript and numpy (--help, --merge and --self-check
need none of them).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
# The table's order: the torchvision CNNs (ViT last, it is patchified), then the text models.
ZOO_ORDER = ("resnet50", "mobilenet_v3_large", "efficientnet_b0", "convnext_tiny", "vit_b_16", "bert", "gpt2",
             "llama")
FORMS = ("legacy", "dynamo")
PEERS = ("eager", "eager+graph", "compile", "reduce-overhead", "max-autotune")
COMPILE_MODES = {"compile": None, "reduce-overhead": "reduce-overhead", "max-autotune": "max-autotune"}

TARGET_VS_BEST_TORCH = 0.8  # issue 27: optimized <= 0.8 x the best torch peer
TARGET_VS_AS_GIVEN = 1.02  # issue 27: the pipeline never makes a model slower (2% noise allowed)
FP32_TOL = 1e-3  # bench_peers.py's fp32 bound, for the fp32 fallback check

T0 = time.perf_counter()
LOG_FILE = None
DOC: dict = {}  # zoo.json as it grows
ARGS = None

# scripts/export_zoo.py, check_exports.py and bench_peers.py, imported by helpers() once the
# arguments are read: they need numpy, which --help, --merge and --self-check do not.
ez = ce = bp = np = None


def helpers() -> None:
    global ez, ce, bp, np
    sys.path.insert(0, HERE)
    import numpy
    import bench_peers
    import check_exports
    import export_zoo
    ez, ce, bp, np = export_zoo, check_exports, bench_peers, numpy


def elapsed() -> float:
    return time.perf_counter() - T0


def log(msg: str = "") -> None:
    line = f"[{elapsed():6.1f} s] {msg}" if msg else ""
    print(line, flush=True)
    if LOG_FILE:
        LOG_FILE.write(line + "\n")
        LOG_FILE.flush()


def first_line(text: str, n: int = 200) -> str:
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    return (lines[0] if lines else "")[:n]


def last_line(text: str, n: int = 300) -> str:
    """A traceback's last line: the exception and its message."""
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[:n]


def record_error(where: list, stage: str, exc: BaseException | str) -> str:
    """Appends {"stage", "error"} to each dict of where (rows, or DOC); logs it; returns the text."""
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    for w in where:
        w.setdefault("errors", []).append({"stage": stage, "error": text[:2000]})
    log(f"  ERROR [{stage}] {first_line(text, 300)}")
    if not isinstance(exc, str) and LOG_FILE:
        LOG_FILE.write(traceback.format_exc() + "\n")
    return text


def stage(where: list, label: str, fn, *a, **kw):
    """Runs one stage; an exception is recorded in each dict of where and the run goes on."""
    log(label)
    try:
        out = fn(*a, **kw)
    except Exception as e:  # noqa: BLE001 - every stage must fail alone, whatever it raised
        record_error(where, label, e)
        out = None
    save()
    return out


# ---- command line --------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(ZOO_ORDER),
                   help="comma-separated subset of " + ",".join(ZOO_ORDER) + ", any torchvision classifier "
                        "(densenet121, swin_t, ...) or family of scripts/families.py (qwen2, gemma, ...: small "
                        "configs, for checking fp16 on the GPU): the families beyond the zoo, timed the same way")
    p.add_argument("--exports", default=",".join(FORMS), help="comma-separated: legacy, dynamo (default both)")
    p.add_argument("--batch", type=int, default=16, help="batch (default %(default)s)")
    p.add_argument("--seq", type=int, default=128, help="sequence length of the text models (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of weights and inputs (default %(default)s)")
    p.add_argument("--zoo", default="/tmp/fusec-zoo", help="export folder, reused across runs (default %(default)s)")
    p.add_argument("--re-export", action="store_true", help="export again even when --zoo has the files")
    p.add_argument("--static", action="store_true", help="export every dim fixed (default: symbolic batch)")
    p.add_argument("--work", default=None, help="folder for optimized models, fusec outputs, bench JSON "
                                               "(default ZOO/bench_zoo)")
    p.add_argument("--out", default=os.path.join("docs", "benchmarks"),
                   help="folder for zoo.json, zoo.md, zoo.log (default %(default)s)")
    p.add_argument("--fusec", default=os.path.join("build-gpu", "fusec"), help="fusec binary (default %(default)s)")
    p.add_argument("--fusec-device", default="cuda", choices=("cuda", "cpu"),
                   help="fusec's --device; cpu runs fp32 (a dry run without a GPU)")
    p.add_argument("--device-torch", default="cuda", choices=("cuda", "cpu"),
                   help="where torch runs the references and peers; cpu times fp32 eager only (a dry run)")
    p.add_argument("--allow-newer-opset", action="store_true", help="pass --allow-newer-opset to fusec")
    p.add_argument("--optimize-check", type=int, default=0,
                   help="fusec optimize --check N (verification on the CPU backend, slow at batch 16); "
                        "default 0: --no-check, the GPU run against torch being the check")
    p.add_argument("--fp16-floor", type=float, default=1e-3,
                   help="least fp16 bound, max|d|/max|ref| (default %(default)s; the bound is "
                        "max(2 x torch's own fp16 error, this))")
    p.add_argument("--fusec-duration", type=float, default=2.0, help="fusec bench --duration per variant, s "
                                                                    "(default %(default)s)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per fusec command (default %(default)s)")
    p.add_argument("--warmup", type=int, default=20, help="warm-up calls, torch and fusec bench (default %(default)s)")
    p.add_argument("--iterations", type=int, default=None,
                   help="torch: a fixed number of timed calls (default: >= 200 calls and >= --min-time s)")
    p.add_argument("--min-time", type=float, default=1.0, help="torch: least seconds per peer (default %(default)s)")
    p.add_argument("--max-time", type=float, default=5.0, help="torch: most seconds per peer (default %(default)s)")
    p.add_argument("--skip-compile", action="store_true", help="no torch.compile peers")
    p.add_argument("--peer-trials", type=int, default=2,
                   help="runs of each peer but eager, the fastest kept (default %(default)s; compiled afresh each "
                        "run; later runs are skipped past --time-budget)")
    p.add_argument("--max-autotune", action="store_true", help='also torch.compile(mode="max-autotune"): minutes '
                                                                "per model")
    p.add_argument("--time-budget", type=float, default=450.0,
                   help="seconds after which no new model starts and no torch.compile peer starts; files are "
                        "still written (default %(default)s: a 10-minute device call minus one model's worst case)")
    p.add_argument("--no-lib-path", action="store_true",
                   help="leave LD_LIBRARY_PATH alone for fusec (default: prepend the torch venv's cuDNN and "
                        "the bundle's lib/ (beside bin/ or beside fusec), as bench_peers.py does)")
    p.add_argument("--merge", nargs="+", metavar="JSON", default=None,
                   help="measure nothing: merge the zoo.json files of earlier runs (same GPU, driver, torch, fusec "
                        "and batch; for a model x export measured twice the last file wins) into --out")
    p.add_argument("--self-check", action="store_true",
                   help="check the summary, Markdown and --merge code on made-up rows (no torch, no GPU) and exit")
    a = p.parse_args(argv)
    a.models = [m.strip() for m in a.models.split(",") if m.strip()]
    a.exports = [f.strip() for f in a.exports.split(",") if f.strip()]
    bad = [f for f in a.exports if f not in FORMS]
    if bad:
        p.error(f"unknown export {bad}; exports: {','.join(FORMS)}")
    # Names outside the zoo are checked against torchvision's classifiers once torch is imported (main).
    if a.peer_trials < 1:
        p.error("--peer-trials wants at least 1")
    if a.work is None:
        a.work = os.path.join(a.zoo, "bench_zoo")
    return a


# ---- rows, targets and the report ----------------------------------------------------------------


def new_row(model: str, form: str) -> dict:
    return {"model": model, "export": form, "as_given_ms": None, "optimized_ms": None, "best_torch_ms": None,
            "best_torch": None, "engine_build_s": None, "check": "not run", "peers": {},
            "vs_best_torch": None, "vs_as_given": None}


def verdict(ratio, target: float) -> str:
    return "unknown" if ratio is None else ("met" if ratio <= target else "missed")


def unmeasured_peers(row: dict) -> list:
    """Peers this run meant to measure and did not reach (the time budget ran out first): a faster
    one among them could make the best torch figure, and a "met" against it, untrue."""
    return sorted(k for k, v in (row.get("peers") or {}).items()
                  if isinstance(v, str) and v.startswith("skipped:") and "--time-budget" in v)


def summarise(row: dict) -> dict:
    """Fills best_torch, the ratios and the targets from the row's measurements. Against a best
    torch that misses a peer the budget skipped, "met" is not known ("unknown"); "missed" stands."""
    timed = {k: v for k, v in (row.get("peers") or {}).items() if isinstance(v, (int, float))}
    best = min(timed, key=timed.get) if timed else None
    row["best_torch"] = best
    row["best_torch_ms"] = timed[best] if best else None
    opt, given, bt = row.get("optimized_ms"), row.get("as_given_ms"), row.get("best_torch_ms")
    row["vs_best_torch"] = round(opt / bt, 3) if opt and bt else None
    row["vs_as_given"] = round(opt / given, 3) if opt and given else None
    row["unmeasured_peers"] = unmeasured_peers(row)
    vs_best = verdict(row["vs_best_torch"], TARGET_VS_BEST_TORCH)
    if vs_best == "met" and row["unmeasured_peers"]:
        vs_best = "unknown"
    row["targets"] = {"vs_best_torch": vs_best, "vs_as_given": verdict(row["vs_as_given"], TARGET_VS_AS_GIVEN)}
    return row


def row_failed(row: dict) -> bool:
    return row.get("check") != "ok" or bool(row.get("errors"))


def sort_rows(rows: list) -> list:
    def key(r):
        m = ZOO_ORDER.index(r["model"]) if r["model"] in ZOO_ORDER else len(ZOO_ORDER)
        return (m, r["model"], FORMS.index(r["export"]) if r["export"] in FORMS else 9)
    return sorted(rows, key=key)


def ms(x) -> str:
    return "-" if not isinstance(x, (int, float)) else (f"{x:.3f}" if x >= 0.1 else f"{x:.4f}")


def peer_cell(v) -> str:
    if isinstance(v, (int, float)):
        return ms(v)
    if v is None:
        return "-"
    word = str(v).split(":", 1)[0]  # "error", "skipped", "unsupported"
    return word if word in ("error", "skipped", "unsupported") else "-"


def ratio_cell(x, target: float, unmeasured: list = ()) -> str:
    if x is None:
        return "-"
    v = verdict(x, target)
    if v == "met" and unmeasured:
        return f"{x:.2f} unknown ({', '.join(unmeasured)} not run)"
    return f"{x:.2f} {v}"


def main_table(rows: list) -> list:
    lines = [f"| model | export | as given | optimized | best torch | opt / best torch (<= {TARGET_VS_BEST_TORCH}) "
             f"| opt / as given (<= {TARGET_VS_AS_GIVEN}) | engine build s | check |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        bt = f"{ms(r.get('best_torch_ms'))} ({r['best_torch']})" if r.get("best_torch") else "-"
        eb = r.get("engine_build_s")
        check = r.get("check") or "-"
        if r.get("errors") and check == "ok":
            check = f"ok; {len(r['errors'])} stage error(s)"
        lines.append(f"| {r['model']} | {r['export']} | {ms(r.get('as_given_ms'))} | {ms(r.get('optimized_ms'))} | "
                     f"{bt} | {ratio_cell(r.get('vs_best_torch'), TARGET_VS_BEST_TORCH, r.get('unmeasured_peers') or [])} | "
                     f"{ratio_cell(r.get('vs_as_given'), TARGET_VS_AS_GIVEN)} | "
                     f"{'-' if eb is None else f'{eb:.2f}'} | {check.replace('|', '/')} |")
    return lines


def peers_table(rows: list) -> list:
    """One line per model (both exports share the peers): each peer's median ms, compile seconds."""
    cols = [p for p in PEERS if any(p in (r.get("peers") or {}) for r in rows)]
    if not cols:
        return []
    lines = ["| model | " + " | ".join(cols) + " |", "| --- |" + " --- |" * len(cols)]
    seen = set()
    for r in rows:
        if r["model"] in seen:
            continue
        seen.add(r["model"])
        cells = []
        for p in cols:
            c = peer_cell((r.get("peers") or {}).get(p))
            cs = (r.get("peer_compile_s") or {}).get(p)
            cells.append(c + (f" ({cs:.0f} s)" if cs is not None and c[:1].isdigit() else ""))
        lines.append(f"| {r['model']} | " + " | ".join(cells) + " |")
    return lines


def notes(doc: dict, rows: list) -> list:
    """Why a cell is not a number: each row's check detail when not ok, errors, skips."""
    out = []
    for r in rows:
        tag = f"{r['model']}.{r['export']}"
        if r.get("check") != "ok" and r.get("check_detail"):
            out.append(f"- {tag} check: {r['check_detail']}")
        for e in r.get("errors") or []:
            out.append(f"- {tag} error [{e['stage']}]: {first_line(e['error'], 300)}")
        if r.get("reverted"):
            out.append(f"- {tag} reverted by the device: {json.dumps(r['reverted'])[:300]}")
    seen = set()
    for r in rows:
        if (r.get("torch_fp16") or "model.half()") != "model.half()" and r["model"] not in seen:
            seen.add(r["model"])
            out.append(f"- {r['model']} torch peers: {first_line(r['torch_fp16'], 300)}")
    seen = set()
    for r in rows:
        for p, v in (r.get("peers") or {}).items():
            if isinstance(v, str) and (r["model"], p) not in seen:
                seen.add((r["model"], p))
                out.append(f"- {r['model']} torch {p}: {first_line(v, 300)}")
    for e in doc.get("errors") or []:
        out.append(f"- error [{e['stage']}]: {first_line(e['error'], 300)}")
    if doc.get("not_started"):
        out.append(f"- not started (over --time-budget): {', '.join(doc['not_started'])}")
    return out


def markdown(doc: dict) -> str:
    rows = doc.get("rows") or []
    cmds = doc.get("parts") and [p["command"] for p in doc["parts"]] or [doc.get("command", "?")]
    days = sorted({str(p.get("date")) for p in doc.get("parts") or []})
    when = f"{days[0]} to {days[-1]}" if len(days) > 1 else doc.get("date")
    lines = [f"# fusec model zoo against PyTorch, batch {doc.get('batch')}", "",
             f"GPU: {doc.get('gpu')}, driver {doc.get('driver') or '?'}; {when}; torch {doc.get('torch')}; "
             f"{doc.get('fusec')}" + (f" (built from {doc['repo_commit']})" if doc.get("repo_commit") else "")
             + f"; fusec {doc.get('fusec_precision', 'fp16')} on {doc.get('fusec_device', 'cuda')}, torch "
             f"{doc.get('torch_precision', 'fp16')} on {doc.get('torch_device', 'cuda')}; seq "
             f"{doc.get('seq')} for the text models.", "",
             *(["**A dry run on the CPU (fusec and torch fp32): not a benchmark.**", ""]
               if "cpu" in (doc.get("fusec_device"), doc.get("torch_device")) else []),
             "Reproduce (repo root, fusec built into build-gpu/)" + (", then `--merge`d:" if doc.get("parts") else ":"),
             ""]
    lines += [f"    {c}" for c in cmds]
    if doc.get("parts"):
        lines.append(f"    {doc.get('command')}")
        # A model's row is the last part's that ran it: say which build and day each row is from.
        date_of = {m: p.get("date") for p in doc["parts"] for m in p.get("models") or []}
        groups: dict = {}
        for r in rows:
            key = (r.get("fusec_commit") or "?", date_of.get(r["model"], "?"))
            if r["model"] not in groups.setdefault(key, []):
                groups[key].append(r["model"])
        if len(groups) > 1:
            lines += ["", "Rows by build and day: " + "; ".join(
                f"{c} ({d}): {', '.join(ms)}" for (c, d), ms in sorted(groups.items(), key=lambda kv: kv[0][1],
                                                                    reverse=True)) + "."]
    lines += ["", "Median ms per batch. fusec: `fusec bench` (as given and optimized, one process, CUDA events; "
              "engine build with cold caches). torch: the fastest of the peers below (model.half(), or autocast "
              "where the notes say; channels_last for CNNs (channels_last_3d for video models); CUDA events, median). Targets (issue 27): optimized <= 0.8 x best torch; optimized <= "
              "1.02 x as given. check: fusec's optimized fp16 against torch fp32 (scripts/bench_zoo.py says the "
              "rule).", ""]
    lines += main_table(rows)
    peers = peers_table(rows)
    if peers:
        lines += ["", "torch peers, median ms (compile seconds):", ""] + peers
    n = notes(doc, rows)
    if n:
        lines += ["", "Notes:", ""] + n
    return "\n".join(lines) + "\n"


def save() -> None:
    """zoo.json and zoo.md in --out, after every stage (atomic replace)."""
    if ARGS is None or not DOC:
        return
    DOC["rows"] = sort_rows([summarise(r) for r in DOC.get("rows", [])])
    write_outputs(ARGS.out, DOC)


def write_outputs(out: str, doc: dict) -> str:
    os.makedirs(out, exist_ok=True)
    md = markdown(doc)
    for name, text in (("zoo.json", json.dumps(doc, indent=1, default=str) + "\n"), ("zoo.md", md)):
        path = os.path.join(out, name)
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
    return md


def exit_status(doc: dict) -> int:
    rows = doc.get("rows") or []
    return 1 if not rows or doc.get("errors") or any(row_failed(r) for r in rows) else 0


def final_print(doc: dict) -> None:
    rows = doc.get("rows") or []
    failed = [f"{r['model']}.{r['export']}" for r in rows if row_failed(r)]
    n = notes(doc, rows)
    if n:
        print("\nnotes:")
        print("\n".join(line[:400] for line in n[-25:]))
    print(f"\n{doc.get('gpu')}, driver {doc.get('driver') or '?'}, {doc.get('date')}, torch {doc.get('torch')}, "
          f"{doc.get('fusec')}, batch {doc.get('batch')}")
    print("\n".join(main_table(rows)))
    print("\n".join(peers_table(rows) or ["(no torch peer measured)"]))
    print("bench_zoo: " + ("every check ok, no stage errored" if exit_status(doc) == 0 else
                           "FAILED: " + (", ".join(failed) or "no rows") +
                           (f"; {len(doc.get('errors') or [])} run-level error(s)" if doc.get("errors") else "")))


# ---- merge ---------------------------------------------------------------------------------------

# Runs of different fusec commits merge (a model measured again after a change replaces its rows);
# each row keeps its commit and the header lists them all.
SAME = ("gpu", "driver", "torch", "fusec", "batch", "seq", "fusec_device", "torch_device")


def merge(paths: list, out: str, argv: list, quiet: bool = False) -> int:
    """Merges the zoo.json files of partial runs into one zoo.json/zoo.md in out. Refused (exit 2,
    naming the field) when the runs differ in what makes their figures comparable."""
    docs = []
    for path in paths:
        try:
            with open(path) as f:
                docs.append((path, json.load(f)))
        except (OSError, ValueError) as e:
            if not quiet:
                print(f"bench_zoo: cannot read {path}: {e}", file=sys.stderr)
            return 2
    first_path, first = docs[0]
    for path, d in docs[1:]:
        for k in SAME:
            if d.get(k) != first.get(k):
                if quiet:
                    return 2
                print(f"bench_zoo: {path} has {k} {d.get(k)!r}, {first_path} has {first.get(k)!r}: not merged",
                      file=sys.stderr)
                return 2
    # A later run's row replaces an earlier one's, unless it has peers the budget skipped that
    # the earlier one measured: an incomplete row never hides a complete one.
    rows: dict = {}
    for _, d in docs:
        for r in d.get("rows") or []:
            r.setdefault("fusec_commit", d.get("repo_commit"))
            key = (r["model"], r["export"])
            if key in rows and len(unmeasured_peers(r)) > len(unmeasured_peers(rows[key])):
                continue
            rows[key] = r
    merged = {k: first.get(k) for k in first if k not in ("rows", "parts", "command", "errors", "not_started", "date")}
    merged["date"] = max(str(d.get("date")) for _, d in docs)
    merged["command"] = shlex.join(["python3"] + argv)
    merged["parts"] = []
    for path, d in docs:
        merged["parts"] += d.get("parts") or [{"command": d.get("command"), "date": d.get("date"), "file": path,
                                               "models": sorted({r["model"] for r in d.get("rows") or []})}]
    merged["rows"] = sort_rows([summarise(r) for r in rows.values()])
    commits = sorted({r.get("fusec_commit") for r in merged["rows"] if r.get("fusec_commit")})
    merged["repo_commit"] = ", ".join(commits) or None
    merged["errors"] = [e for _, d in docs for e in d.get("errors") or []]
    done = {r["model"] for r in merged["rows"]}
    merged["not_started"] = sorted({m for _, d in docs for m in d.get("not_started") or []} - done)
    write_outputs(out, merged)
    if quiet:
        return exit_status(merged)
    print(f"merged {len(docs)} runs into {os.path.join(out, 'zoo.json')}: " +
          ", ".join(f"{p} ({len(d.get('rows') or [])} rows)" for p, d in docs))
    final_print(merged)
    return exit_status(merged)


def self_check() -> int:
    """The report and --merge on made-up rows: ratios, verdicts, best peer, refusal. No torch."""
    def doc(rows, **kw):
        d = {"gpu": "test GPU", "driver": "1", "date": "2026-01-01", "torch": "t", "fusec": "f", "batch": 16,
             "seq": 128, "command": "python3 scripts/bench_zoo.py --models x", "rows": rows}
        d.update(kw)
        return d
    a = new_row("resnet50", "legacy")
    a.update(as_given_ms=1.0, optimized_ms=0.7, check="ok",
             peers={"eager": 3.0, "eager+graph": 1.0, "compile": "error: boom", "reduce-overhead": 1.2})
    b = new_row("bert", "dynamo")
    b.update(as_given_ms=2.0, optimized_ms=2.1, check="fp16 max rel 3.0e-02 > bound 1.0e-03",
             peers={"eager": 4.0, "eager+graph": "unsupported: capture failed", "reduce-overhead": 2.0})
    summarise(a)
    summarise(b)
    assert (a["best_torch"], a["best_torch_ms"], a["vs_best_torch"], a["vs_as_given"]) == ("eager+graph", 1.0, 0.7, 0.7)
    assert a["targets"] == {"vs_best_torch": "met", "vs_as_given": "met"}, a["targets"]
    assert b["best_torch"] == "reduce-overhead" and b["targets"] == {"vs_best_torch": "missed", "vs_as_given": "missed"}
    md = markdown(doc([a, b]))
    assert "| resnet50 | legacy | 1.000 | 0.700 | 1.000 (eager+graph) | 0.70 met | 0.70 met |" in md, md
    assert exit_status(doc([a])) == 0 and exit_status(doc([a, b])) == 1
    # A model whose peers ran under autocast says so once, whatever its exports.
    ra, rd = new_row("raft_small", "legacy"), new_row("raft_small", "dynamo")
    for r in (ra, rd):
        r.update(as_given_ms=1.7, optimized_ms=1.6, check="ok", peers={"eager": 5.0},
                 torch_fp16="torch.autocast float16 (model.half() failed: RuntimeError: grid)")
        summarise(r)
    md = markdown(doc([a, ra, rd]))
    assert md.count("- raft_small torch peers: torch.autocast float16") == 1 and "resnet50 torch peers" not in md, md
    t = fastest_trial([{"median_ms": 1.716, "min_ms": 1.5, "compile_s": 10.4}, {"median_ms": 1.45549, "min_ms": 1.4}])
    assert t == {"median_ms": 1.45549, "min_ms": 1.4, "trials_median_ms": [1.716, 1.4555]}, t
    with tempfile.TemporaryDirectory() as tmp:
        pa, pb, pc = (os.path.join(tmp, f"{n}.json") for n in "abc")
        for path, d in ((pa, doc([a])), (pb, doc([b], command="python3 scripts/bench_zoo.py --models bert")),
                        (pc, doc([b], gpu="other GPU"))):
            with open(path, "w") as f:
                json.dump(d, f)
        out = os.path.join(tmp, "out")
        rc = merge([pa, pb], out, ["scripts/bench_zoo.py", "--merge", pa, pb], quiet=True)
        with open(os.path.join(out, "zoo.json")) as f:
            m = json.load(f)
        assert rc == 1 and [r["model"] for r in m["rows"]] == ["resnet50", "bert"] and len(m["parts"]) == 2
        assert merge([pa, pc], os.path.join(tmp, "out2"), [], quiet=True) == 2
        # Parts from two builds and days: the header spans the days and says which rows are whose.
        pd, pe = os.path.join(tmp, "d.json"), os.path.join(tmp, "e.json")
        for path, d in ((pd, doc([a], repo_commit="aaa")), (pe, doc([b], repo_commit="bbb", date="2026-01-02"))):
            with open(path, "w") as f:
                json.dump(d, f)
        merge([pd, pe], os.path.join(tmp, "out3"), [], quiet=True)
        with open(os.path.join(tmp, "out3", "zoo.md")) as f:
            md = f.read()
        assert "; 2026-01-01 to 2026-01-02;" in md and \
            "Rows by build and day: bbb (2026-01-02): bert; aaa (2026-01-01): resnet50." in md, md
        # A peer the budget skipped: "met" is unknown, and a merge keeps the complete row whatever
        # the order of the parts.
        inc = new_row("gpt2", "legacy")
        inc.update(as_given_ms=2.0, optimized_ms=0.95, check="ok",
                   peers={"eager": 6.0, "eager+graph": 1.7, "compile": 2.3,
                          "reduce-overhead": "skipped: 180 s spent, over --time-budget 176 s"})
        summarise(inc)
        assert inc["unmeasured_peers"] == ["reduce-overhead"] and inc["targets"]["vs_best_torch"] == "unknown"
        assert "| 0.56 unknown (reduce-overhead not run) |" in markdown(doc([inc])), markdown(doc([inc]))
        full = json.loads(json.dumps(inc))
        full["peers"]["reduce-overhead"] = 1.3
        summarise(full)
        assert full["targets"]["vs_best_torch"] == "met" and full["best_torch"] == "reduce-overhead"
        pf, pi = os.path.join(tmp, "f.json"), os.path.join(tmp, "i.json")
        for path, d in ((pf, doc([full])), (pi, doc([inc]))):
            with open(path, "w") as f:
                json.dump(d, f)
        for order in ([pf, pi], [pi, pf]):
            out4 = os.path.join(tmp, "out4")
            merge(order, out4, [], quiet=True)
            with open(os.path.join(out4, "zoo.json")) as f:
                kept = json.load(f)["rows"]
            assert len(kept) == 1 and kept[0]["best_torch_ms"] == 1.3, (order, kept)
    print("bench_zoo self-check: ok")
    return 0


# ---- exports -------------------------------------------------------------------------------------


def export_args(args) -> argparse.Namespace:
    """The namespace export_zoo.py's functions read (its command line's defaults, this run's sizes)."""
    return argparse.Namespace(seed=args.seed, batch=args.batch, seq=args.seq, attn="default", no_mask=False,
                              library_init=False, out=args.zoo, static=args.static or args.batch < 2,
                              skip_reference=False, opset=None)


def stale(name: str, meta: dict | None, args) -> str | None:
    """Why the files in --zoo cannot be reused for this model, or None when they can."""
    if meta is None:
        return "no JSON"
    if meta.get("error"):
        return "the last build failed"
    want = {"batch": args.batch, "seq": args.seq if ez.is_text_model(name) else None, "seed": args.seed}
    for k, v in want.items():
        if meta.get(k, 0 if k == "seed" else None) != v:
            return f"{k} {meta.get(k)} there, {v} asked"
    ref = meta.get("reference") or {}
    if "error" in ref or ref.get("device") != args.device_torch:
        return f"reference from {ref.get('device') or 'nowhere'}, {args.device_torch} asked"
    files = [f"{name}.output.{o}.npy" for o in meta.get("outputs") or []]
    files += [f"{name}.input.{k}.npy" for k in meta.get("inputs") or {}]
    for form in args.exports:
        e = (meta.get("exports") or {}).get(form) or {}
        if not e or "error" in e:
            return f"no {form} export"
        files.append(f"{name}.{form}.onnx")
    missing = [f for f in files if not os.path.exists(os.path.join(args.zoo, f))]
    return f"missing {missing[0]}" if missing else None


def prepare(name: str, args, env: dict, rows: list) -> tuple[dict, object]:
    """Exports (or reuses) one model's files; returns (its export_zoo JSON, the fp32 model on the CPU)."""
    zargs = export_args(args)
    path = os.path.join(args.zoo, f"{name}.json")
    meta = None
    if os.path.exists(path):
        with open(path) as f:
            meta = json.load(f)
    why = "--re-export" if args.re_export else stale(name, meta, args)
    if why is None:
        log(f"  reusing {name}'s files in {args.zoo}")
        model, _, _ = ez.build(name, zargs)  # the same seeded weights the files were made from
        return meta, model
    log(f"  exporting {name} ({why})")
    meta, failures, model = ez.export_one_model(name, args.exports, zargs, args.device_torch, env)
    for f in failures:  # "<name> (build)", "<name> (reference)" or "<name>.<form>"
        form = f[len(name) + 1:] if f.startswith(name + ".") else None
        if form:
            where, text = [r for r in rows if r["export"] == form], (meta["exports"].get(form) or {}).get("error")
        else:
            where, text = rows, meta.get("error") or (meta.get("reference") or {}).get("error")
        record_error(where, f"export {f}", last_line(text or "failed"))
    if model is None:
        raise RuntimeError("the model was not built (see the export error)")
    # The peers get a fresh build, as when the files are reused: an export can leave the module
    # unfit to copy (the TorchScript trace of RAFT-small leaves tensors on it that are not graph
    # leaves, and copy.deepcopy refuses them).
    model, _, _ = ez.build(name, zargs)
    return meta, model


# ---- fusec ---------------------------------------------------------------------------------------


def fusec_flags(args) -> list:
    return ["--allow-newer-opset"] if args.allow_newer_opset else []


def fusec_check(row: dict, name: str, form: str, meta: dict, args, env: dict) -> None:
    """fusec optimize, then fusec run of the optimized model against torch fp32 (the docstring's rule)."""
    src = os.path.join(args.zoo, f"{name}.{form}.onnx")
    opt = os.path.join(args.work, f"{name}.{form}.opt.onnx")
    cmd = [args.fusec, "optimize", src, "-o", opt, "--batch", str(args.batch)] + fusec_flags(args)
    cmd += ["--check", str(args.optimize_check)] if args.optimize_check > 0 else ["--no-check"]
    rc, _, wall = bp.run_cmd(cmd, env, args.timeout, row, f"{name}.{form}: fusec optimize")
    row["optimize_s"] = round(wall, 2)
    if rc != 0:
        row["check"] = "fusec optimize failed"
        return
    # export_zoo gives torch's names to both forms, so inputs go by name; an exporter may drop one the
    # model never reads (torch's legacy exporter drops MRA's attention_mask). Other names: by position.
    onnx_inputs = [i["name"] for i in meta["exports"][form]["inputs"]]
    files = {k: os.path.join(args.zoo, f"{name}.input.{k}.npy") for k in meta["inputs"]}
    if all(k in files for k in onnx_inputs):
        inputs = {k: files[k] for k in onnx_inputs}
    elif len(onnx_inputs) == len(files):
        inputs = dict(zip(onnx_inputs, files.values()))
    else:
        row["check"] = f"the ONNX model takes {len(onnx_inputs)} inputs, torch {len(files)}"
        return
    refs = [np.load(os.path.join(args.zoo, f"{name}.output.{o}.npy")) for o in meta["outputs"]]
    runs = row.setdefault("fusec_run", {})
    run_dir = os.path.join(args.work, f"{name}.{form}")
    os.makedirs(run_dir, exist_ok=True)

    def run(prec: str):
        got = ce.fusec_outputs(args, opt, inputs, prec, run_dir, runs, prec, device=args.fusec_device, env=env)
        if got is None:
            err = runs[prec].get("error", "")
            record_error([row], f"{name}.{form}: fusec run {prec}", f"exit {runs[prec]['rc']}: {err[-600:]}")
            return None, f"fusec run {prec} failed: {first_line(err.splitlines()[-1] if err else '', 120)}"
        if len(got) != len(refs):
            return None, f"fusec gave {len(got)} outputs, torch {len(refs)}"
        return [ce.max_rel(g, r) for g, r in zip(got, refs)], None

    torch16 = []  # torch's own fp16 error per output, when known and finite
    ref16 = (meta.get("reference") or {}).get("fp16") or {}
    for o in meta["outputs"]:
        e = ref16.get(o) or {}
        ok = e.get("finite", True) and isinstance(e.get("max_rel"), (int, float)) and e["max_rel"] == e["max_rel"] \
            and e["max_rel"] != float("inf")
        torch16.append(e["max_rel"] if ok else None)

    if args.fusec_device == "cuda":
        errs, why = run("fp16")
        if why:
            row["check"] = why
            return
        row["max_rel"] = max(errs)
        if all(t is not None for t in torch16):
            bounds = [max(ce.FP16_FACTOR * t, args.fp16_floor) for t in torch16]
            row["bound"] = min(bounds)
            bad = [(e, b) for e, b in zip(errs, bounds) if not e <= b]
            row["check_detail"] = (f"fp16 max rel {max(errs):.1e}, bound max({ce.FP16_FACTOR:g} x torch fp16 "
                                   f"{max(torch16):.1e}, {args.fp16_floor:g})")
            if not bad:
                row["check"] = "ok"
            elif bad[0][0] == float("inf"):
                row["check"] = "fp16 output not finite, or not the reference's shape"
            else:
                row["check"] = f"fp16 max rel {bad[0][0]:.1e} > {bad[0][1]:.1e}"
            return
        unjudged = ("torch's own fp16 output is not finite" if ref16 else
                    (meta.get("reference") or {}).get("fp16_note") or "no torch fp16 reference")
    else:
        unjudged = "fusec on the CPU runs fp32"
    errs, why = run("fp32")
    if why:
        row["check"] = why
        return
    row["max_rel_fp32"] = max(errs)
    row["bound"] = FP32_TOL
    row["check_detail"] = f"fp16 not judged ({unjudged}); fp32 max rel {max(errs):.1e}, bound {FP32_TOL:g}"
    if all(e <= FP32_TOL for e in errs):
        row["check"] = "ok"
    elif max(errs) == float("inf"):
        row["check"] = "fp32 output not finite, or not the reference's shape"
    else:
        row["check"] = f"fp32 max rel {max(errs):.1e} > {FP32_TOL:g}"


REVERTED_KEYS = ("reverted", "reverted_decisions", "device_reverted")


def fusec_bench(row: dict, name: str, form: str, args, env: dict) -> None:
    """fusec bench of the export as given: both variants' medians and the optimized engine build."""
    src = os.path.join(args.zoo, f"{name}.{form}.onnx")
    prec = "fp16" if args.fusec_device == "cuda" else "fp32"
    jpath = os.path.join(args.work, f"{name}.{form}.bench.json")
    if os.path.exists(jpath):
        os.remove(jpath)
    cmd = [args.fusec, "bench", src, "--device", args.fusec_device, "--batch", str(args.batch), "--precision", prec,
           "--warmup", str(args.warmup), "--duration", str(args.fusec_duration), "--quiet", "--json", jpath]
    cmd += fusec_flags(args)
    # Empty tuning and NVRTC caches of its own: engine_build_s is a first start's, comparable run to run.
    caches = os.path.join(args.work, f"caches.{name}.{form}")
    shutil.rmtree(caches, ignore_errors=True)
    os.makedirs(caches)
    benv = dict(env, FUSEC_TUNING_CACHE=os.path.join(caches, "tuning.json"),
                FUSEC_NVRTC_CACHE_DIR=os.path.join(caches, "nvrtc"))
    rc, _, wall = bp.run_cmd(cmd, benv, args.timeout, row, f"{name}.{form}: fusec bench")
    row["bench_s"] = round(wall, 2)
    if rc != 0:
        return
    with open(jpath) as f:
        j = json.load(f)
    variants = {v["name"]: v for v in j.get("variants", [])}
    detail = {}
    for vn, v in variants.items():
        detail[vn] = {"nodes": v.get("nodes"), "cuda_graph": v.get("cuda_graph"), "cv": v.get("cv"),
                      "iterations": v.get("iterations"), "cpu_nodes": len(v.get("cpu_nodes") or []),
                      "engine_build_ms": v.get("engine_build_ms")}
        row[f"{vn}_ms"] = (v.get("latency_ms") or {}).get("median")
    row["fusec_bench"] = detail
    o = variants.get("optimized") or {}
    build_ms = o.get("engine_build_ms", o.get("build_ms"))
    row["engine_build_s"] = round(build_ms / 1e3, 3) if build_ms is not None else None
    for where in (o, j):
        for k in REVERTED_KEYS:
            if k in where:
                row["reverted"] = where[k]
    log(f"  as given {ms(row.get('as_given_ms'))} ms, optimized {ms(row.get('optimized_ms'))} ms, engine build "
        f"{row['engine_build_s']} s" + (f", reverted {row['reverted']}" if row.get("reverted") else ""))


# ---- torch peers ---------------------------------------------------------------------------------


def fastest_trial(runs: list) -> dict:
    """The run (time_torch's dict) with the lowest median, with every run's median as trials_median_ms."""
    best = dict(min(runs, key=lambda v: v["median_ms"]))
    best["trials_median_ms"] = [round(v["median_ms"], 4) for v in runs]
    return best


def torch_peers(name: str, model, meta: dict, args, rows: list) -> None:
    """Times every peer of one model; fills each row's peers (ms or a reason) and peer_details."""
    import copy

    import torch

    dev = torch.device(args.device_torch)
    cuda = dev.type == "cuda"
    cnn = ez.is_conv_model(name)
    xs = [torch.from_numpy(np.load(os.path.join(args.zoo, f"{name}.input.{k}.npy"))).to(dev) for k in meta["inputs"]]
    if cuda:
        # no_grad, not inference_mode: the half copy's parameters must not be inference tensors,
        # which torch.compile and graph capture then meet outside it.
        with torch.no_grad():
            m, xs, how, why = ez.fp16_module(model, xs, channels_last=cnn)
        for r in rows:
            r["torch_fp16"] = "model.half()" if how == "half" else f"torch.autocast float16 (model.half() failed: {why})"
        if how != "half":
            log(f"{name}: torch runs under torch.autocast float16: model.half() failed: {why}")
    else:
        m, xs = ez.place(copy.deepcopy(model), xs, channels_last=cnn)

    def fn():
        return m(*xs)

    peers, details, compile_s = {}, {}, {}
    for r in rows:
        r["peers"], r["peer_details"], r["peer_compile_s"] = peers, details, compile_s

    def trials(f, *a) -> dict:
        """f(*a) --peer-trials times (no new trial past --time-budget), reduced by fastest_trial."""
        runs = []
        for i in range(args.peer_trials):
            if i and elapsed() > args.time_budget:
                break
            runs.append(f(*a))
            if i:
                log(f"  trial {i + 1}: median {runs[-1]['median_ms']:.4f} ms")
        return fastest_trial(runs)

    def measure(config: str, f, *a):
        log(f"{name}: torch {config}")
        try:
            v = f(*a) if config == "eager" else trials(f, *a)
            peers[config] = round(v["median_ms"], 4)
            details[config] = {k: v[k] for k in v if k in ("median_ms", "min_ms", "p90_ms", "iterations",
                                                             "compile_s", "vs_eager_rel", "replay_vs_eager_rel",
                                                             "trials_median_ms")}
            if "compile_s" in v:
                compile_s[config] = v["compile_s"]
            log(f"  median {v['median_ms']:.4f} ms" + (f", compile {v['compile_s']} s" if "compile_s" in v else ""))
        except Exception as e:  # noqa: BLE001
            text = f"{type(e).__name__}: {first_line(str(e), 300)}"
            if config == "eager+graph" and ez.is_text_model(name):
                # GPU.md: transformers' mask code copies from the host, which capture forbids. Known, so
                # not an error; reduce-overhead is the graph-captured peer for these models.
                peers[config] = f"unsupported: {text}"
                log(f"  unsupported: {text}")
            else:
                peers[config] = f"error: {text}"
                record_error(rows, f"{name}: torch {config}", e)
        save()

    with torch.inference_mode():
        measure("eager", bp.time_torch, fn, dev, args)
    if not cuda:
        for p in PEERS[1:]:
            if p != "max-autotune" or args.max_autotune:
                peers[p] = "skipped: torch on the CPU (dry run)"
        return
    for config, mode in COMPILE_MODES.items():
        if config == "max-autotune" and not args.max_autotune:
            continue
        if args.skip_compile:
            peers[config] = "skipped: --skip-compile"
        elif elapsed() > args.time_budget:
            peers[config] = f"skipped: {elapsed():.0f} s spent, over --time-budget {args.time_budget:.0f} s"
            log(f"{name}: torch {config} {peers[config]}")
        else:
            measure(config, bp.compile_and_time, m, xs, mode, dev, args, fn)
    torch._dynamo.reset()
    with torch.inference_mode():
        measure("eager+graph", bp.graph_and_time, fn, dev, args)
    save()


# ---- main ----------------------------------------------------------------------------------------


def gpu_driver() -> str | None:
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
        return p.stdout.strip().splitlines()[0] if p.returncode == 0 and p.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def fusec_commit(fusec: str) -> str | None:
    """The commit fusec was built from: the COMMIT file scripts/gpu_bundle.sh puts beside the binary,
    else HEAD of this checkout (a copy of the tree on another machine may carry a stale .git)."""
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(fusec)), "COMMIT")) as f:
            return f.read().strip() or None
    except OSError:
        return repo_commit()


def repo_commit() -> str | None:
    """HEAD of the checkout this script is in (None without git)."""
    try:
        p = subprocess.run(["git", "-C", os.path.dirname(HERE), "rev-parse", "--short", "HEAD"], capture_output=True,
                           text=True, timeout=10)
        return p.stdout.strip() or None if p.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def bench_model(name: str, args, env: dict, xenv: dict, fusec_ok: bool) -> None:
    rows = [new_row(name, form) for form in args.exports]
    DOC["rows"] += rows
    log(f"==== {name} ====")
    got = stage(rows, f"{name}: export to {args.zoo}", prepare, name, args, xenv, rows)
    if not got:
        for r in rows:
            r["check"] = "export failed"
        save()
        return
    meta, model = got
    for r in rows:
        form = r["export"]
        e = (meta.get("exports") or {}).get(form) or {}
        if not e or "error" in e:
            r["check"] = "export failed"
            continue
        r["nodes"] = e.get("nodes")
        if "dynamic_batch_error" in e:
            r["export_note"] = "exported static: " + first_line(e["dynamic_batch_error"], 200)
        if not fusec_ok:
            r["check"] = "not run: no usable fusec (see the run's errors)"
            continue
        if (meta.get("reference") or {}).get("error"):
            r["check"] = "no torch reference"
        else:
            stage([r], f"{name}.{form}: fusec check", fusec_check, r, name, form, meta, args, env)
        stage([r], f"{name}.{form}: fusec bench", fusec_bench, r, name, form, args, env)
    stage(rows, f"{name}: torch peers", torch_peers, name, model, meta, args, rows)
    del model
    import gc
    gc.collect()
    try:
        import torch
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001
        pass


def main(argv=None) -> int:
    global ARGS, LOG_FILE
    args = parse_args(argv)
    if args.self_check:
        return self_check()
    if args.merge:
        return merge(args.merge, args.out, sys.argv if argv is None else ["scripts/bench_zoo.py"] + list(argv))
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.zoo, exist_ok=True)
    os.makedirs(args.work, exist_ok=True)
    LOG_FILE = open(os.path.join(args.out, "zoo.log"), "w")
    ARGS = args
    now = datetime.datetime.now(datetime.timezone.utc)
    DOC.update({"schema": "fusec.bench_zoo/1", "gpu": None, "driver": None, "date": now.date().isoformat(),
                "started": now.isoformat(timespec="seconds"), "torch": None, "fusec": None,
                "repo_commit": fusec_commit(args.fusec), "batch": args.batch, "seq": args.seq,
                "command": shlex.join([os.path.basename(sys.executable) or "python3"] + sys.argv),
                "fusec_device": args.fusec_device, "torch_device": args.device_torch,
                "fusec_precision": "fp16" if args.fusec_device == "cuda" else "fp32",
                "torch_precision": "fp16" if args.device_torch == "cuda" else "fp32",
                "rules": {"fp32_fallback_bound": FP32_TOL, "target_vs_best_torch": TARGET_VS_BEST_TORCH,
                          "target_vs_as_given": TARGET_VS_AS_GIVEN},
                "rows": [], "errors": [], "not_started": []})
    try:
        helpers()
        import torch
    except Exception as e:  # noqa: BLE001
        record_error([DOC], "import numpy/torch and the helper scripts", e)
        save()
        final_print(DOC)
        return 1
    unknown = [m for m in args.models
               if m not in ZOO_ORDER and m not in ez.families.FAMILIES and not ez.is_image_model(m)]
    if unknown:
        print(f"bench_zoo: unknown model {unknown}; models: {','.join(ZOO_ORDER)}, a torchvision classifier or a "
              f"family of scripts/families.py", file=sys.stderr)
        return 2
    DOC["torch"] = torch.__version__
    DOC["rules"]["fp16_bound"] = f"max({ce.FP16_FACTOR:g} x torch's own fp16 error, {args.fp16_floor:g})"
    if args.device_torch == "cuda":
        if not torch.cuda.is_available():
            record_error([DOC], "torch cuda", "torch.cuda.is_available() is False (a dry run: --device-torch cpu "
                                              "--fusec-device cpu)")
            save()
            final_print(DOC)
            return 1
        DOC["gpu"] = torch.cuda.get_device_name(0)
        DOC["driver"] = gpu_driver()
        DOC["cuda"] = torch.version.cuda
        DOC["cudnn"] = torch.backends.cudnn.version()
        torch.backends.cudnn.benchmark = True  # PyTorch's fastest convolutions
    else:
        DOC["gpu"] = "none (torch on the CPU)"
    # bench_peers' helpers read their settings from args: fusec_env (fusec, no_lib_path) and time_torch
    # (warmup, iterations, min_time, max_time) find them in this script's arguments.
    env = bp.fusec_env(args)
    DOC["fusec_ld_library_path"] = env.get("LD_LIBRARY_PATH")
    bp.LOG_FILE = LOG_FILE  # bench_peers' run_cmd logs a failed command's stderr there too
    fusec_ok = False
    if not os.access(args.fusec, os.X_OK):
        record_error([DOC], "fusec", f"no executable fusec at {args.fusec} (--fusec PATH)")
    else:
        rc, out, _ = bp.run_cmd([args.fusec, "--version"], env, 30, DOC, "fusec --version")
        if rc == 0:
            DOC["fusec"] = out.strip()
            fusec_ok = True
    try:
        xenv = ez.versions(args.device_torch)
    except Exception as e:  # noqa: BLE001
        xenv = {"torch": torch.__version__}
        record_error([DOC], "library versions", e)
    log(f"bench_zoo: {DOC['gpu']} (driver {DOC['driver']}), torch {DOC['torch']}, {DOC['fusec']}; models "
        f"{args.models}, exports {args.exports}, batch {args.batch}; out {args.out}, zoo {args.zoo}")
    save()

    for name in args.models:
        if elapsed() > args.time_budget:
            DOC["not_started"].append(name)
            log(f"{name}: not started, {elapsed():.0f} s spent, over --time-budget {args.time_budget:.0f} s")
            continue
        try:
            bench_model(name, args, env, xenv, fusec_ok)
        except Exception as e:  # noqa: BLE001 - one model's surprise must not cost the others
            record_error([r for r in DOC["rows"] if r["model"] == name] or [DOC], f"{name}", e)
        save()
    DOC["total_s"] = round(elapsed(), 1)
    save()
    log(f"done in {DOC['total_s']} s; {os.path.join(args.out, 'zoo.json')}, zoo.md, zoo.log")
    LOG_FILE.close()
    LOG_FILE = bp.LOG_FILE = None
    final_print(DOC)
    return exit_status(DOC)


if __name__ == "__main__":
    sys.exit(main())

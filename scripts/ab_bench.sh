#!/usr/bin/env bash
# A/B of two fusec builds in one run on one GPU: ResNet-50, BERT-base and the seed MLP at batch 16,
# fp32 and fp16, each build's `fusec bench` (median ms as given / optimized, and the engine builds),
# the builds interleaved per model so drift hits both alike. For a change that must not move the
# numbers (a refactor): medians within 2% and engine builds no slower.
#   OLD=/path/old/fusec NEW=/path/new/fusec bash scripts/ab_bench.sh [OUT]
# Needs torch, torchvision and transformers (scripts/export_zoo.py) and the onnx package.
# Writes OUT/ab.json and OUT/ab.md (default ./ab-out).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-ab-out}
mkdir -p "$out" "$out/cache/OLD" "$out/cache/NEW"
: "${OLD:?OLD=path to the old fusec}" "${NEW:?NEW=path to the new fusec}"
zoo=$out/zoo
if [ ! -f "$zoo/resnet50.legacy.onnx" ]; then
  python3 scripts/export_zoo.py --models resnet50 --exports legacy --out "$zoo" --skip-reference >/dev/null
fi
if [ ! -f "$zoo/bert/bert.legacy.onnx" ]; then
  python3 scripts/export_zoo.py --models bert --exports legacy --attn eager --no-mask --out "$zoo/bert" --skip-reference >/dev/null
fi
if [ ! -f "$zoo/mlp.onnx" ]; then
  python3 scripts/generate_models.py --size full --only mlp --out "$zoo" >/dev/null
fi
declare -A models=([resnet50]="$zoo/resnet50.legacy.onnx" [bert-base]="$zoo/bert/bert.legacy.onnx" [mlp]="$zoo/mlp.onnx")
for m in resnet50 bert-base mlp; do
  for p in fp32 fp16; do
    for side in OLD NEW; do
      bin=${!side}
      # Each build keeps its own tuning and NVRTC caches, so neither's engine build finds the
      # other's work: the first model of each is a cold build, the rest warm, alike on both sides.
      FUSEC_TUNING_CACHE=$out/cache/$side/tuning.json FUSEC_NVRTC_CACHE_DIR=$out/cache/$side/nvrtc \
      "$bin" bench "${models[$m]}" --device cuda --batch 16 --precision "$p" --duration "${DURATION:-1.5}" --quiet \
        --json "$out/$m.$p.$side.json" >/dev/null
    done
  done
done
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
rows, verdict = [], True
for m in ("resnet50", "bert-base", "mlp"):
    for p in ("fp32", "fp16"):
        r = {}
        for side in ("OLD", "NEW"):
            d = json.load(open(os.path.join(out, f"{m}.{p}.{side}.json")))
            v = {x["name"]: x for x in d["variants"]}
            r[side] = {k: {"median_ms": v[k]["latency_ms"]["median"], "engine_build_ms": v[k]["engine_build_ms"]} for k in v}
        for k in r["NEW"]:
            old, new = r["OLD"][k], r["NEW"][k]
            dm = new["median_ms"] / old["median_ms"] - 1
            ok = abs(dm) <= 0.02
            verdict &= ok
            rows.append({"model": m, "precision": p, "variant": k, "old_ms": old["median_ms"], "new_ms": new["median_ms"],
                         "delta": dm, "old_build_ms": old["engine_build_ms"], "new_build_ms": new["engine_build_ms"], "within_2pct": ok})
json.dump({"rows": rows, "medians_within_2pct": verdict}, open(os.path.join(out, "ab.json"), "w"), indent=2)
lines = ["| model | precision | variant | OLD ms | NEW ms | delta | engine build OLD / NEW ms |", "| --- | --- | --- | --- | --- | --- | --- |"]
for r in rows:
    lines.append(f"| {r['model']} | {r['precision']} | {r['variant']} | {r['old_ms']:.4f} | {r['new_ms']:.4f} | {r['delta']*100:+.1f}% | "
                 f"{r['old_build_ms']:.0f} / {r['new_build_ms']:.0f} |")
lines.append("")
lines.append(f"medians within 2%: {'yes' if verdict else 'NO'}")
open(os.path.join(out, "ab.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY

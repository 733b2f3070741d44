#!/usr/bin/env bash
# Warm engine builds of two fusec builds, interleaved, many times: what ab_bench.sh's one build per
# bench cannot settle ("engine builds no slower" for a refactor). Each side keeps its own tuning and
# NVRTC caches, filled by one untimed warm-up bench; then ROUNDS rounds of OLD and NEW alternating
# (the order flips each round), each a `fusec bench` whose JSON gives engine_build_ms per variant.
#   OLD=/path/old/fusec NEW=/path/new/fusec MODEL=m.onnx bash scripts/ab_build_time.sh [OUT]
#   (PRECISIONS="fp16 fp32", ROUNDS=15, BATCH=16)
# Writes OUT/build_time.json and prints median, quartiles, min and max per side, precision and variant.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-ab-build-out}
: "${OLD:?OLD=path to the old fusec}" "${NEW:?NEW=path to the new fusec}" "${MODEL:?MODEL=an ONNX model}"
rounds=${ROUNDS:-15}
mkdir -p "$out/cache/OLD" "$out/cache/NEW" "$out/runs"
bench() {  # side precision tag
  local bin=${!1}
  FUSEC_TUNING_CACHE=$out/cache/$1/tuning.json FUSEC_NVRTC_CACHE_DIR=$out/cache/$1/nvrtc \
    "$bin" bench "$MODEL" --device cuda --batch "${BATCH:-16}" --precision "$2" --iterations 5 --warmup 1 --quiet \
    --json "$out/runs/$3.json" >/dev/null
}
for p in ${PRECISIONS:-fp16 fp32}; do
  for side in OLD NEW; do bench $side "$p" "warmup.$p.$side"; done
  for ((r = 0; r < rounds; r++)); do
    if ((r % 2 == 0)); then order="OLD NEW"; else order="NEW OLD"; fi
    for side in $order; do bench $side "$p" "$p.$side.$r"; done
  done
done
python3 - "$out" <<'PY'
import glob, json, os, re, statistics, sys
out = sys.argv[1]
samples = {}
for f in glob.glob(os.path.join(out, "runs", "*.json")):
    m = re.match(r"(fp\d+|bf16|tf32)\.(OLD|NEW)\.\d+\.json$", os.path.basename(f))
    if not m:
        continue
    for v in json.load(open(f))["variants"]:
        samples.setdefault((m.group(1), v["name"], m.group(2)), []).append(v["engine_build_ms"])
rows = []
print(f"{'precision':9} {'variant':10} {'side':4} {'n':>3} {'median':>8} {'q1':>8} {'q3':>8} {'min':>8} {'max':>8}  (engine_build_ms)")
for key in sorted(samples):
    s = sorted(samples[key])
    q = statistics.quantiles(s, n=4) if len(s) > 1 else [s[0]] * 3
    row = {"precision": key[0], "variant": key[1], "side": key[2], "n": len(s), "median": statistics.median(s),
           "q1": q[0], "q3": q[2], "min": s[0], "max": s[-1], "samples": s}
    rows.append(row)
    print(f"{key[0]:9} {key[1]:10} {key[2]:4} {len(s):3} {row['median']:8.1f} {q[0]:8.1f} {q[2]:8.1f} {s[0]:8.1f} {s[-1]:8.1f}")
json.dump({"rows": rows}, open(os.path.join(out, "build_time.json"), "w"), indent=1)
PY

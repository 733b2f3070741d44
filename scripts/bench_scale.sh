#!/usr/bin/env bash
# Scale benchmark: BERT-style encoders written the way the legacy exporter writes them (decomposed
# LayerNorm, Erf GELU, weights in external data; scripts/make_scale_model.py) at 108M, 334M and
# 1.27B parameters, and a 7B-class fp16 one when the disk has room; for each, wall time and peak
# RSS of `fusec inspect`, `fusec optimize --no-check` and ONNX Runtime's optimizer
# (InferenceSession with optimized_model_filepath, extended level, external initializers), in one
# run, printed as a Markdown table.
#
#   bash scripts/bench_scale.sh                  # all sizes (needs build/fusec and .venv)
#   bash scripts/bench_scale.sh 108m 1.27b       # some
#   SCALE_DIR=/big/disk bash scripts/bench_scale.sh
#
# Models are generated once into $SCALE_DIR (default build/scale) and kept; outputs are deleted
# after each measurement. Every command runs with the files in the page cache (just written or
# just read). ONNX Runtime runs under an address-space cap (MEM_CAP_GIB, default: the machine's
# memory less 2 GiB) so that running out of memory fails instead of taking the machine down; fusec
# needs none (it checks its allocations against its own --max-memory budget, and its address space
# holds memory-mapped weights that an address-space cap would count but RSS does not).
set -euo pipefail
cd "$(dirname "$0")/.."
fusec=$(realpath "${FUSEC:-build/fusec}")
py="$PWD/.venv/bin/python"
dir=${SCALE_DIR:-build/scale}
mkdir -p "$dir"
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(108m 334m 1.27b 7b-fp16)
mem_kib=$(awk '/MemTotal/ {print $2}' /proc/meminfo)
cap_kib=$(( ${MEM_CAP_GIB:-$(( mem_kib / 1048576 - 2 ))} * 1048576 ))
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat > "$tmp/ort_optimize.py" <<'PY'
import os, sys
import onnxruntime as ort
model, out = sys.argv[1], sys.argv[2]
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
so.optimized_model_filepath = out
so.add_session_config_entry("session.optimized_model_external_initializers_file_name", os.path.basename(out) + ".data")
so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
PY

# measure NAME CAP_KIB OUT CMD...: runs CMD twice (under an address-space cap unless CAP_KIB is
# "unlimited") and prints the faster run's "wall_s rss_kib", or "FAIL <reason>". Two runs, because
# on a machine whose page cache holds only part of a big model the first tool to read it pays for
# the disk; the faster run is the one with the files cached, for every tool alike. Before each run
# the previous output files (OUT*) are deleted and `sync` writes back what earlier runs left
# dirty, so no run is slowed down by another's writeback (neither tool syncs its own output).
measure() {
  local name=$1 cap=$2 outputs=$3 best="" run; shift 3
  for run in 1 2; do
    rm -f "$outputs"*
    sync
    if ! (ulimit -v "$cap"; /usr/bin/time -f "%e %M" -o "$tmp/$name.time" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"); then
      echo "FAIL $(grep -v '^Command\|^\s*$' "$tmp/$name.err" | tail -1 | cut -c1-80)"
      return
    fi
    run=$(tail -1 "$tmp/$name.time")
    if [ -z "$best" ] || awk -v a="${run%% *}" -v b="${best%% *}" 'BEGIN {exit !(a < b)}'; then best=$run; fi
  done
  echo "$best"
}
cell() {  # "wall_s rss_kib" -> "1.23 s / 456 MiB"
  if [[ $1 == FAIL* ]]; then echo "${1#FAIL }"; return; fi
  awk -v w="$(echo "$1" | cut -d' ' -f1)" -v k="$(echo "$1" | cut -d' ' -f2)" \
    'BEGIN { r = k / 1024; if (r >= 1024) printf "%.2f s / %.2f GiB", w, r / 1024; else printf "%.2f s / %.0f MiB", w, r }'
}

rows=()
for size in "${sizes[@]}"; do
  model="$dir/bert_$size.onnx"
  if [ ! -f "$model.data" ]; then
    # The 7B-class model needs ~13 GiB for itself and as much again for each optimizer's output.
    need_gib=$([ "$size" = 7b-fp16 ] && echo 45 || echo 15)
    free_gib=$(df -Pk "$dir" | awk 'NR == 2 {print int($4 / 1048576)}')
    if [ "$free_gib" -lt "$need_gib" ]; then
      echo "bench_scale: skipping $size: $free_gib GiB free on $(df -P "$dir" | awk 'NR == 2 {print $6}'), it needs about $need_gib GiB" >&2
      continue
    fi
    echo "bench_scale: generating $size ..." >&2
    "$py" scripts/make_scale_model.py --size "$size" --out "$dir" >&2
  fi
  weights=$(stat -c %s "$model.data")
  params=$("$py" -c "import onnx,sys; print(onnx.load('$model', load_external_data=False).doc_string.split(': ')[1].split()[0])")
  out="$dir/out"
  mkdir -p "$out"
  echo "bench_scale: $size: fusec inspect" >&2
  inspect=$(measure inspect unlimited "$out/none" "$fusec" inspect "$model")
  echo "bench_scale: $size: fusec optimize" >&2
  optimize=$(measure optimize unlimited "$out/fusec.onnx" "$fusec" optimize "$model" --no-check -o "$out/fusec.onnx")
  fusec_written=$(du -cb "$out"/fusec.onnx* 2>/dev/null | tail -1 | cut -f1)
  echo "bench_scale: $size: fusec wrote $((fusec_written / 1048576)) MiB" >&2
  rm -f "$out"/fusec.onnx*
  echo "bench_scale: $size: onnxruntime" >&2
  ortopt=$(measure ort "$cap_kib" "$out/ort.onnx" "$py" "$tmp/ort_optimize.py" "$model" "$out/ort.onnx")
  ort_written=$(du -cb "$out"/ort.onnx* 2>/dev/null | tail -1 | cut -f1)
  echo "bench_scale: $size: ORT wrote $((ort_written / 1048576)) MiB" >&2
  rm -f "$out"/ort.onnx*
  label=$(awk -v p="$params" -v b="$weights" -v s="$size" 'BEGIN {
    n = p >= 1e9 ? sprintf("%.2fB", p / 1e9) : sprintf("%.0fM", p / 1e6)
    w = b >= 2^30 ? sprintf("%.2f GiB", b / 2^30) : sprintf("%.0f MiB", b / 2^20)
    printf "%s params (%s%s)", n, w, s ~ /fp16/ ? ", fp16" : "" }')
  rows+=("| $label | $(cell "$inspect") | $(cell "$optimize") | $(cell "$ortopt") |")
  # Against the targets: optimize RSS <= 1.1x weights and wall <= 0.5x ORT; inspect < 0.5 s, < 200 MiB.
  if [[ $optimize != FAIL* && $inspect != FAIL* ]]; then
    read -r ow orss <<<"$optimize"; read -r iw irss <<<"$inspect"
    checks="optimize RSS $(awk -v r="$orss" -v b="$weights" 'BEGIN {printf "%.3f", r * 1024 / b}')x weights"
    [[ $ortopt != FAIL* ]] && checks+=", optimize wall $(awk -v a="$ow" -v b="${ortopt%% *}" 'BEGIN {printf "%.3f", a / b}')x ORT's"
    checks+=", inspect ${iw} s / $((irss / 1024)) MiB"
    echo "bench_scale: $size: $checks" >&2
  fi
done

echo
echo "Measured $(date -u +%Y-%m-%d), $(nproc)-core machine, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo) RAM; wall time / peak RSS:"
echo
echo "| model (weights) | \`fusec inspect\` | \`fusec optimize --no-check\` | ORT optimize |"
echo "| --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"

#!/usr/bin/env bash
# What `fusec optimize` spends verifying a BERT-base-sized model on the CPU reference.
#
#   scripts/bench_verify.sh [FUSEC]        (default build/fusec; WORK=/tmp/fusec_bench_verify)
#
# Generates the legacy-exporter BERT-base form (12 layers, hidden 768, 12 heads, FFN 3072, seq 128,
# vocab 30522; ~430 MB, kept out of the repository) with scripts/make_attention_models.py if
# missing, then times `fusec optimize --batch 2` with --no-check, --check 1 and --check 3 (one
# verification set = one run of the model as given and one of the optimized model), and profiles
# both models per node. Each optimize timing is the best of REPEAT (3) runs. The thread count is
# FUSEC_NUM_THREADS or every core.
set -euo pipefail
cd "$(dirname "$0")/.."
FUSEC=$(realpath "${1:-build/fusec}")
WORK=${WORK:-/tmp/fusec_bench_verify}
MODEL=$WORK/bert_legacy.onnx
# The optimized model is written to memory where there is /dev/shm: writing 430 MB to a disk
# varies by seconds, more than verification costs.
OUT=$( [ -d /dev/shm ] && echo /dev/shm || echo "$WORK")/fusec_bench_verify_opt.onnx
trap 'rm -f "$OUT"' EXIT
mkdir -p "$WORK"
[ -f "$MODEL" ] || .venv/bin/python scripts/make_attention_models.py --out "$WORK" --only bert_legacy \
  --layers 12 --hidden 768 --heads 12 --seq 128 --vocab 30522

seconds() {  # wall seconds of `fusec optimize` with the given check flags, best of REPEAT runs
  local best="" t0 t1 d
  for _ in $(seq "${REPEAT:-3}"); do
    t0=$(date +%s.%N)
    "$FUSEC" optimize "$MODEL" --batch 2 -o "$OUT" "$@" > /dev/null
    t1=$(date +%s.%N)
    d=$(echo "$t1 - $t0" | bc)
    if [ -z "$best" ] || [ "$(echo "$d < $best" | bc)" = 1 ]; then best=$d; fi
  done
  echo "$best"
}
echo "fusec: $FUSEC   cores: $(nproc)   threads: ${FUSEC_NUM_THREADS:-all}"
t0=$(seconds --no-check); t1=$(seconds --check 1); t3=$(seconds --check 3)
printf 'optimize --no-check  %6.2f s\noptimize --check 1   %6.2f s\noptimize --check 3   %6.2f s\n' "$t0" "$t1" "$t3"
printf 'per verification set %6.2f s   (check 3 - check 1) / 2\n' "$(echo "($t3 - $t1) / 2" | bc -l)"
for mode in --as-given ""; do
  "$FUSEC" profile "$MODEL" --device cpu --batch 2 $mode --iterations "${ITERS:-10}" --warmup 2 --top 8 2>&1 \
    | sed -n '/^model /p;/^mode /,/^$/p;/op types by time/,/^$/p'
done

#!/usr/bin/env bash
# On the lent GPU: what one pass is worth on whole models. Each model (scripts/export_zoo.py's
# names, dynamo unless EXPORT=legacy) is optimized twice at the batch it runs, with every pass and
# with PASS skipped (`fusec optimize --skip PASS`); then `fusec bench --no-compare` of the two
# files, alternating for ROUNDS rounds so clock drift hits both alike; each side's best median
# is printed (the bench JSON stays in $ZOO).
#   PASS=fuse_squeeze_excite bash scripts/lab/pass_ab.sh efficientnet_b0 mobilenet_v3_large
# Needs the bundle unpacked in /tmp/fusec (scripts/gpu_check.sh does it) and torch on the machine.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${PASS:?PASS=the pass to measure}"
# shellcheck source=scripts/lab/ab_common.sh
. scripts/lab/ab_common.sh
printf '%-22s %12s %12s %8s\n' model "with ms" "skipped ms" ratio
for m in "$@"; do
  model=$zoo/$m.$form.onnx
  ab_export pass_ab "$m" || continue
  "$fusec" optimize "$model" -o "$zoo/$m.with.onnx" --batch "$batch" > "$zoo/opt_$m.with.log" 2>&1 &&
    "$fusec" optimize "$model" -o "$zoo/$m.skip.onnx" --batch "$batch" --skip "$PASS" > "$zoo/opt_$m.skip.log" 2>&1 ||
    { echo "pass_ab: optimize $m failed"; continue; }
  for r in $(seq "$rounds"); do
    for side in with skip; do
      "$fusec" bench "$zoo/$m.$side.onnx" --batch "$batch" --precision "${PRECISION:-fp16}" --no-compare --quiet \
        --duration "${DURATION:-2}" --json "$zoo/$m.$side.$r.json" > /dev/null 2>&1 || echo "pass_ab: bench $m $side failed"
    done
  done
  python3 scripts/lab/ab_medians.py "$zoo" "$m" "$rounds" with skip
done

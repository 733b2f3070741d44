#!/usr/bin/env bash
# On the lent GPU: what one switch setting (docs/switches.md) is worth on whole models. Each model
# (scripts/export_zoo.py's names, dynamo unless EXPORT=legacy) is optimized once at the batch it
# runs; then `fusec bench --no-compare` of it by default and with SWITCH set, alternating for
# ROUNDS rounds so clock drift hits both alike, each side with its own fresh tuning cache (so the
# engine build races the candidates again under its own setting). Each side's best median is
# printed (the bench JSON stays in $ZOO).
#   SWITCH=FUSEC_CUDNN_SDPA=0 bash scripts/lab/switch_ab.sh llama gpt2
# Needs the bundle unpacked in /tmp/fusec (scripts/gpu_check.sh does it) and torch on the machine.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${SWITCH:?SWITCH=NAME=VALUE, the setting to measure}"
# shellcheck source=scripts/lab/ab_common.sh
. scripts/lab/ab_common.sh
rm -f "$zoo"/tuning.default.json "$zoo"/tuning.switch.json
printf '%-22s %12s %12s %8s   (%s)\n' model "default ms" "switch ms" ratio "$SWITCH"
for m in "$@"; do
  model=$zoo/$m.$form.onnx
  ab_export switch_ab "$m" || continue
  "$fusec" optimize "$model" -o "$zoo/$m.opt.onnx" --batch "$batch" > "$zoo/opt_$m.log" 2>&1 ||
    { echo "switch_ab: optimize $m failed"; continue; }
  for r in $(seq "$rounds"); do
    for side in default switch; do
      setting=()
      [ "$side" = switch ] && setting=("$SWITCH")
      env "${setting[@]}" FUSEC_TUNING_CACHE="$zoo/tuning.$side.json" "$fusec" bench "$zoo/$m.opt.onnx" --batch "$batch" \
        --precision "${PRECISION:-fp16}" --no-compare --quiet --duration "${DURATION:-2}" --json "$zoo/$m.$side.$r.json" \
        > /dev/null 2>&1 || echo "switch_ab: bench $m $side failed"
    done
  done
  python3 scripts/lab/ab_medians.py "$zoo" "$m" "$rounds" default switch
done

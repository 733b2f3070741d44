#!/usr/bin/env bash
# On the lent GPU: exports zoo models (scripts/export_zoo.py, dynamo unless EXPORT=legacy) if they
# are not in $ZOO yet, optimizes each with the bundled fusec at the batch it runs (as bench_zoo.py
# does: a bound batch lets every shape-guarded fusion match), benches it, profiles it with
# programmatic dependent launch off (so each kernel's time is its own, not its wait for the one
# before) and prints the op-type and top-kernel summary of each report, and the SM clock and power
# that nvidia-smi sampled while bench ran. Reports land in $OUT.
#   bash scripts/lab/zoo_profile.sh gpt2 efficientnet_b0
# Needs the bundle unpacked in /tmp/fusec (scripts/gpu_check.sh does it) and torch on the machine.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/gpu-out}
zoo=${ZOO:-/tmp/fusec-zoo-profile}
form=${EXPORT:-dynamo}
batch=${BATCH:-16}
mkdir -p "$out" "$zoo"
fusec=${FUSEC:-/tmp/fusec/bin/fusec}
for m in "$@"; do
  model=$zoo/$m.$form.onnx
  if [ ! -f "$model" ]; then
    python3 scripts/export_zoo.py --models "$m" --exports "$form" --out "$zoo" --skip-reference > "$out/export_$m.log" 2>&1 ||
      { echo "zoo_profile: export of $m failed"; tail -5 "$out/export_$m.log"; continue; }
  fi
  opt=$out/$m.opt.onnx
  $fusec optimize "$model" -o "$opt" --batch "$batch" > "$out/optimize_$m.log" 2>&1 || { echo "zoo_profile: optimize $m failed"; tail -3 "$out/optimize_$m.log"; continue; }
  echo "=== $m ($form, batch $batch, fp16)"
  # The SM clock and board power while bench runs, sampled every 100 ms: a model whose GEMMs hold
  # the GPU at its power limit runs at a lower clock than its profile (Llama: 1335-1650 MHz at
  # 690 W on an H200, against 1980 MHz).
  smi_log=$out/smi_$m.csv
  smi_pid=""
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=clocks.sm,power.draw,power.limit --format=csv,noheader,nounits -lms 100 > "$smi_log" 2>/dev/null &
    smi_pid=$!
  fi
  $fusec bench "$opt" --batch "$batch" --precision fp16 2>&1 | grep -iE "median|ms" | head -4
  if [ -n "$smi_pid" ]; then
    kill "$smi_pid" 2>/dev/null; wait "$smi_pid" 2>/dev/null
    python3 - "$smi_log" <<'EOF'
import statistics, sys
rows = []
for line in open(sys.argv[1]):
    try:
        clock, power, limit = (float(f) for f in line.split(","))
    except ValueError:
        continue
    rows.append((clock, power, limit))
# Samples under a tenth of the limit are the GPU idling between bench's phases.
busy = [r for r in rows if r[1] > 0.1 * r[2]]
if busy:
    clocks = sorted(r[0] for r in busy)
    powers = sorted(r[1] for r in busy)
    print(f"  during bench ({len(busy)} samples): SM clock {clocks[0]:.0f}-{clocks[-1]:.0f} MHz "
          f"(median {statistics.median(clocks):.0f}), power median {statistics.median(powers):.0f} W "
          f"of a {busy[0][2]:.0f} W limit")
EOF
  fi
  FUSEC_PDL=0 $fusec profile "$opt" --batch "$batch" --precision fp16 --no-stream --report "$out/$m.profile.json" \
    > "$out/profile_$m.log" 2>&1 || { echo "zoo_profile: profile $m failed"; tail -3 "$out/profile_$m.log"; continue; }
  python3 - "$out/$m.profile.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
for mode in r["modes"]:
    print(f"  mode {mode['name']}: device {mode['device_ms']:.3f} ms, launches {mode['launches']}, idle {mode['idle_share']:.1%}")
for t in sorted(r["op_types"], key=lambda t: -t["ms"])[:10]:
    print(f"  {t['op_type']:<28} {t['nodes']:>4} nodes {t['ms']:.4f} ms {t['share']:.1%}")
ks = {}
for k in r["kernels"]:
    e = ks.setdefault(k["name"][:90], [0, 0.0])
    e[0] += 1
    e[1] += k["median_ms"]
for name, (n, ms) in sorted(ks.items(), key=lambda kv: -kv[1][1])[:14]:
    print(f"    {ms:.4f} ms {n:>4}x  {name}")
EOF
done

#!/usr/bin/env bash
# Memory planning at scale: times `fusec run` on chains of 25,000 and 100,000 elementwise nodes
# (Relu, Neg, Sigmoid, Abs, repeating; one [1, 256] float input), and ONNX Runtime on the same files
# (session creation and one run), each the median of RUNS=5 runs.
# With an O(n log n) planner the 100,000-node chain takes about 4x the 25,000-node one; the old
# planner (a scan of every placed buffer per buffer) took 10.8x.
#   bash scripts/bench_planner.sh              # needs build/fusec and .venv
#   SIZES="25000 100000 400000" bash scripts/bench_planner.sh
set -euo pipefail
cd "$(dirname "$0")/.."
fusec=${FUSEC:-build/fusec}
py=.venv/bin/python
out=build/bench_planner
mkdir -p "$out"
sizes=${SIZES:-25000 100000}

for n in $sizes; do
  [ -f "$out/chain_$n.onnx" ] || "$py" - "$n" "$out/chain_$n.onnx" <<'PY'
import sys
import onnx
from onnx import TensorProto, helper
n, path = int(sys.argv[1]), sys.argv[2]
ops = ["Relu", "Neg", "Sigmoid", "Abs"]
nodes = [helper.make_node(ops[i % 4], [f"v{i}"], [f"v{i + 1}"], name=f"n{i}") for i in range(n)]
g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [1, 256])],
                      [helper.make_tensor_value_info(f"v{n}", TensorProto.FLOAT, [1, 256])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="fusec bench_planner")
m.ir_version = 8
onnx.save(m, path)
PY
done

runs=${RUNS:-5}
# seconds CMD...: the median wall time of $runs runs (single runs of a fraction of a second vary a lot).
seconds() {
  local i t0 t1 all=()
  for ((i = 0; i < runs; i++)); do
    t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N)
    all+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')")
  done
  printf '%s\n' "${all[@]}" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'
}
printf '%-10s %14s %14s\n' nodes "fusec run s" "onnxruntime s"
declare -A t
for n in $sizes; do
  t[$n]=$(seconds "$fusec" run "$out/chain_$n.onnx" --output-dir "$out/out_$n")
  ort=$(seconds "$py" -c "
import numpy as np, onnxruntime as ort
s = ort.InferenceSession('$out/chain_$n.onnx', providers=['CPUExecutionProvider'])
s.run(None, {'v0': np.random.rand(1, 256).astype(np.float32)})")
  printf '%-10s %14.2f %14.2f\n' "$n" "${t[$n]}" "$ort"
done
set -- $sizes
if [ $# -ge 2 ]; then
  first=$1; last=${!#}
  printf 'fusec: %s nodes take %.1fx the time of %s nodes (%.0fx the nodes)\n' "$last" \
    "$(awk -v a="${t[$last]}" -v b="${t[$first]}" 'BEGIN {print a / b}')" "$first" "$(awk -v a="$last" -v b="$first" 'BEGIN {print a / b}')"
fi

#!/usr/bin/env bash
# First command on a fresh machine: install what is missing, build, then run fusec's main job on the
# bundled default model (models/resnet50_small.onnx): inspect it, optimize it (verified on the CPU
# reference), and benchmark original vs optimized. This version runs on the CPU backend; a GPU, if
# present, is reported.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
model=${1:-models/resnet50_small.onnx}
out=build/$(basename "${model%.onnx}").opt.onnx
echo; echo "== fusec inspect $model --batch 1"
build/fusec inspect "$model" --batch 1
echo; echo "== fusec optimize $model --batch 1 -o $out"
build/fusec optimize "$model" --batch 1 -o "$out"
echo; echo "== fusec bench (original)"
build/fusec bench "$model" --batch 1 --duration 3 --quiet
echo; echo "== fusec bench (optimized)"
build/fusec bench "$out" --batch 1 --duration 3 --quiet

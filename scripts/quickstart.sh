#!/usr/bin/env bash
# First command on a fresh machine: install what is missing, build, then run fusec's main job on the
# bundled default model (models/resnet50_small.onnx): inspect it, optimize it (verified on the CPU
# reference), benchmark it as given vs optimized and profile it node by node, on the GPU when there
# is a usable one (fp16), else on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
model=${1:-models/resnet50_small.onnx}
out=build/$(basename "${model%.onnx}").opt.onnx
echo; echo "== fusec inspect $model --batch 1"
build/fusec inspect "$model" --batch 1
echo; echo "== fusec optimize $model --batch 1 -o $out"
build/fusec optimize "$model" --batch 1 -o "$out"
if build/fusec run "$model" --batch 1 --device cuda --output-dir build/quickstart-gpu-check >/dev/null 2>&1; then
  echo; echo "== fusec bench $model --batch 16 --device cuda --precision fp16 (as given vs optimized)"
  build/fusec bench "$model" --batch 16 --device cuda --precision fp16 --duration 3 --quiet
  echo; echo "== fusec profile $model --batch 16 --device cuda --precision fp16 --report build/profile.json --trace build/trace.json"
  build/fusec profile "$model" --batch 16 --device cuda --precision fp16 --report build/profile.json --trace build/trace.json
else
  echo; echo "== fusec bench $model --batch 1 --device cpu (as given vs optimized; no usable GPU here)"
  build/fusec bench "$model" --batch 1 --device cpu --duration 3 --quiet
  echo; echo "== fusec profile $model --batch 1 --device cpu --report build/profile.json --trace build/trace.json"
  build/fusec profile "$model" --batch 1 --device cpu --report build/profile.json --trace build/trace.json
fi

#!/usr/bin/env bash
# ResNet-50 (batch 1, 224x224) on the CPU backend: the figure the README quotes.
# Generates models/full/resnet50.onnx if missing, checks the optimization once, then benchmarks the
# model as given and optimized in one `fusec bench` (same process, same inputs).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f models/full/resnet50.onnx ] || .venv/bin/python scripts/generate_models.py --out models/full --size full --only resnet50
build/fusec optimize models/full/resnet50.onnx --batch 1 -o models/full/resnet50.opt.onnx --check 1
build/fusec bench models/full/resnet50.onnx --batch 1 --device cpu --warmup 3 --iterations ${ITERS:-20} --quiet \
  --json models/full/resnet50.bench.json

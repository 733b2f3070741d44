#!/usr/bin/env bash
# ResNet-50 (batch 1, 224x224) on the CPU backend: the figure the README quotes.
# Generates models/full/resnet50.onnx if missing, then benchmarks it unoptimized and optimized.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f models/full/resnet50.onnx ] || .venv/bin/python scripts/generate_models.py --out models/full --size full --only resnet50
build/fusec optimize models/full/resnet50.onnx --batch 1 -o models/full/resnet50.opt.onnx --check 1
build/fusec bench models/full/resnet50.onnx --batch 1 --warmup 3 --iterations ${ITERS:-20} --quiet --json models/full/resnet50.bench.json
build/fusec bench models/full/resnet50.opt.onnx --batch 1 --warmup 3 --iterations ${ITERS:-20} --quiet --json models/full/resnet50.opt.bench.json

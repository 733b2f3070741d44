#!/usr/bin/env bash
# The README's GPU figures for full-size ResNet-50, BERT-base (seq 128) and the seed MLP at batch 16,
# fp16 and fp32, as given vs optimized: run on a machine with a GPU, from the repo root.
#   bash scripts/bench_gpu.sh [FUSEC]         (default build/fusec; on the lent GPU /tmp/fusec/bin/fusec)
set -euo pipefail
cd "$(dirname "$0")/.."
fusec=${1:-build/fusec}
py=python3; [ -x .venv/bin/python ] && py=.venv/bin/python
for m in resnet50 bert mlp; do
  [ -f models/full/$m.onnx ] || $py scripts/generate_models.py --out models/full --size full --only $m >/dev/null
  for p in fp16 fp32; do
    echo "=== $m $p"
    "$fusec" bench models/full/$m.onnx --device cuda --batch 16 --precision $p --duration 2 --quiet \
      --json models/full/$m.$p.bench.json | grep -E "median|speedup|nodes on CPU|cuda graph|build ms"
  done
done

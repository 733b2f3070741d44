#!/usr/bin/env bash
# Builds the timing labs in scripts/lab/ (not part of fusec) into build-gpu/lab/. The frontend lab
# needs the cuDNN frontend headers that scripts/setup.sh puts in .venv.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build-gpu/lab
cuda=(-I/usr/local/cuda/include -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64)
g++ -O2 -std=c++20 "${cuda[@]}" scripts/lab/conv_fp32_lab.cpp -o build-gpu/lab/conv_fp32_lab -lcudnn -lcublasLt -lcudart
fe=$(ls -d .venv/lib/python3*/site-packages/include 2>/dev/null | head -1)
if [ -n "$fe" ]; then
  g++ -O1 -std=c++20 "${cuda[@]}" -I"$fe" scripts/lab/conv_fp32_frontend_lab.cpp -o build-gpu/lab/conv_fp32_frontend_lab -lcudnn -lnvrtc -lcuda -lcudart
fi
ls build-gpu/lab

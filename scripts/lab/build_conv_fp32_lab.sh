#!/usr/bin/env bash
# Builds scripts/lab/conv_fp32_lab.cpp (a timing lab, not part of fusec) into build-gpu/lab/.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build-gpu/lab
g++ -O2 -std=c++20 -I/usr/local/cuda/include scripts/lab/conv_fp32_lab.cpp -o build-gpu/lab/conv_fp32_lab \
  -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudnn -lcublasLt -lcudart
echo "built build-gpu/lab/conv_fp32_lab"

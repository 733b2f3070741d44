#!/usr/bin/env bash
# Builds the cuBLASLt configuration-search lab (scripts/lab/lt_search_lab.cpp, not part of fusec's
# build) into build-lab/; run it on the GPU machine (carry build-lab).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build-lab
g++ -O2 -std=c++17 -I. -I/usr/local/cuda/include scripts/lab/lt_search_lab.cpp -o build-lab/lt_search_lab \
  -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcublasLt -lcudart
ls -la build-lab/lt_search_lab

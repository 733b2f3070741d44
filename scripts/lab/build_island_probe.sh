#!/usr/bin/env bash
# Builds scripts/lab/island_probe.cpp (not part of fusec) against build/'s fusec_core into build/lab/.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build/lab
g++ -O1 -std=c++20 -I. -Ibuild scripts/lab/island_probe.cpp -o build/lab/island_probe build/libfusec_core.a \
  build/libfusec_onnx_proto.a -lprotobuf -lpthread
echo build/lab/island_probe

#!/usr/bin/env bash
# Packs a CUDA-enabled build for a machine that has a GPU but no Debian dev packages (the lent
# H100): the binaries plus the non-system shared libraries they need, into DEST (default build-gpu/).
#   bash scripts/gpu_bundle.sh [BUILD_DIR] [DEST]
# Then, on the GPU machine:  export LD_LIBRARY_PATH=$PWD/build-gpu/lib:$LD_LIBRARY_PATH
#                            build-gpu/fusec_gpu_tests && build-gpu/fusec bench models/... --batch 16
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-build}
dest=${2:-build-gpu}
[ -x "$src/tests/fusec_gpu_tests" ] || { echo "gpu_bundle: $src has no fusec_gpu_tests (configure with the CUDA toolkit)"; exit 2; }
rm -rf "$dest"
mkdir -p "$dest/lib"
cp "$src/fusec" "$src/tests/fusec_gpu_tests" "$src/tests/fusec_tests" "$dest/"
# Libraries from Debian's dev packages that the GPU machine lacks.
for bin in "$dest/fusec" "$dest/fusec_gpu_tests"; do
  ldd "$bin" | awk '/=>/ {print $3}' | grep -E 'libonnx|libprotobuf' | while read -r lib; do cp -L "$lib" "$dest/lib/"; done
done
du -sh "$dest"

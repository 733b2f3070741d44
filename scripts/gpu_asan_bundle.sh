#!/usr/bin/env bash
# Builds the GPU test suite with AddressSanitizer on its host code (C++ and nvcc's host compiler)
# into build-asan-gpu/ and packs it, with libasan and the non-system libraries it needs, into
# build-asan-bundle/asan.tar.gz for the lent GPU machine (under the device tool's 64 MiB):
#   bash scripts/gpu_asan_bundle.sh                     (here; about 15 min on 2 cores)
#   bash scripts/gpu_check.sh asan                      (there; ASAN_FILTER narrows the suite)
# It found the executor's heap use-after-free of 2026-11-25, which the plain suite showed only as
# an abort at exit on some test subsets.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-asan-gpu -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
  -DCMAKE_CXX_FLAGS="-fsanitize=address -fno-omit-frame-pointer" \
  -DCMAKE_CUDA_FLAGS="-Xcompiler=-fsanitize=address,-fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address" \
  -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST > /dev/null  # listing the tests needs a GPU driver
cmake --build build-asan-gpu -j"$(nproc)" --target fusec_gpu_tests
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
cp build-asan-gpu/tests/fusec_gpu_tests "$stage/bin/"
strip --strip-debug "$stage/bin/fusec_gpu_tests"
ldd build-asan-gpu/tests/fusec_gpu_tests | awk '/=>/ {print $3}' | grep -E 'libasan|libonnx|libprotobuf|libtomlplusplus' |
  while read -r lib; do cp -Ln "$lib" "$stage/lib/"; done
mkdir -p build-asan-bundle
tar -C "$stage" -czf build-asan-bundle/asan.tar.gz .
du -sh build-asan-bundle/asan.tar.gz

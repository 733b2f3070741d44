#!/usr/bin/env bash
# Packs a CUDA-enabled build for the lent GPU machine, which has the CUDA toolkit and cuDNN but no
# Debian dev packages and no ONNX test data: the stripped binaries, the non-system shared
# libraries they need, and the conformance data, into one compressed file DEST/bundle.tar.xz
# (the device tool carries at most 64 MiB, the working tree included: xz -9e packs the binaries
# into half of what gzip or xz -6 does, about 32 MB against 59).
#   bash scripts/gpu_bundle.sh [BUILD_DIR] [DEST]          (default build, build-gpu; builds the
#                                                           packed targets first, NO_BUILD=1 skips it)
#   BINS="fusec" bash scripts/gpu_bundle.sh ...             only these binaries, no test data (a
#                                                           smaller bundle, for timing runs)
#   BINS="tests/fusec_conformance" TESTDATA=1 bash ...      a subset with the test data (the full
#                                                           bundle can pass the 64 MiB carry limit)
# On the GPU machine:  bash scripts/gpu_check.sh [steps...]   (unpacks and runs)
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-build}
dest=${2:-build-gpu}
bins=${BINS:-fusec tests/fusec_gpu_tests tests/fusec_conformance}
# Brings the packed targets up to date first (NO_BUILD=1: pack what is there): a bundle packed from
# a build older than its sources would run old code under the new commit's name (bin/COMMIT).
if [ -z "${NO_BUILD:-}" ] && [ -f "$src/CMakeCache.txt" ]; then
  targets=""
  for bin in $bins; do targets="$targets $(basename "$bin")"; done
  [ -f "$src/libfusec_cuda.so" ] && targets="$targets fusec_cuda_plugin"  # fusec loads it from beside itself
  # shellcheck disable=SC2086  # one word per target
  cmake --build "$src" -j"$(nproc)" --target $targets > /dev/null ||
    { echo "gpu_bundle: building$targets in $src failed (cmake --build $src shows why)"; exit 2; }
fi
for bin in $bins; do
  [ -x "$src/$bin" ] || { echo "gpu_bundle: $src/$bin missing (configure with the CUDA toolkit and build)"; exit 2; }
done
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for bin in $bins; do cp "$src/$bin" "$stage/bin/"; done
# fusec loads the CUDA backend from beside itself (backend/gpu_plugin.h)
[ -f "$src/libfusec_cuda.so" ] && cp "$src/libfusec_cuda.so" "$stage/bin/"
strip --strip-debug "$stage"/bin/*
for bin in "$stage"/bin/*; do
  # (the plugin needs none of these: grep finding nothing is not an error)
  ldd "$bin" | awk '/=>/ {print $3}' | { grep -E 'libonnx|libprotobuf|libtomlplusplus' || true; } |
    while read -r lib; do cp -Ln "$lib" "$stage/lib/"; done
done
# The commit the build came from (scripts/bench_zoo.py records it), "+changes" when its tree had
# uncommitted edits.
if commit=$(git -C "$src" rev-parse --short HEAD 2>/dev/null); then
  [ -n "$(git -C "$src" status --porcelain --untracked-files=no 2>/dev/null)" ] && commit="$commit+changes"
  echo "$commit" > "$stage/bin/COMMIT"
fi
if { [ -z "${BINS:-}" ] || [ -n "${TESTDATA:-}" ]; } && [ -d /usr/share/libonnx-testdata/data ]; then
  mkdir -p "$stage/testdata"
  cp -r /usr/share/libonnx-testdata/data "$stage/testdata/"
fi
rm -rf "$dest"
mkdir -p "$dest"
tar -C "$stage" -cf - . | xz -9e > "$dest/bundle.tar.xz"
du -sh "$dest/bundle.tar.xz"

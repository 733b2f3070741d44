#!/usr/bin/env bash
# The whole test suite, as CI runs it: build, then every ctest (unit, conformance, round trip,
# bad-input corpus, model equivalence with onnxruntime, CLI), then the same under ASan + UBSan
# (built with clang, the libFuzzer target included), then three minutes of fuzzing from that build
# (scripts/fuzz.sh: fails on any finding).
#   bash scripts/test.sh            all of it
#   FUSEC_NO_ASAN=1 bash scripts/test.sh   skip the sanitizer pass (quicker local runs)
#   FUSEC_NO_FUZZ=1 bash scripts/test.sh   skip the fuzzing step
#   FUSEC_FUZZ_SECONDS=600 ...             fuzz longer
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
# Each step's wall time, so that a CI log says where its minutes went.
step_start=$SECONDS
took() {
  echo "test: $1 took $((SECONDS - step_start)) s (total $SECONDS s)"
  step_start=$SECONDS
}

# The presets (CMakePresets.json) hold the flags; this script only says which and how wide.
cmake --preset release >/dev/null
cmake --build --preset release -j"$jobs"
took "release build"
ctest --preset release -j"$jobs"
took "release tests"

if [ "${FUSEC_NO_ASAN:-0}" != 1 ]; then
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j"$jobs"
  took "ASan + UBSan build"
  # Leak checking stays on (the asan test preset's ASAN_OPTIONS); protobuf's static descriptors are
  # freed at exit, so none are reported.
  ctest --preset asan -j"$jobs"
  took "ASan + UBSan tests"
fi
if [ "${FUSEC_NO_FUZZ:-0}" != 1 ]; then
  # Under CI the fuzz run starts from a fixed seed, so a red CI means a finding anyone can replay
  # (FUZZ_PRESET=asan FUZZ_SEED=1 bash scripts/fuzz.sh 180), not the luck of one run; long runs
  # stay random.
  if [ "${CI:-}" = true ]; then export FUZZ_SEED=${FUZZ_SEED:-1}; fi
  # The ASan + UBSan build (clang) has the fuzz target: fuzzing from it saves building a third tree.
  if [ "${FUSEC_NO_ASAN:-0}" != 1 ]; then export FUZZ_PRESET=${FUZZ_PRESET:-asan}; fi
  bash scripts/fuzz.sh "${FUSEC_FUZZ_SECONDS:-180}"
  took "fuzz"
fi
echo "test: all suites passed"

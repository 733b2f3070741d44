#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test fusec, then builds it.
# Idempotent: re-running only does what is missing.
#   bash scripts/setup.sh            install + build (build/)
#   FUSEC_SKIP_APT=1 ...             skip apt-get (packages already there)
set -euo pipefail
cd "$(dirname "$0")/.."

# clang and libclang-rt-14-dev (libFuzzer, sanitizer runtimes) build the fuzz target (scripts/fuzz.sh).
# libtomlplusplus-dev reads fusec.toml (fusec check); graphviz renders optimize --svg (optional for
# users, installed here so the tests cover it). chromium (headless) and fonts-liberation render the
# HTML reports (profile --html, compare --html) to PNG in tests/cli/test_html.py.
packages=(build-essential cmake g++ python3 python3-venv libprotobuf-dev protobuf-compiler
          libcli11-dev nlohmann-json3-dev libgtest-dev libonnx-testdata clang libclang-rt-14-dev
          libtomlplusplus-dev graphviz chromium fonts-liberation)
if [ "${FUSEC_SKIP_APT:-0}" != 1 ]; then
  missing=()
  for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo_cmd apt-get update -qq
    $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

# Python venv for model generation and the onnxruntime oracle. Its onnx wheel also provides the
# onnx-ml.proto that fusec's ONNX protobuf classes are generated from, so the pinned version matters.
onnx_pin=$(sed -n 's/^onnx==\([^ #]*\).*/\1/p' requirements.txt)
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import numpy, onnx, onnxruntime, jsonschema" 2>/dev/null ||
   [ "$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("onnx"))' 2>/dev/null)" != "$onnx_pin" ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r requirements.txt
fi
# The cuDNN frontend's C++ headers (cuDNN SDPA in backend/cuda/ops/attention/sdpa_cudnn.cpp). Headers only:
# --no-deps skips its Python-side dependencies (CUTLASS DSL, TVM FFI), which fusec never uses.
if ! ls .venv/lib/python3*/site-packages/include/cudnn_frontend.h >/dev/null 2>&1; then
  .venv/bin/pip install -q --no-deps nvidia-cudnn-frontend==1.32.0
fi

# Build. The CUDA backend builds when the toolkit is present (sm_90 only, to keep builds fast).
jobs=$(nproc 2>/dev/null || echo 2)
cmake --preset release >/dev/null
cmake --build --preset release -j"$jobs"
echo "setup: built build/fusec"

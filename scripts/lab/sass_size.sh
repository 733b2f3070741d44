#!/usr/bin/env bash
# Instructions per kernel of one CUDA source, compiled as the build compiles it (sm_90, -O3): each
# kernel's .text section in the cubin, 16 bytes an instruction, smallest first. A kernel's code
# size matters where it is fetched cold inside a model (the attention kernel after a GEMM:
# docs/benchmarks.md, "One copy of the key-tile step"). Needs a configured build/ (scripts/setup.sh).
#   bash scripts/lab/sass_size.sh backend/cuda/ops/attention/attention_mma.cu [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
src=$(realpath "$1")
build=${2:-build}
rsp=$build/CMakeFiles/fusec_cuda_objs.dir/includes_CUDA.rsp
[ -f "$rsp" ] || { echo "sass_size: $rsp missing (configure $build with the CUDA toolkit)"; exit 2; }
cubin=$(mktemp --suffix=.cubin)
trap 'rm -f "$cubin"' EXIT
(cd "$build" && /usr/local/cuda/bin/nvcc -DFUSEC_HAVE_CUDA=1 --options-file CMakeFiles/fusec_cuda_objs.dir/includes_CUDA.rsp \
  -O3 -DNDEBUG -arch=sm_90 -cubin --expt-relaxed-constexpr -std=c++20 -x cu "$src" -o "$cubin")
readelf -S -W "$cubin" 2>/dev/null | awk '$2 ~ /^\.text\./ {print $6, $2}' |
  while read -r hex name; do
    echo "$((16#$hex / 16)) $(echo "${name#.text.}" | c++filt)"
  done | sort -n

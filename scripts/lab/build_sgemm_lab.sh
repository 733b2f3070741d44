#!/usr/bin/env bash
# Builds the SGEMM lab (scripts/lab/sgemm_lab.cu, which is not part of fusec's build, with fusec's
# backend/cuda/ops/gemm/sgemm.cu) into ${BD:-build-sgemm}/, for the H100 (sm_90). Also writes the kernels' register/spill report
# (ptxas.txt) so a config that spills shows before any device time is spent.
# BD=dir and EXTRA="-D..." build a variant elsewhere (A/B of compile-time choices).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p ${BD:-build-sgemm}
nvcc=/usr/local/cuda/bin/nvcc
flags=(-arch=sm_90 -O3 -std=c++17 -I. ${EXTRA:-})
$nvcc "${flags[@]}" -Xptxas -v -c backend/cuda/ops/gemm/sgemm.cu -o ${BD:-build-sgemm}/sgemm.o 2> ${BD:-build-sgemm}/ptxas.txt
$nvcc "${flags[@]}" -c scripts/lab/sgemm_lab.cu -o ${BD:-build-sgemm}/sgemm_lab.o
$nvcc -arch=sm_90 ${BD:-build-sgemm}/sgemm.o ${BD:-build-sgemm}/sgemm_lab.o -o ${BD:-build-sgemm}/sgemm_lab \
  -L/usr/local/cuda/lib64 -Xlinker -rpath,/usr/local/cuda/lib64 -lcublasLt -lcublas
awk '/Compiling entry/ {n = $(NF-2)} /Used/ {print n ": " $5 " regs"} /spill/ && ($5 + $9 > 0) {print n ": SPILLS"}' ${BD:-build-sgemm}/ptxas.txt
ls -la ${BD:-build-sgemm}/sgemm_lab

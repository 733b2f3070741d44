#!/usr/bin/env bash
# On the lent GPU: Nsight Compute on one kernel of a `fusec bench` run of an optimized model, to
# read where that kernel's time goes (occupancy, memory throughput, warp stalls per SASS line).
# Programmatic dependent launch is off, as in zoo_profile.sh, so the kernel's time is its own.
# Writes $OUT/ncu_<tag>.txt (every section's details) and $OUT/sass_<tag>.csv (stall samples per SASS
# instruction: read it here with scripts/lab/ncu_sass_stalls.py).
#   bash scripts/lab/ncu_fusec_kernel.sh MODEL.onnx KERNEL_REGEX TAG [SKIP]
#     SKIP: matching launches to pass over first (the engine build's tuning runs the candidates).
set -u
model=$1 regex=$2 tag=$3 skip=${4:-40}
out=${OUT:-$PWD/gpu-out}
fusec=${FUSEC:-/tmp/fusec/bin/fusec}
mkdir -p "$out"
FUSEC_PDL=0 ncu --launch-skip "$skip" --launch-count 1 -k "regex:$regex" --section SpeedOfLight \
  --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --section WarpStateStats \
  --section SchedulerStats --section SourceCounters -o "$out/rep_$tag" -f \
  "$fusec" bench "$model" --batch "${BATCH:-16}" --precision fp16 > "$out/ncu_run_$tag.log" 2>&1
ncu -i "$out/rep_$tag.ncu-rep" --print-details all --page details > "$out/ncu_$tag.txt" 2>&1
ncu -i "$out/rep_$tag.ncu-rep" --page source --csv --print-source sass > "$out/sass_$tag.csv" 2>&1
rm -f "$out/rep_$tag.ncu-rep"
echo "== ncu $tag"
grep -E "Duration|Achieved Occupancy|Theoretical Occupancy|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|No Eligible|Issued Warp|Registers Per|Block Limit" "$out/ncu_$tag.txt"

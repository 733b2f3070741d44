#!/usr/bin/env bash
# On the GPU machine, over a build of the SGEMM lab (bash scripts/lab/build_sgemm_lab.sh here; carry
# the build dir): Nsight Compute's warp-stall sampling per SASS instruction for one BERT-base GEMM
# shape, for each candidate given, so that where the issue slots go (main loop, barrier, copies,
# epilogue) can be read off. Writes $OUT/details_<cand>.txt and $OUT/sass_<cand>.csv; read the CSVs
# here with scripts/lab/ncu_sass_stalls.py.
#   bash scripts/lab/ncu_stalls.sh BUILD_DIR SHAPE CAND...   e.g. build-sgemm 2 lt:2 4
#     SHAPE 0-3 (QKV, out, FFN1+gelu, FFN2); CAND a configuration index or lt:I (see sgemm_lab.cu)
set -u
build=$1 shape=$2
shift 2
out=${OUT:-.}
for cand in "$@"; do
  name=$(echo "$cand" | tr ':' '_')
  ncu --launch-skip 2 --launch-count 1 -k regex:'gemm|sgemm' --section WarpStateStats --section SourceCounters \
    --section SchedulerStats --section Occupancy \
    --metrics sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum \
    -o "$out/rep_$name" -f "$build/sgemm_lab" --profile "$shape" "$cand" > "$out/ncu_$name.log" 2>&1
  ncu -i "$out/rep_$name.ncu-rep" --print-details all --page details > "$out/details_$name.txt" 2>&1
  ncu -i "$out/rep_$name.ncu-rep" --page source --csv --print-source sass > "$out/sass_$name.csv" 2>&1
  rm -f "$out/rep_$name.ncu-rep"
  echo "== $cand"
  grep -E "Duration|fma_cycles|Issue Slots Busy|No Eligible|Achieved Active Warps" "$out/details_$name.txt"
done

#!/usr/bin/env bash
# On the GPU machine, over build-sgemm/ (bash scripts/lab/build_sgemm_lab.sh here, carry build-sgemm):
# Nsight Compute on one BERT-base GEMM shape, cuBLASLt's kernel beside one of fusec's SGEMM
# configurations, the third launch of each, with the sections that say why one issues fewer FFMAs per
# cycle: clock, issue-slot use, warp stall reasons, pipe use, shared-memory traffic.
#   bash scripts/lab/ncu_sgemm.sh [SHAPE] [LT] [CONFIG]
#     SHAPE 0-3 (QKV, out, FFN1+gelu, FFN2; default 2), LT "lt:I" (the heuristic's I-th algorithm;
#     default lt:2, cuBLASLt's 64x128 tile for FFN1), CONFIG fusec's configuration index (default 4,
#     "64x128 t8x8 128thr 2/SM"); reports in ${OUT:-.}/ncu_sgemm_*.txt
set -uo pipefail
cd "$(dirname "$0")/../.."
shape=${1:-2} lt=${2:-lt:2} cfg=${3:-4}
out=${OUT:-.}
for cand in "$lt" "$cfg"; do
  name=$(echo "$cand" | tr ':' '_')
  ncu --launch-skip 2 --launch-count 1 -k regex:'gemm|sgemm' \
    --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section InstructionStats \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
    --metrics sm__cycles_elapsed.avg.per_second,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,smsp__sass_inst_executed_op_shared_ld.sum,smsp__inst_executed.sum \
    build-sgemm/sgemm_lab --profile "$shape" "$cand" > "$out/ncu_sgemm_${shape}_$name.txt" 2>&1
  echo "=== $cand: $(grep -m1 -E '^ *profiled|Error|error' "$out/ncu_sgemm_${shape}_$name.txt")"
  grep -E "Duration|SM Frequency|Issue Slots Busy|Issued Warp Per Scheduler|No Eligible|Stall|Registers Per|Achieved Occupancy|pipe_fma_cycles|shared_ld|inst_executed.sum|cycles_elapsed" \
    "$out/ncu_sgemm_${shape}_$name.txt" | head -40
done

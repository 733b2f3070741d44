#!/usr/bin/env bash
# On the GPU machine, after `bash scripts/gpu_check.sh fp32` (which unpacks the bundle to /tmp/fusec
# and exports ResNet-50 to /tmp/fusec-profile): Nsight Compute on the kernels of fusec's optimized
# ResNet-50 at batch 16, strict fp32, whose mangled names match REGEX: the first COUNT launches
# after a warm-up build has filled the tuning cache (so the plan's checks and the runs launch the
# tuned choices). Reports with the sections that say what bounds a kernel: throughput against the
# peaks, the memory hierarchy, warp stalls, issue, occupancy.
#   bash scripts/lab/ncu_conv.sh 'ConvTapArgs.*Li4EEEvT_' 4      (the tap-major split-K 4 instances)
set -uo pipefail
regex=${1:?regex over mangled kernel names} count=${2:-2}
root=/tmp/fusec
cudnn=$(python3 -c 'import nvidia.cudnn,os;print(os.path.join(nvidia.cudnn.__path__[0],"lib"))' 2>/dev/null || true)
export LD_LIBRARY_PATH=$root/lib${cudnn:+:$cudnn}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$root/bin:/usr/local/cuda/bin:$PATH
out=${OUT:-.}
work=$(mktemp -d)
export FUSEC_TUNING_CACHE=$work/tuning.json
fusec optimize /tmp/fusec-profile/resnet50.onnx -o $work/opt.onnx > /dev/null || exit 1
fusec bench $work/opt.onnx --device cuda --batch 16 --precision fp32 --iterations 3 --no-compare --quiet > /dev/null || exit 1
ncu --kernel-name-base mangled --kernel-name regex:"$regex" --launch-count "$count" \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
  --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \
  --metrics l1tex__t_sector_hit_rate.pct,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts.sum,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active \
  fusec bench $work/opt.onnx --device cuda --batch 16 --precision fp32 --iterations 1 --warmup 0 --no-compare --quiet > "$out/ncu_conv.txt" 2>&1
grep -E "^  [a-z_]+.*\(|Grid Size|Duration|Memory Throughput|L1/TEX Hit|L2 Hit|DRAM Throughput|Compute \(SM\)|Issue Slots Busy|No Eligible|Stall|Achieved Occupancy|pipe_fma|sector_hit|sectors_srcunit|ldgsts|L2 Cache Throughput|L1/TEX Cache Throughput|Registers Per" \
  "$out/ncu_conv.txt" | head -${LINES_MAX:-120}
rm -rf "$work"

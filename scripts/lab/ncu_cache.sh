#!/usr/bin/env bash
# ncu durations of kernels matching REGEX with caches flushed before each (all) and kept (none).
regex=$1 count=${2:-2}
root=/tmp/fusec
cudnn=$(python3 -c 'import nvidia.cudnn,os;print(os.path.join(nvidia.cudnn.__path__[0],"lib"))' 2>/dev/null || true)
export LD_LIBRARY_PATH=$root/lib${cudnn:+:$cudnn}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$root/bin:/usr/local/cuda/bin:$PATH
work=$(mktemp -d)
export FUSEC_TUNING_CACHE=$work/tuning.json
fusec optimize /tmp/fusec-profile/resnet50.onnx -o $work/opt.onnx > /dev/null || exit 1
fusec bench $work/opt.onnx --device cuda --batch 16 --precision fp32 --iterations 3 --no-compare --quiet > /dev/null || exit 1
for cc in all none; do
  ncu --cache-control $cc --kernel-name-base mangled --kernel-name regex:"$regex" --launch-count "$count" --section SpeedOfLight \
    fusec bench $work/opt.onnx --device cuda --batch 16 --precision fp32 --iterations 1 --warmup 0 --no-compare --quiet > $work/n.txt 2>&1
  echo "== cache-control $cc"; grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput" $work/n.txt | cut -c1-120
done

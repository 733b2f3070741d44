#!/usr/bin/env bash
set -uo pipefail
res=$OUT/res; mkdir -p $res /tmp/fusec
tar -C /tmp/fusec -xzf build-gpu/bundle.tar.gz
export LD_LIBRARY_PATH=/tmp/fusec/lib:$(python3 -c 'import nvidia.cudnn,os;print(os.path.join(nvidia.cudnn.__path__[0],"lib"))'):/usr/local/cuda/lib64
F=/tmp/fusec/bin/fusec
python3 scripts/export_zoo.py --models mobilenet_v3_large --out /tmp/mb --skip-reference > $res/export.log 2>&1
for f in legacy dynamo; do $F optimize /tmp/mb/mobilenet_v3_large.$f.onnx -o /tmp/mb/$f.opt.onnx --batch 16 > $res/opt_$f.log 2>&1; done
for f in dynamo legacy; do $F profile /tmp/mb/$f.opt.onnx --batch 16 --precision fp16 --no-stream --report $res/$f.profile.json > $res/profile_$f.log 2>&1; done
for i in 1 2; do for f in dynamo legacy; do echo "== $f run $i" >> $res/bench.txt; $F bench /tmp/mb/$f.opt.onnx --batch 16 --precision fp16 --no-compare --duration 1 2>&1 | grep -E "median|min" >> $res/bench.txt; done; done
for i in 1 2; do for f in legacy dynamo; do echo "== as given $f run $i" >> $res/bench.txt; $F bench /tmp/mb/mobilenet_v3_large.$f.onnx --batch 16 --precision fp16 --no-compare --duration 1 2>&1 | grep -E "median" >> $res/bench.txt; done; done
tar -C $OUT -czf $OUT/res.tgz res && rm -rf $res

#!/usr/bin/env bash
# Runs on the GPU machine over a bundle made by scripts/gpu_bundle.sh: unpacks it to /tmp/fusec,
# puts the newer cuDNN (the torch venv's, the version fusec builds against) first on the library
# path, then runs the steps asked for, logging each under $OUT (or ./gpu-out):
#   tests       the GPU suite (gtest)
#   sanitizer   compute-sanitizer memcheck on the GPU suite (FUSEC_UNDER_SANITIZER=1: tests that count
#               kernels through CUPTI, which records nothing under the sanitizer, skip that count)
#   conformance the ONNX backend suite on CUDA vs the CPU (floor in tests/conformance/floor_cuda.txt)
#   newer       ONNX's node tests of the ops newer than that suite (tests/conformance/make_node_cases.py)
#               on CUDA vs the CPU (floor in tests/conformance/floor_newer_cuda.txt)
#   models      shipped models: fusec run on the GPU vs the CPU at fp32 and fp16, as given and optimized
#   bench       fusec bench of the shipped models at batch 16, fp32 and fp16
#   peers       scripts/bench_peers.py (PyTorch on the same GPU)
#   profile     fusec profile of the full ResNet-50 and BERT-base (exported by bench_peers.py) at batch
#               16 fp16, with --counters and --compare-unfused; summaries and reports under $OUT
#   fp32        fusec bench of the exported ResNet-50 and BERT-base at batch 16, strict fp32, once per
#               environment setting in FP32_VARIANTS, each with a fresh tuning cache (A/B of a route)
#   asan        the GPU suite built with AddressSanitizer (scripts/gpu_asan_bundle.sh), cold and warm tuning cache
#   buildtrace  FUSEC_BUILD_TRACE=1 engine builds (cold, then warm) of TRACE_RUNS ("resnet50:fp16 bert:fp32")
#   video       the rank-5 channels-last path: its GPU tests and memcheck over them, then bench_zoo of
#               the video families (VIDEO_MODELS) with FUSEC_CHANNELS_LAST_3D=0 and by default (zoo.md
#               under $OUT/video_nchw and $OUT/video_nhwc)
#   detection   a detector with data-dependent shapes (scripts/lab/export_detection.py, needs torchvision): fusec run
#               on CUDA (the host tail) against the CPU, outputs compared sorted; then fusec bench of it
#   micro       single-kernel timings at BERT-base's shapes (scripts/make_microbench_models.py), fp32,
#               once per environment setting in MICRO_VARIANTS (e.g. "FUSEC_CUDNN_SDPA=0 X=1")
#   bash scripts/gpu_check.sh tests models bench
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
root=/tmp/fusec
if [ ! -x $root/bin/fusec ]; then
  mkdir -p $root && tar -C $root -xJf build-gpu/bundle.tar.xz || { echo "gpu_check: no build-gpu/bundle.tar.xz"; exit 2; }
fi
cudnn=$(python3 -c 'import nvidia.cudnn,os;print(os.path.join(nvidia.cudnn.__path__[0],"lib"))' 2>/dev/null || true)
export LD_LIBRARY_PATH=$root/lib${cudnn:+:$cudnn}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$root/bin:/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
date -u +%F | tee -a "$out/gpu.txt"
status=0
step() { echo; echo "=== $1"; }
for s in "${@:-tests}"; do
  case $s in
    tests)
      step tests
      fusec_gpu_tests --gtest_brief=1 > "$out/gpu_tests.log" 2>&1; rc=$?
      grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran|FAILED TEST|Failure|error" "$out/gpu_tests.log" | head -60
      tail -3 "$out/gpu_tests.log"; [ $rc = 0 ] || status=1 ;;
    sanitizer)
      step "compute-sanitizer memcheck"
      FUSEC_UNDER_SANITIZER=1 compute-sanitizer --tool memcheck --error-exitcode 9 fusec_gpu_tests --gtest_brief=1 \
        --gtest_filter="${SANITIZER_FILTER:-*}" > "$out/sanitizer.log" 2>&1; rc=$?
      grep -E "ERROR SUMMARY|Invalid|tests ran|FAILED" "$out/sanitizer.log" | head -20; [ $rc = 0 ] || status=1 ;;
    conformance)
      step "conformance on CUDA"
      floor=""; [ -f tests/conformance/floor_cuda.txt ] && floor="--floor-file tests/conformance/floor_cuda.txt"
      fusec_conformance --data $root/testdata/data --device cuda --json "$out/conformance_cuda.json" $floor \
        > "$out/conformance_cuda.log" 2>&1; rc=$?
      grep -vE "^[A-Za-z]+ +[0-9]+ +[0-9]+ +[0-9]+$" "$out/conformance_cuda.log" | tail -40; [ $rc = 0 ] || status=1 ;;
    newer)
      # ONNX's node tests of ops newer than libonnx-testdata, generated here (needs onnx), on CUDA
      step "newer ops on CUDA"
      python3 tests/conformance/make_node_cases.py --out /tmp/fusec-newer > "$out/newer_cases.log" 2>&1 ||
        { tail -5 "$out/newer_cases.log"; status=1; }
      fusec_conformance --data /tmp/fusec-newer --device cuda --json "$out/newer_cuda.json" \
        --floor-file tests/conformance/floor_newer_cuda.txt > "$out/newer_cuda.log" 2>&1; rc=$?
      grep -vE "^[A-Za-z]+ +[0-9]+ +[0-9]+ +[0-9]+$" "$out/newer_cuda.log" | tail -30; [ $rc = 0 ] || status=1 ;;
    models)
      step "shipped models: GPU vs CPU"
      for m in models/*.onnx; do
        for p in fp32 fp16; do
          python3 tests/models/gpu_vs_cpu.py --fusec $root/bin/fusec --model "$m" --precision $p --batch 2 || status=1
        done
      done ;;
    bench)
      step "bench"
      for m in models/resnet50_small.onnx models/bert_small.onnx models/mlp_small.onnx; do
        for p in fp32 fp16; do
          n=$(basename "$m" .onnx)
          fusec bench "$m" --device cuda --batch 16 --precision $p --duration 2 --quiet --json "$out/bench_${n}_$p.json" \
            > "$out/bench_${n}_$p.log" 2>&1 || status=1
          echo "--- $n $p"; grep -E "median|speedup|nodes on CPU|cuda graph" "$out/bench_${n}_$p.log"
        done
      done ;;
    peers)
      step "bench_peers"
      python3 scripts/bench_peers.py --fusec $root/bin/fusec --out "$out" ${PEERS_ARGS:-} || status=1 ;;
    profile)
      step "profile"
      work=/tmp/fusec-profile
      mkdir -p $work
      models=${PROFILE_MODELS:-resnet50 bert}
      prec=${PROFILE_PRECISION:-fp16}
      missing=""
      for n in $models; do [ -f $work/$n.onnx ] || missing="$missing,$n"; done
      if [ -n "$missing" ]; then
        python3 scripts/bench_peers.py --fusec $root/bin/fusec --out $work/peers --work $work --models "${missing#,}" \
          --only-fusec --precisions fp16 --fusec-duration 0.5 > "$work/export.log" 2>&1 || { tail -20 "$work/export.log"; status=1; }
      fi
      for n in $models; do
        fusec profile $work/$n.onnx --device cuda --batch 16 --precision $prec ${PROFILE_ARGS:---counters --compare-unfused} \
          --report "$work/profile_$n.json" --trace "$work/trace_$n.json" > "$out/profile_${n}_$prec.txt" 2>&1 || status=1
        cat "$out/profile_${n}_$prec.txt"
      done
      # Reports and traces in one archive: the device tool brings back only a few files.
      if [ -z "${PROFILE_NO_JSON:-}" ]; then
        (cd $work && tar czf "$out/profile_reports_$prec.tgz" $(for n in $models; do echo profile_$n.json trace_$n.json; done))
      fi ;;
    fp32)
      # Strict-fp32 A/B: fusec bench of the exported models once per environment setting in
      # FP32_VARIANTS (e.g. "FUSEC_CONV_GEMM=0 DEFAULT=1"), each with a fresh tuning cache, so
      # every variant tunes its own choices; FUSEC_CONV_TRACE's lines go to $OUT/fp32_*.trace.
      step "fp32"
      work=/tmp/fusec-profile
      mkdir -p $work
      models=${FP32_MODELS:-resnet50 bert}
      for n in $models; do
        [ -f $work/$n.onnx ] || python3 scripts/bench_peers.py --fusec $root/bin/fusec --out $work/peers --work $work --models $n \
          --only-fusec --precisions fp32 --fusec-duration 0.5 > "$work/export_$n.log" 2>&1 || { tail -20 "$work/export_$n.log"; status=1; }
        for v in ${FP32_VARIANTS:-DEFAULT=1}; do
          cache=$(mktemp -d)
          env "$v" FUSEC_TUNING_CACHE=$cache/tuning.json FUSEC_CONV_TRACE=1 fusec bench $work/$n.onnx --device cuda --batch 16 \
            --precision fp32 --duration ${FP32_DURATION:-3} --quiet > $work/bench.log 2> "$out/fp32_${n}_${v%%=*}.trace" || { status=1; tail -5 $work/bench.log; }
          printf '%-10s %-22s %s | %s\n' "$n" "$v" "$(grep -E '^median ms' $work/bench.log)" "$(grep -E '^engine build ms' $work/bench.log)" | tee -a "$out/fp32.txt"
          rm -rf "$cache"
        done
      done ;;
    video)
      # Rank-5 channels-last regions (docs/cuda_backend.md, "Rank 5"), turned off and by default.
      step "video"
      fusec_gpu_tests --gtest_brief=1 --gtest_filter='GpuLayout3d.*:GpuLayout.*:GpuPool*:CudaLayoutRule.*' \
        > "$out/video_tests.log" 2>&1 || status=1
      grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran|Failure" "$out/video_tests.log" | head -20
      FUSEC_UNDER_SANITIZER=1 compute-sanitizer --tool memcheck --error-exitcode 9 fusec_gpu_tests --gtest_brief=1 \
        --gtest_filter='GpuLayout3d.*' > "$out/video_sanitizer.log" 2>&1 || status=1
      grep -E "ERROR SUMMARY|tests ran|FAILED" "$out/video_sanitizer.log" | head -5
      for form in nchw nhwc; do
        sw=0; [ $form = nhwc ] && sw=default
        FUSEC_CHANNELS_LAST_3D=$sw python3 scripts/bench_zoo.py --models "${VIDEO_MODELS:-r3d_18,r2plus1d_18,mc3_18,s3d}" \
          --exports dynamo --skip-compile --fusec $root/bin/fusec --out "$out/video_$form" --work /tmp/zw-video \
          --zoo /tmp/fusec-zoo --time-budget "${VIDEO_BUDGET:-200}" --fusec-duration 1 > "$out/video_$form.log" 2>&1 || status=1
        echo "--- FUSEC_CHANNELS_LAST_3D=$sw"; grep -E "^\| (model|r3d|r2p|mc3|s3d)" "$out/video_$form/zoo.md"
      done ;;
    asan)
      # The GPU suite built with AddressSanitizer (scripts/gpu_asan_bundle.sh; carry build-asan-bundle),
      # run twice with one tuning cache of its own: cold, then warm.
      step "asan"
      mkdir -p /tmp/fusec-asan && tar -C /tmp/fusec-asan -xzf build-asan-bundle/asan.tar.gz || { echo "gpu_check: no build-asan-bundle/asan.tar.gz"; exit 2; }
      cache=$(mktemp -d)
      for pass in cold warm; do
        env LD_LIBRARY_PATH=/tmp/fusec-asan/lib:$LD_LIBRARY_PATH ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0:halt_on_error=1 \
          FUSEC_TUNING_CACHE=$cache/tuning.json /tmp/fusec-asan/bin/fusec_gpu_tests --gtest_brief=1 \
          --gtest_filter="${ASAN_FILTER:-*}" > "$out/asan_$pass.log" 2>&1; rc=$?
        echo "--- $pass: rc $rc, $(grep -c 'ERROR: AddressSanitizer' "$out/asan_$pass.log") reports; $(grep -E '^\[  (PASSED|FAILED) ' "$out/asan_$pass.log" | tr '\n' ' ')"
        grep -A12 "ERROR: AddressSanitizer" "$out/asan_$pass.log" | head -30
        [ $rc = 0 ] || status=1
      done
      rm -rf "$cache" ;;
    buildtrace)
      # Where an engine build's time goes (FUSEC_BUILD_TRACE=1): the exported models at batch 16,
      # once with empty tuning/NVRTC caches and once warm, as bench_peers.py times a build.
      step "buildtrace"
      work=/tmp/fusec-profile
      mkdir -p $work
      for mp in ${TRACE_RUNS:-resnet50:fp16}; do
        n=${mp%%:*} p=${mp##*:}
        [ -f $work/$n.onnx ] || python3 scripts/bench_peers.py --fusec $root/bin/fusec --out $work/peers --work $work --models $n \
          --only-fusec --precisions fp32 --fusec-duration 0.5 > "$work/export_$n.log" 2>&1 || { tail -20 "$work/export_$n.log"; status=1; }
        cache=$(mktemp -d)
        for pass in cold warm; do
          FUSEC_BUILD_TRACE=1 FUSEC_TUNING_CACHE=$cache/tuning.json FUSEC_NVRTC_CACHE_DIR=$cache/nvrtc fusec bench $work/$n.onnx \
            --device cuda --batch 16 --precision $p --iterations 20 --quiet ${TRACE_ARGS:-} > $work/bench.log 2> "$out/buildtrace_${n}_${p}_$pass.txt" || status=1
          echo "--- $n $p $pass: $(grep -E '^engine build ms|^build ms' $work/bench.log | tr -s ' ' | tr '\n' ' ')"
          # The second report is the optimized variant's (the as-given one builds first).
          awk '/^build trace/{n++} n==2' "$out/buildtrace_${n}_${p}_$pass.txt" | head -${TRACE_LINES:-40}
        done
        rm -rf "$cache"
      done ;;
    micro)
      step "micro"
      work=/tmp/fusec-micro
      python3 scripts/make_microbench_models.py --out $work > /dev/null || status=1
      for m in ${MICRO_MODELS:-proj3 proj_qkv ffn1 ffn2 attn attn_packed}; do
        for v in ${MICRO_VARIANTS:-DEFAULT=1}; do
          env "$v" fusec bench $work/$m.onnx --device cuda --precision ${MICRO_PRECISION:-fp32} --duration 1 --quiet \
            > $work/bench.log 2>&1 || { status=1; tail -3 $work/bench.log; }
          printf '%-12s %-22s %s\n' "$m" "$v" "$(grep -E '^median ms' $work/bench.log)" | tee -a "$out/micro.txt"
        done
      done ;;
    detection)
      # A detector whose shapes depend on its data (torchvision's SSDlite, legacy export: an If
      # around the NMS): the GPU part on CUDA, the host tail after it, against the CPU run. With
      # random weights many kept scores tie and their order follows float rounding, so each
      # output is compared sorted.
      step "detection (host tail)"
      det=${DETECTION_MODEL:-ssdlite320_mobilenet_v3_large}
      python3 scripts/lab/export_detection.py "$det" legacy > "$out/detection_export.log" 2>&1 || status=1
      tail -1 "$out/detection_export.log" | cut -c1-160
      m=/tmp/det/$det.legacy.onnx
      # The CUDA run's engine build is traced as it goes (FUSEC_BUILD_TRACE=live) and bounded: its
      # conv tuning once sat for minutes instantiating captured graphs (captured_reps.h), and a
      # build that stalls again must show where and not take the rest of the call with it.
      for d in cpu cuda; do
        FUSEC_BUILD_TRACE=live timeout "${DETECTION_TIMEOUT:-240}" fusec run "$m" --device $d --format npy \
          --output-dir "$out/detection_$d" > "$out/detection_$d.log" 2>&1 ||
          { rc=$?; status=1; echo "--- $d: rc $rc, the log's last lines:"; tail -8 "$out/detection_$d.log" | cut -c1-200; }
      done
      grep -iE "on the GPU" "$out/detection_cuda.log" | head -2 | cut -c1-400
      python3 - "$out" <<'EOF2' || status=1
import glob, os, sys
import numpy as np
out, bad = sys.argv[1], 0
for f in sorted(glob.glob(out + "/detection_cuda/*.npy")):
    a, b = np.load(f), np.load(f.replace("detection_cuda", "detection_cpu"))
    same = a.shape == b.shape
    d = float(np.max(np.abs(np.sort(a.ravel()).astype(float) - np.sort(b.ravel()).astype(float)))) if same and a.size else 0.0
    print(f"{os.path.basename(f)}: cuda {a.shape} cpu {b.shape} max |sorted diff| {d:.3g}")
    bad += not same
sys.exit(1 if bad else 0)
EOF2
      timeout "${DETECTION_TIMEOUT:-240}" fusec bench "$m" --precision fp32 --duration 1 \
        > "$out/detection_bench.log" 2>&1 || status=1
      grep -iE "median|tail|graph" "$out/detection_bench.log" | head -6 ;;
    *) echo "gpu_check: unknown step $s"; status=2 ;;
  esac
done
exit $status

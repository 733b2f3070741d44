#!/usr/bin/env bash
# Fuzzes fusec with libFuzzer (fuzz/fuzz_model.cpp: import -> infer -> optimize -> run on the CPU,
# under ASan + UBSan) for as long as asked, and fails if it finds anything.
#
#   bash scripts/fuzz.sh                 # 10 minutes
#   bash scripts/fuzz.sh 3600            # an hour
#   FUZZ_JOBS=2 bash scripts/fuzz.sh 600 # two processes (libFuzzer -fork)
#   FUZZ_SEED=1 bash scripts/fuzz.sh 180  # the fixed-seed run CI makes
#   FUZZ_PRESET=asan bash scripts/fuzz.sh 180   # the fuzz target of the ASan + UBSan test build
#
# Builds build-fuzz/ (cmake --preset fuzz: clang, only the fuzz target, -O1), or with
# FUZZ_PRESET=asan uses build-asan/ (the ASan + UBSan suite's build, which has the fuzz target too:
# scripts/test.sh fuzzes from it rather than build a third tree). The seed corpus is made
# here, not committed: the shipped models, the committed reproducers and a sample of the ONNX
# backend test models (/usr/share/libonnx-testdata). The corpus libFuzzer grows is kept in
# BUILD/corpus/ between runs. A finding (crash, sanitizer report, timeout, out-of-memory) is
# written to BUILD/findings/ and the script exits 1; reproduce it with
#   BUILD/fuzz/fusec_fuzz BUILD/findings/crash-...
# and minimize it with -minimize_crash=1 before adding it to tests/fuzz_findings/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
jobs=${FUZZ_JOBS:-1}
build_jobs=$(nproc 2>/dev/null || echo 2)
preset=${FUZZ_PRESET:-fuzz}
case $preset in
  fuzz) build=build-fuzz ;;
  asan) build=build-asan ;;
  *) echo "fuzz: FUZZ_PRESET is fuzz or asan, not $preset" >&2; exit 2 ;;
esac

if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ is needed (Debian: apt-get install clang libclang-rt-14-dev)" >&2
  exit 2
fi
cmake --preset "$preset" >/dev/null
cmake --build "$build" -j"$build_jobs" --target fusec_fuzz

seeds=$build/corpus-seed corpus=$build/corpus findings=$build/findings
mkdir -p "$seeds" "$corpus" "$findings"
if [ -z "$(ls -A "$seeds")" ]; then
  cp models/*.onnx tests/fuzz_findings/*.onnx "$seeds"/
  # Every 4th ONNX backend test model under 64 KiB (about 250 files): many ops, opsets and
  # attribute forms; larger files only slow mutation down.
  if [ -d /usr/share/libonnx-testdata/data ]; then
    i=0
    while IFS= read -r f; do
      i=$((i + 1))
      [ $((i % 4)) -eq 0 ] || continue
      cp "$f" "$seeds/$(echo "${f#/usr/share/libonnx-testdata/data/}" | tr '/' '_')"
    done < <(find /usr/share/libonnx-testdata/data -name model.onnx -size -64k | sort)
  fi
fi
echo "fuzz: $(ls "$seeds" | wc -l) seeds, $(ls "$corpus" | wc -l) corpus entries, ${seconds}s, $jobs job(s)"

# A finding is what libFuzzer calls a failure: crash-, leak-, timeout- (over -timeout) and oom-
# artifacts. slow-unit- files (over 10 s, under the timeout) are listed but fail nothing: on a busy
# machine they measure the machine (the hour of 2026-11-23 wrote two while builds held both cores;
# alone, each input ran in under 2 s under ASan).
count_findings() { ls "$findings" | grep -cE '^(crash|leak|timeout|oom)-' || true; }
before=$(count_findings)
slow_before=$(ls "$findings" | grep -c '^slow-unit-' || true)
timeout=20
args=(-max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb=3072 -malloc_limit_mb=1024 -max_len=262144
      -dict=fuzz/onnx.dict -artifact_prefix="$findings/" -print_final_stats=1 -print_pcs=0 -print_funcs=0)
[ "$jobs" -gt 1 ] && args+=(-fork="$jobs" -ignore_crashes=0)
# FUZZ_SEED=N replays the same mutation sequence (CI sets it); unset, libFuzzer picks a seed.
[ -n "${FUZZ_SEED:-}" ] && args+=(-seed="$FUZZ_SEED")
set +e
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "$build/fuzz/fusec_fuzz" "${args[@]}" "$corpus" "$seeds" 2>&1 | tee "$build/last_run.log" | grep -v '^#[0-9]*.*\(NEW\|REDUCE\|pulse\)'
rc=${PIPESTATUS[0]}
set -e
after=$(count_findings)
slow_after=$(ls "$findings" | grep -c '^slow-unit-' || true)
if [ "$slow_after" -gt "$slow_before" ]; then
  echo "fuzz: note: $((slow_after - slow_before)) slow unit(s) (over 10 s, under the ${timeout}s timeout): replay with" \
       "$build/fuzz/fusec_fuzz $build/findings/slow-unit-... to see whether the input or the machine was slow"
fi
grep -E '^#[0-9]+.*DONE|^stat::number_of_executed_units|^stat::peak_rss_mb|cov:' "$build/last_run.log" | tail -3 || true
if [ "$rc" -ne 0 ] || [ "$after" -gt "$before" ]; then
  echo "fuzz: FAIL: libFuzzer exit $rc; findings in $findings/:" >&2
  ls -t "$findings" | grep -E '^(crash|leak|timeout|oom)-' | head -n $((after - before + 1)) >&2
  exit 1
fi
echo "fuzz: ok: no finding in ${seconds}s"

// Every FUSEC_* environment switch, in one table: the ones fusec reads (CPU backend, CUDA backend,
// profiler), the ones its tests read and the ones its scripts read. fusec's code reads a switch
// only through env_switch(), whose argument must be a name in this table: a name missing here does
// not compile. docs/switches.md is generated from this table (with the files that read each
// switch), and tests/scripts/check_switches.py, run by ctest, fails when a FUSEC_ variable is read
// anywhere (C++, Python, shell, CMake) without an entry here, when an entry is read nowhere, or when
// docs/switches.md is not what the table gives:
//   .venv/bin/python tests/scripts/check_switches.py --write   # after editing the table
// Build options (-DFUSEC_CUDA, -DFUSEC_FUZZ, ...) are CMake cache variables, not switches.
#pragma once
#include <string_view>

namespace fusec {

/// Who reads a switch; docs/switches.md has one table per scope.
enum class SwitchScope {
  Fusec,   // fusec itself (the library, the CLI): a user's knob
  Test,    // a test of fusec's own suite
  Script,  // a script in scripts/
};

struct SwitchInfo {
  const char* name;
  SwitchScope scope;
  const char* effect;    // what setting it does
  const char* values;    // the values it acts on; any other value acts as unset
  const char* fallback;  // what happens when it is unset
};

// One entry per switch, grouped by scope, then by area. check_switches.py parses this list: keep
// each field a string literal (adjacent literals are joined), and no braces inside them.
inline constexpr SwitchInfo kSwitches[] = {
    // ---- fusec: CPU backend
    {"FUSEC_NUM_THREADS", SwitchScope::Fusec, "threads of the CPU backend's pool (read once per process)", "N > 0",
     "one per core"},
    {"FUSEC_GEMM_ISA", SwitchScope::Fusec,
     "caps the instruction set of the CPU GEMM (read once per process), for A/B runs", "generic, avx2",
     "the best the CPU has: avx512, else avx2, else generic"},
    {"FUSEC_CPU_PACKED_WEIGHTS", SwitchScope::Fusec,
     "0: the CPU GEMM packs a constant weight on every call instead of once per executable, for A/B runs", "0",
     "MatMul and Gemm weights packed on first use (within half the free host memory)"},
    // ---- fusec: CUDA backend, executor
    {"FUSEC_CUDA_PLUGIN", SwitchScope::Fusec, "the CUDA backend library to load instead of the usual places", "a path",
     "libfusec_cuda.so beside the executable, else in ../lib"},
    {"FUSEC_CUDA_GRAPH", SwitchScope::Fusec, "no CUDA-graph capture, as --cuda-graph off", "0",
     "the run is captured into a CUDA graph where it can be"},
    {"FUSEC_CHANNELS_LAST", SwitchScope::Fusec, "0: no channels-last (NHWC) regions; all: regions at strict fp32 too",
     "0, all", "regions at fp16, bf16 and tf32 only"},
    {"FUSEC_CHANNELS_LAST_3D", SwitchScope::Fusec,
     "0: no channels-last regions at rank 5 (3-D convs stay N,C,D,H,W), for an A/B", "0",
     "rank-5 regions channels-last (N,D,H,W,C) wherever rank-4 ones are"},
    {"FUSEC_PDL", SwitchScope::Fusec,
     "launch the norms and the activation pass without programmatic dependent launch (read once)", "0",
     "programmatic dependent launch"},
    {"FUSEC_BUILD_TRACE", SwitchScope::Fusec,
     "print where an engine build's time goes (read once); live: each entry also as it comes, so a build that never "
     "ends shows the last thing it finished",
     "1, live", "no trace"},
    // ---- fusec: CUDA backend, tuning and caches
    {"FUSEC_TUNE", SwitchScope::Fusec,
     "keep the libraries' heuristic choices: no timed tuning, the tuning cache is not read", "0",
     "timed tuning, remembered in the tuning cache"},
    {"FUSEC_TUNING_CACHE", SwitchScope::Fusec, "the tuning cache file (tuning.json)", "a path",
     "$XDG_CACHE_HOME/fusec/tuning.json, else ~/.cache/fusec/tuning.json"},
    {"FUSEC_NVRTC_CACHE", SwitchScope::Fusec, "no on-disk cache of NVRTC-compiled kernels", "0",
     "kernels cached on disk"},
    {"FUSEC_NVRTC_CACHE_DIR", SwitchScope::Fusec, "the folder of the on-disk NVRTC cache", "a path",
     "$XDG_CACHE_HOME/fusec/nvrtc, else ~/.cache/fusec/nvrtc"},
    // ---- fusec: CUDA backend, convolution routes
    {"FUSEC_CONV_TUNE", SwitchScope::Fusec, "0: no conv timing at strict fp32; all: time fp16, bf16 and tf32 convs too",
     "0, all", "convs timed at strict fp32 only"},
    {"FUSEC_CONV_GEMM", SwitchScope::Fusec,
     "0: no 1x1-conv routes (the cuBLASLt GEMM at fp32 NCHW, fusec's pointwise kernels channels-last); force: "
     "take a route's first candidate untimed wherever it applies; force:N: its candidate N (from 1)",
     "0, force, force:N", "the routes are timed candidates"},
    {"FUSEC_CONV_IGEMM", SwitchScope::Fusec, "0: no implicit-GEMM conv; N: take its configuration N (from 1) untimed",
     "0, N", "its configurations are timed candidates"},
    {"FUSEC_CONV_DEPTHWISE", SwitchScope::Fusec,
     "0: no depthwise conv route (channels-last depthwise convs stay on cuDNN, asymmetric pads on the CPU); "
     "N: take its configuration N (from 1) untimed",
     "0, N", "its configurations are timed against cuDNN's choice at every precision"},
    {"FUSEC_CONV_GROUPED", SwitchScope::Fusec,
     "0: no grouped conv route (channels-last grouped convs stay on cuDNN); force, force2: take its first or second "
     "configuration (FMA) untimed; force3: its tensor-core configuration untimed",
     "0, force, force2, force3", "its configurations are timed against cuDNN's choice at every precision"},
    {"FUSEC_CONV_TAP", SwitchScope::Fusec,
     "keep the implicit-GEMM conv's K in the weights' (c, r, s) order, for A/B runs", "0",
     "(r, s, c) tap-major order for fp32 weights with C % 16 == 0"},
    {"FUSEC_CONV_WINOGRAD", SwitchScope::Fusec, "no Winograd candidates for 3x3 stride-1 convs", "0",
     "Winograd candidates are timed"},
    {"FUSEC_CONV_FUSED", SwitchScope::Fusec,
     "no cuDNN fused conv + bias (+ residual) + ReLU call: the epilogue runs apart", "0",
     "the fused call where cuDNN takes it"},
    {"FUSEC_CONV_TRACE", SwitchScope::Fusec, "print every conv candidate's time", "any value, even 0", "no trace"},
    // ---- fusec: CUDA backend, GEMM and attention routes
    {"FUSEC_SGEMM", SwitchScope::Fusec, "0: leave fusec's own SGEMM out; force: take it untimed against cuBLASLt",
     "0, force, 1", "timed beside cuBLASLt (as 1)"},
    {"FUSEC_HGEMM", SwitchScope::Fusec,
     "0: leave fusec's own fp16/bf16 wgmma GEMM out; force: take it untimed against cuBLASLt", "0, force, 1",
     "timed beside cuBLASLt plus the activation pass (as 1)"},
    {"FUSEC_GEMM_TRACE", SwitchScope::Fusec, "print every GEMM candidate's time", "any value, even 0", "no trace"},
    {"FUSEC_CUDNN_SDPA", SwitchScope::Fusec,
     "0: fusec's own attention kernel at every precision; 1: cuDNN's SDPA wherever it takes the case, untimed", "0, 1",
     "at fp16/bf16, cuDNN's SDPA, fusec's tensor-core kernel or its grouped kernel, whichever the tuner timed "
     "fastest"},
    {"FUSEC_EXPERT_GROUPED", SwitchScope::Fusec,
     "0: ExpertMatMul's per-row kernels even where its grouped GEMM applies (to time one against the other)", "0",
     "the grouped GEMM: on tensor cores at fp16/bf16 where K (and M, for W stored [E, K, M]) are multiples of 8, "
     "else on FMA tiles (float32 too)"},
    {"FUSEC_ATTN_GROUP", SwitchScope::Fusec,
     "0: leave the grouped attention kernel out of the tuner's race; N (with FUSEC_CUDNN_SDPA=0): run it at N query "
     "heads a block (the largest divisor of the group up to N) wherever it takes the case",
     "0, N", "raced at the whole group and at half of it a block where it takes the case"},
    {"FUSEC_ATTN_MMA", SwitchScope::Fusec, "the streaming attention kernel at fp16/bf16 instead of the tensor-core one",
     "0", "the tensor-core kernel where it applies"},
    {"FUSEC_ATTN_TRACE", SwitchScope::Fusec, "print the attention tuner's times (cuDNN's SDPA, the own kernels)",
     "any value, even 0", "no trace"},
    {"FUSEC_ATTN_TILED", SwitchScope::Fusec,
     "the streaming fp32 attention kernel instead of the register-tiled one (read once)", "0",
     "the register-tiled kernel where it applies"},
    // ---- fusec: CUDA backend, recurrent cells
    {"FUSEC_RNN_ALGO", SwitchScope::Fusec,
     "run RNN, GRU and LSTM nodes on this cuDNN RNN algorithm, untimed (the standard one where cuDNN refuses it)",
     "standard, static, small_h, dynamic",
     "the standard and static persistent algorithms cuDNN accepts for the shape are timed (the standard one "
     "under FUSEC_TUNE=0)"},
    // ---- fusec: profiler
    {"FUSEC_PROFILE_NO_CUPTI", SwitchScope::Fusec, "profile with CUDA events around each step instead of CUPTI", "1",
     "CUPTI"},
    {"FUSEC_PEAKS_CACHE", SwitchScope::Fusec, "the measured-peaks cache file (peaks.json)", "a path",
     "$XDG_CACHE_HOME/fusec/peaks.json, else ~/.cache/fusec/peaks.json"},
    // ---- tests
    {"FUSEC_BINARY", SwitchScope::Test, "the fusec binary the GPU device-error tests run", "a path",
     "fusec beside the test binary, else one folder up; the tests skip without one"},
    {"FUSEC_REQUIRE_COUNTERS", SwitchScope::Test,
     "hardware-counter tests fail, instead of skipping, where the GPU refuses counters", "1", "they skip"},
    {"FUSEC_SANITIZED", SwitchScope::Test,
     "the script-driven tests treat fusec as built with ASan/UBSan: a sanitizer report fails "
     "(tests/CMakeLists.txt sets it under -DFUSEC_SANITIZE=ON)",
     "1", "not sanitized"},
    {"FUSEC_BENCH_PRINT", SwitchScope::Test,
     "the GPU suite's kernel timings run and print their bandwidth (GpuDepthwise.Bandwidth)", "1", "they skip"},
    {"FUSEC_BENCH_FILTER", SwitchScope::Test,
     "GpuDepthwise.Bandwidth times only the lines whose label contains it (\"<precision> <shape> | <route> |\"), "
     "so that a profiler can be pointed at one kernel",
     "a substring, e.g. \"fp16 efficientnet 3x3 s1 C32 112x112 | forced 4 |\"", "every line"},
    {"FUSEC_UNDER_SANITIZER", SwitchScope::Test,
     "the GPU suite runs under compute-sanitizer (scripts/gpu_check.sh sets it): a test that counts kernels through "
     "CUPTI, which records nothing there, skips that count",
     "1", "kernel counts are checked"},
    {"FUSEC_CHROMIUM", SwitchScope::Test, "the headless browser the HTML-report tests use", "a command name or path",
     "chromium, chromium-browser or google-chrome on PATH; the tests skip without one"},
    // ---- scripts
    {"FUSEC_SKIP_APT", SwitchScope::Script, "scripts/setup.sh skips apt-get", "1", "apt-get runs"},
    {"FUSEC_NO_ASAN", SwitchScope::Script, "scripts/test.sh skips the sanitizer pass", "1", "the sanitizer pass runs"},
    {"FUSEC_NO_FUZZ", SwitchScope::Script, "scripts/test.sh skips the fuzzing step", "1", "the fuzzing step runs"},
    {"FUSEC_FUZZ_SECONDS", SwitchScope::Script, "how long scripts/test.sh fuzzes", "seconds", "180"},
};

/// The table entry of `name`, or nullptr.
constexpr const SwitchInfo* find_switch(std::string_view name) {
  for (const SwitchInfo& s : kSwitches)
    if (name == s.name) return &s;
  return nullptr;
}

/// Whether `name` is in kSwitches. (SwitchName's check: a pointer comparison is not a constant
/// expression under -fsanitize=undefined, a bool is.)
constexpr bool is_switch(std::string_view name) {
  for (const SwitchInfo& s : kSwitches)
    if (name == s.name) return true;
  return false;
}

/// A switch name, checked against kSwitches at compile time: env_switch("FUSEC_TYPO") fails to
/// compile (the "throw" below is then reached during constant evaluation). Add the switch to
/// kSwitches, then regenerate docs/switches.md.
class SwitchName {
 public:
  consteval SwitchName(const char* name) : name_(name) {
    if (!is_switch(name)) throw "not a FUSEC_* switch of kSwitches (ir/switches.h)";
  }
  const char* c_str() const { return name_; }

 private:
  const char* name_;
};

/// The switch's value from the environment, nullptr when unset: std::getenv, so each caller
/// parses the value as it always has (docs/switches.md gives the values each acts on).
const char* env_switch(SwitchName name);

}  // namespace fusec

#include "backend/gpu_plugin.h"

#include <dlfcn.h>

#include <algorithm>
#include <filesystem>
#include <mutex>

#include "ir/switches.h"

namespace fusec {

GpuExecutable::~GpuExecutable() = default;
GpuPlugin::~GpuPlugin() = default;

namespace {

namespace fs = std::filesystem;

constexpr const char* kPluginFile = "libfusec_cuda.so";
constexpr const char* kEntryPoint = "fusec_cuda_plugin";  // extern "C" GpuPlugin* (), backend/cuda/plugin.cpp

struct Loaded {
  GpuPlugin* plugin = nullptr;
  std::string why;
};

Loaded load() {
  Loaded r;
#ifndef FUSEC_BUILT_WITH_CUDA
  r.why = "this fusec was built without the CUDA backend (rebuild with the CUDA toolkit)";
  return r;
#else
  std::vector<fs::path> tried;
  if (const char* p = env_switch("FUSEC_CUDA_PLUGIN"); p && *p) {
    tried.push_back(p);
  } else {
    std::error_code ec;
    const fs::path exe_dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
    if (!ec) {
      tried.push_back(exe_dir / kPluginFile);
      tried.push_back(exe_dir.parent_path() / "lib" / kPluginFile);
    }
  }
  std::string missing;
  for (const fs::path& path : tried) {
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      missing += (missing.empty() ? "" : ", ") + path.string();
      continue;
    }
    // RTLD_LOCAL: the plugin's own symbols stay its own; it finds fusec's in the executable.
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      r.why = "the CUDA backend " + path.string() + " could not be loaded: " + (e ? e : "unknown error");
      return r;
    }
    auto entry = reinterpret_cast<GpuPlugin* (*)()>(dlsym(h, kEntryPoint));
    if (!entry) {
      r.why = "the CUDA backend " + path.string() + " has no entry point " + kEntryPoint;
      return r;
    }
    r.plugin = entry();  // never unloaded: its objects may outlive any caller
    return r;
  }
  r.why = "the CUDA backend (" + std::string(kPluginFile) + ") is not installed; looked for " + missing;
  return r;
#endif
}

}  // namespace

bool gpu_backend_built() {
#ifdef FUSEC_BUILT_WITH_CUDA
  return true;
#else
  return false;
#endif
}

GpuPlugin* gpu_plugin(std::string* why) {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = load(); });
  if (!loaded.plugin && why) *why = loaded.why;
  return loaded.plugin;
}

const std::vector<std::pair<std::string, std::string>>& gpu_kernel_families() {
  // Sorted by (domain, op). tests/gpu/test_plugin_gpu.cpp compares it with the CUDA backend's
  // registry (no GPU needed), so an op family registered there and not here fails the suite.
  static const std::vector<std::pair<std::string, std::string>> table = [] {
    std::vector<std::pair<std::string, std::string>> t;
    for (const char* op : {"Abs",
                           "Acos",
                           "Acosh",
                           "Add",
                           "AffineGrid",
                           "And",
                           "ArgMax",
                           "ArgMin",
                           "Asin",
                           "Asinh",
                           "Atan",
                           "Atanh",
                           "Attention",
                           "AveragePool",
                           "BatchNormalization",
                           "BitShift",
                           "BitwiseAnd",
                           "BitwiseNot",
                           "BitwiseOr",
                           "BitwiseXor",
                           "Cast",
                           "CastLike",
                           "Ceil",
                           "Celu",
                           "Clip",
                           "Col2Im",
                           "Concat",
                           "Conv",
                           "ConvTranspose",
                           "Cos",
                           "Cosh",
                           "CumProd",
                           "CumSum",
                           "DepthToSpace",
                           "Div",
                           "Dropout",
                           "Elu",
                           "Equal",
                           "Erf",
                           "Exp",
                           "Expand",
                           "Flatten",
                           "Floor",
                           "GRU",
                           "Gather",
                           "GatherElements",
                           "GatherND",
                           "Gelu",
                           "Gemm",
                           "GlobalAveragePool",
                           "GlobalLpPool",
                           "GlobalMaxPool",
                           "Greater",
                           "GreaterOrEqual",
                           "GridSample",
                           "GroupNormalization",
                           "Hardmax",
                           "HardSigmoid",
                           "HardSwish",
                           "Identity",
                           "InstanceNormalization",
                           "IsInf",
                           "IsNaN",
                           "LSTM",
                           "LayerNormalization",
                           "LeakyRelu",
                           "Less",
                           "LessOrEqual",
                           "Log",
                           "LogSoftmax",
                           "LpNormalization",
                           "LpPool",
                           "MatMul",
                           "Max",
                           "MaxPool",
                           "Mean",
                           "Min",
                           "Mish",
                           "Mod",
                           "Mul",
                           "Neg",
                           "Not",
                           "Or",
                           "Pad",
                           "Pow",
                           "PRelu",
                           "RMSNormalization",
                           "RNN",
                           "Reciprocal",
                           "ReduceL1",
                           "ReduceL2",
                           "ReduceLogSum",
                           "ReduceLogSumExp",
                           "ReduceMax",
                           "ReduceMean",
                           "ReduceMin",
                           "ReduceProd",
                           "ReduceSum",
                           "ReduceSumSquare",
                           "Relu",
                           "Reshape",
                           "Resize",
                           "Round",
                           "Scatter",
                           "ScatterElements",
                           "ScatterND",
                           "Selu",
                           "Shrink",
                           "Sigmoid",
                           "Sign",
                           "Sin",
                           "Sinh",
                           "Slice",
                           "Softmax",
                           "Softplus",
                           "Softsign",
                           "SpaceToDepth",
                           "Split",
                           "Sqrt",
                           "Squeeze",
                           "Sub",
                           "Sum",
                           "Swish",
                           "Tan",
                           "Tanh",
                           "ThresholdedRelu",
                           "Tile",
                           "TopK",
                           "Transpose",
                           "Trilu",
                           "Unsqueeze",
                           "Upsample",
                           "Where",
                           "Xor"})
      t.emplace_back("", op);
    for (const char* op : {"Attention", "ExpertMatMul", "FusedConv", "FusedElementwise", "FusedMatMul", "GatedMatMul",
                           "Gelu", "LayerNormGelu", "LayerNormalization", "Rotary", "SimplifiedLayerNorm",
                           "SkipLayerNorm", "SkipSimplifiedLayerNorm", "SqueezeExcite"})
      t.emplace_back("ai.fusec", op);
    std::sort(t.begin(), t.end());
    return t;
  }();
  return table;
}

bool gpu_has_kernel_family(const std::string& domain, const std::string& op_type) {
  const std::string d = domain == "ai.onnx" ? "" : domain;
  return std::binary_search(gpu_kernel_families().begin(), gpu_kernel_families().end(), std::make_pair(d, op_type));
}

}  // namespace fusec

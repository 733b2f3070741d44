#include "backend/cuda/core/nvrtc_module.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nvrtc.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "backend/cache_file.h"
#include "backend/cuda/core/check.h"
#include "ir/error.h"
#include "ir/switches.h"

namespace fusec::cuda {

namespace {

// ---- NVRTC through dlopen ----

struct NvrtcApi {
  decltype(&nvrtcVersion) version = nullptr;
  decltype(&nvrtcGetErrorString) error_string = nullptr;
  decltype(&nvrtcCreateProgram) create = nullptr;
  decltype(&nvrtcDestroyProgram) destroy = nullptr;
  decltype(&nvrtcCompileProgram) compile = nullptr;
  decltype(&nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&nvrtcGetProgramLog) log = nullptr;
  decltype(&nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&nvrtcGetCUBIN) cubin = nullptr;
  std::string error;  // why it could not be loaded
  std::string version_text;
};

const NvrtcApi& nvrtc() {
  static const NvrtcApi api = [] {
    NvrtcApi a;
    void* h = nullptr;
    // The soname of the toolkit we build against first; an already-loaded NVRTC (linked into the
    // binary) is found by its soname too.
    const char* candidates[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so",
                                "/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so"};
    std::string tried;
    for (const char* c : candidates) {
      h = dlopen(c, RTLD_NOW | RTLD_GLOBAL);
      if (h) break;
      const char* e = dlerror();
      if (tried.empty() && e) tried = e;
    }
    if (!h) {
      a.error = "NVRTC (libnvrtc.so) could not be loaded: " + tried +
                "; install the CUDA toolkit's NVRTC or add its lib64 folder to LD_LIBRARY_PATH";
      return a;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (!fn && a.error.empty()) a.error = std::string("NVRTC lacks ") + name + " (too old?)";
    };
    sym(a.version, "nvrtcVersion");
    sym(a.error_string, "nvrtcGetErrorString");
    sym(a.create, "nvrtcCreateProgram");
    sym(a.destroy, "nvrtcDestroyProgram");
    sym(a.compile, "nvrtcCompileProgram");
    sym(a.log_size, "nvrtcGetProgramLogSize");
    sym(a.log, "nvrtcGetProgramLog");
    sym(a.cubin_size, "nvrtcGetCUBINSize");
    sym(a.cubin, "nvrtcGetCUBIN");
    if (a.error.empty()) {
      int major = 0, minor = 0;
      a.version(&major, &minor);
      a.version_text = std::to_string(major) + "." + std::to_string(minor);
    }
    return a;
  }();
  if (!api.error.empty()) bad_input(api.error);
  return api;
}

// No --use_fast_math: its exp/erf/division differ from the CPU reference beyond 1e-5. FMA
// contraction (NVRTC's default) stays: it is IEEE fused multiply-add, one rounding instead of two.
std::vector<std::string> compile_options(int sm) {
  return {"--gpu-architecture=sm_" + std::to_string(sm), "-default-device", "--std=c++17"};
}

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// ---- disk cache ----

constexpr char kMagic[8] = {'F', 'U', 'S', 'E', 'C', 'N', 'V', '1'};

std::string cache_file(const std::string& dir, const std::string& src, int sm) {
  std::string opts;
  for (const auto& o : compile_options(sm)) opts += o + '\n';
  return dir + "/sm" + std::to_string(sm) + "_nvrtc" + nvrtc().version_text + "_" + hex64(fnv1a(opts + src)) + ".cubin";
}

void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }

bool get_u64(const std::string& in, size_t& pos, uint64_t& v) {
  if (in.size() - pos < 8) return false;
  std::memcpy(&v, in.data() + pos, 8);
  pos += 8;
  return true;
}

/// The CUBIN stored for exactly `src`, or "" when the file is missing, for another source, or damaged.
std::string read_cache(const std::string& path, const std::string& src) {
  // A CUBIN is a few MiB at most; a larger file is not one of ours.
  const std::optional<std::string> file = read_cache_file(path, uint64_t{256} << 20);
  if (!file) return "";
  const std::string& data = *file;
  if (data.size() < sizeof kMagic || std::memcmp(data.data(), kMagic, sizeof kMagic) != 0) return "";
  size_t pos = sizeof kMagic;
  uint64_t src_len = 0, bin_len = 0, sum = 0;
  if (!get_u64(data, pos, src_len) || data.size() - pos < src_len) return "";
  if (src_len != src.size() || data.compare(pos, src_len, src) != 0) return "";
  pos += src_len;
  if (!get_u64(data, pos, bin_len) || bin_len == 0 || data.size() - pos < bin_len) return "";
  std::string cubin = data.substr(pos, bin_len);
  pos += bin_len;
  if (!get_u64(data, pos, sum) || pos != data.size() || sum != fnv1a(cubin, fnv1a(src))) return "";
  return cubin;
}

/// Best effort: a folder we cannot write just means no disk cache. Written through the one writer
/// (backend/cache_file.h), so a concurrent reader sees either nothing or the whole file.
void write_cache(const std::string& path, const std::string& src, const std::string& cubin) {
  std::string data(kMagic, sizeof kMagic);
  put_u64(data, src.size());
  data += src;
  put_u64(data, cubin.size());
  data += cubin;
  put_u64(data, fnv1a(cubin, fnv1a(src)));
  write_cache_file(path, data, nullptr);
}

struct MemoryCache {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<const NvrtcModule>> modules;  // key: sm + '\n' + names + source
};

MemoryCache& memory_cache() {
  static MemoryCache c;
  return c;
}

}  // namespace

std::string nvrtc_version() { return nvrtc().version_text; }

std::string compile_to_cubin(const std::string& src, int sm, std::string* log) {
  const NvrtcApi& api = nvrtc();
  nvrtcProgram prog = nullptr;
  nvrtcResult r = api.create(&prog, src.c_str(), "fusec_elementwise.cu", 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS) {
    if (log) *log = std::string("nvrtcCreateProgram: ") + api.error_string(r);
    return "";
  }
  std::vector<std::string> opts = compile_options(sm);
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());
  r = api.compile(prog, static_cast<int>(argv.size()), argv.data());
  size_t log_size = 0;
  std::string text;
  if (api.log_size(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    text.resize(log_size);
    api.log(prog, text.data());
    text.resize(log_size - 1);  // drop the terminating NUL
  }
  std::string cubin;
  if (r == NVRTC_SUCCESS) {
    size_t n = 0;
    if (api.cubin_size(prog, &n) == NVRTC_SUCCESS && n > 0) {
      cubin.resize(n);
      if (api.cubin(prog, cubin.data()) != NVRTC_SUCCESS) cubin.clear();
    }
    if (cubin.empty()) text += "\nNVRTC produced no CUBIN";
  } else {
    text = std::string(api.error_string(r)) + "\n" + text;
  }
  api.destroy(&prog);
  if (log) *log = text;
  return cubin;
}

std::string nvrtc_disk_cache_dir() {
  if (const char* off = env_switch("FUSEC_NVRTC_CACHE"); off && std::string(off) == "0") return "";
  std::string dir;
  if (const char* d = env_switch("FUSEC_NVRTC_CACHE_DIR"); d && *d)
    dir = d;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    dir = std::string(x) + "/fusec/nvrtc";
  else if (const char* h = std::getenv("HOME"); h && *h)
    dir = std::string(h) + "/.cache/fusec/nvrtc";
  else
    return "";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir, ec)) return "";
  if (access(dir.c_str(), W_OK | X_OK) != 0) return "";
  return dir;
}

NvrtcModule::NvrtcModule(const std::string& cubin, const std::vector<std::string>& names) {
  cudaLibrary_t lib = nullptr;
  FUSEC_CUDA_CHECK(cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  library_ = lib;
  for (const auto& name : names) {
    cudaKernel_t k = nullptr;
    cudaError_t err = cudaLibraryGetKernel(&k, lib, name.c_str());
    if (err != cudaSuccess) {
      cudaLibraryUnload(lib);
      library_ = nullptr;
      throw_cuda_error(static_cast<int>(err), ("cudaLibraryGetKernel(" + name + ")").c_str(), __FILE__, __LINE__);
    }
    kernels_.push_back(reinterpret_cast<const void*>(k));
  }
}

NvrtcModule::~NvrtcModule() {
  if (library_) cudaLibraryUnload(static_cast<cudaLibrary_t>(library_));
}

std::shared_ptr<const NvrtcModule> load_nvrtc_module(const std::string& src, const std::vector<std::string>& names,
                                                     int sm, const std::string& what, NvrtcSource* from) {
  std::string key = std::to_string(sm) + '\n';
  for (const auto& n : names) key += n + ',';
  key += '\n';
  key += src;
  MemoryCache& mc = memory_cache();
  std::lock_guard<std::mutex> lock(mc.mu);
  if (auto it = mc.modules.find(key); it != mc.modules.end()) {
    if (from) *from = NvrtcSource::Memory;
    return it->second;
  }
  const std::string dir = nvrtc_disk_cache_dir();
  const std::string path = dir.empty() ? "" : cache_file(dir, src, sm);
  std::string cubin = path.empty() ? "" : read_cache(path, src);
  std::shared_ptr<const NvrtcModule> mod;
  if (!cubin.empty()) {
    // A cached CUBIN that the driver rejects (e.g. written by a different toolkit under the same
    // name) is rebuilt, like a damaged file.
    try {
      mod = std::make_shared<NvrtcModule>(cubin, names);
      if (from) *from = NvrtcSource::Disk;
    } catch (const Error&) {
      mod.reset();
    }
  }
  if (!mod) {
    std::string log;
    cubin = compile_to_cubin(src, sm, &log);
    if (cubin.empty())
      internal_error("NVRTC could not compile the generated kernel" + what + " for sm_" + std::to_string(sm) + ": " +
                     log + "\n--- source ---\n" + src);
    mod = std::make_shared<NvrtcModule>(cubin, names);
    if (!path.empty()) write_cache(path, src, cubin);
    if (from) *from = NvrtcSource::Compiled;
  }
  mc.modules.emplace(std::move(key), mod);
  return mod;
}

void clear_nvrtc_memory_cache() {
  MemoryCache& mc = memory_cache();
  std::lock_guard<std::mutex> lock(mc.mu);
  mc.modules.clear();
}

void launch_nvrtc_kernel(const void* kernel, unsigned grid, unsigned block, void** args, CUstream_st* stream,
                         const char* what) {
  cudaError_t err = cudaLaunchKernel(kernel, dim3(grid), dim3(block), args, 0, stream);
  if (err != cudaSuccess) throw_cuda_error(static_cast<int>(err), what, __FILE__, __LINE__);
}

}  // namespace fusec::cuda

// Run-time compiled CUDA kernels: NVRTC turns generated CUDA C into a CUBIN for the current
// device's architecture (no PTX, so the driver never JIT-compiles), and the CUDA *runtime* library
// API loads it (cudaLibraryLoadData), so fusec never links libcuda and still starts on machines
// without a GPU driver. NVRTC itself is opened with dlopen on first use: a missing NVRTC is a
// clear error at plan time, not a loader failure at start-up.
//
// Compiled modules are cached in memory (source + arch -> loaded library) and on disk under
// $FUSEC_NVRTC_CACHE_DIR, else $XDG_CACHE_HOME/fusec/nvrtc/, else ~/.cache/fusec/nvrtc/, one file
// per (arch, NVRTC version, source hash). A file stores its full source next to the CUBIN and a
// checksum, so a hash collision or a truncated/corrupt file is detected and rebuilt, never loaded.
// FUSEC_NVRTC_CACHE=0 turns the disk cache off.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct CUstream_st;

namespace fusec::cuda {

/// Host-only (no GPU needed): compiles `src` for sm_`sm` to a CUBIN. On a compile error returns ""
/// and puts NVRTC's log in *log; throws BadInput when NVRTC cannot be loaded at all.
std::string compile_to_cubin(const std::string& src, int sm, std::string* log);

/// "13.0"; throws BadInput when NVRTC cannot be loaded.
std::string nvrtc_version();

/// A loaded CUBIN and the kernels looked up in it. Kept alive by the ops that launch its kernels,
/// so dropping the in-memory cache never unloads code that a compiled plan still uses.
class NvrtcModule {
 public:
  NvrtcModule(const std::string& cubin, const std::vector<std::string>& names);
  ~NvrtcModule();
  NvrtcModule(const NvrtcModule&) = delete;
  NvrtcModule& operator=(const NvrtcModule&) = delete;

  /// Handle for launch_kernel (a cudaKernel_t), in the order of the names given.
  const void* kernel(size_t i) const { return kernels_.at(i); }

 private:
  void* library_ = nullptr;  // cudaLibrary_t
  std::vector<const void*> kernels_;
};

/// Where a module came from (tests, diagnostics).
enum class NvrtcSource { Memory, Disk, Compiled };

/// The module for `src` (extern "C" kernels `names`) built for sm_`sm`: from the in-memory cache,
/// else the disk cache, else compiled now. A compile error throws Internal with the NVRTC log
/// and `what` (the node reference).
std::shared_ptr<const NvrtcModule> load_nvrtc_module(const std::string& src, const std::vector<std::string>& names,
                                                     int sm, const std::string& what, NvrtcSource* from = nullptr);

/// Forgets the in-memory cache (modules in use stay loaded). For tests of the disk cache.
void clear_nvrtc_memory_cache();

/// The disk cache folder in use, or "" when the disk cache is off.
std::string nvrtc_disk_cache_dir();

/// cudaLaunchKernel of a kernel from an NvrtcModule; `args` points at each parameter's value.
/// Checks the launch (configuration errors throw, naming `what`).
void launch_nvrtc_kernel(const void* kernel, unsigned grid, unsigned block, void** args, CUstream_st* stream,
                         const char* what);

}  // namespace fusec::cuda

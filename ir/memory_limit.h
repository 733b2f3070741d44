// A memory budget checked before every large allocation, so a model that declares a 1 TB tensor
// (or just more than this machine has) gets a clean error naming what needed the memory instead of
// an allocator that overcommits now and an out-of-memory kill later.
//
// The host budget counts the tensor storage fusec allocates (ir/tensor.cpp's aligned_storage: inputs,
// intermediates, folded constants, initializers read into memory). Memory-mapped weights are not
// counted: they are file pages the kernel can drop and re-read. Its limit defaults to the machine's
// available memory when first used; `--max-memory` sets it. GPU memory is checked separately, per
// plan, against the GPU's free memory and `--max-device-memory` (backend/device_memory.h).
#pragma once
#include <atomic>
#include <cstddef>
#include <string>

namespace fusec {

class MemoryBudget {
 public:
  MemoryBudget(std::string name, size_t limit) : name_(std::move(name)), limit_(limit) {}
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  size_t limit() const { return limit_.load(); }
  void set_limit(size_t bytes) { limit_.store(bytes); }
  size_t used() const { return used_.load(); }

  /// Throws BadInput if `bytes` more would pass the limit: "<what> needs 8.00 GiB, but the host
  /// memory limit is 4.00 GiB with 1.20 GiB in use (--max-memory)". Counts nothing.
  void check(size_t bytes, const std::string& what) const;
  /// check(), then counts the bytes as used until release().
  void reserve(size_t bytes, const std::string& what);
  /// Counts the bytes as used if they fit under the limit; false (and nothing counted) otherwise.
  /// For hot paths that build their error message only when it is needed.
  bool try_reserve(size_t bytes);
  void release(size_t bytes);

 private:
  std::string name_;
  std::atomic<size_t> limit_;
  std::atomic<size_t> used_{0};
};

/// The process-wide host budget (limit: available memory at first use, unless set).
MemoryBudget& host_memory();

/// host_memory().check(bytes, what): the call to make before allocating host tensor data.
void check_allocation(size_t bytes, const std::string& what);

/// Asks the C allocator to keep freed memory for the next allocation instead of handing it back to
/// the system: blocks up to 32 MiB come from the heap, and up to 1 GiB of free heap stays mapped. A
/// run whose shapes depend on its data allocates every tensor afresh, and each allocation the system
/// maps anew faults in and zeroes its pages: 15 of 60 ms of Faster R-CNN's post-processing on the
/// CPU. What the process holds after a run is not returned, and blocks from the heap fragment: a
/// Faster R-CNN run's peak RSS rose from 172 to 187-195 MiB (BERT-base's run and optimize: the same).
/// Called once by fusec's main(); a library user decides for their own process.
void keep_freed_memory_for_reuse();

/// The machine's available memory (MemAvailable), or its physical memory if that is unknown.
size_t available_host_memory();

/// Parses a size flag: "512M", "8G", "1.5GiB", "1073741824" (bytes). BadInput on anything else.
size_t parse_byte_size(const std::string& text, const std::string& flag);

/// "1.50 GiB"
std::string format_bytes(double bytes);

}  // namespace fusec

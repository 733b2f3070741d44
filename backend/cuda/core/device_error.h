// Errors a kernel finds in the data (an index out of range, an integer division by zero), reported
// the way the CPU reference reports them: the same message, naming the node, exit 2.
//
// A kernel cannot throw. Each executable owns one DeviceErrorRecord in device memory at a fixed
// address (so replays of a captured CUDA graph write to it too); a kernel that finds bad data
// writes it there and carries on (reading nothing out of bounds). The executor copies the record
// into pinned host memory once per run, behind the run's work, zeroes it for the next run, and
// after the run's synchronization turns a set record into the BadInput error.
//
// When several elements are bad, the record keeps the one the CPU reference would have named:
// the earliest step (the CPU stops at the first failing node), then the lowest position in the
// indices (the CPU reads them in order). That ordering is a 64-bit key, (step << 40) | position,
// and writers take a tiny lock, so code, value and bound always come from the same element.
// Only a thread that found bad data ever touches the record: a correct run costs one predicated
// compare per element, on a path that already bounds-checked its index.
//
// This header is plain C++ on the host and CUDA in .cu files. The NVRTC prelude
// (elementwise_codegen.cpp) repeats the struct and report_device_error as text: keep them alike.
#pragma once
#include <cstdint>
#include <string>

namespace fusec::cuda {

enum DeviceErrorCode : int {
  kNoDeviceError = 0,
  kIndexOutOfAxis = 1,  // Gather, GatherElements: "index V is out of range for an axis of length D"
  kIndexOutOfDim = 2,   // GatherND: "index V is out of range for a dim of length D"
  kIntDivByZero = 3,    // Div, Mod on integers: "integer division by zero"
};

struct DeviceErrorRecord {
  unsigned long long key;  // (step << 40) | position: the lowest is kept
  long long value;         // the bad index as given (before negative indices wrap)
  long long bound;         // the dim it indexes
  int code;                // DeviceErrorCode; 0: nothing went wrong
  int step;                // the executor's step (one node) that found it
  int lock;                // held while a writer fills the record
  int pad;
};
static_assert(sizeof(DeviceErrorRecord) == 40, "the NVRTC prelude repeats this layout");

/// Where a kernel reports: the executable's record and the running step. A null record (a kernel
/// launched outside an executor, in a test) reports nothing.
struct DeviceErrorSite {
  DeviceErrorRecord* record = nullptr;
  int step = 0;
};

/// The CPU reference's message for a set record (without the node suffix).
inline std::string device_error_text(const DeviceErrorRecord& r) {
  switch (r.code) {
    case kIndexOutOfAxis:
      return "index " + std::to_string(r.value) + " is out of range for an axis of length " + std::to_string(r.bound);
    case kIndexOutOfDim:
      return "index " + std::to_string(r.value) + " is out of range for a dim of length " + std::to_string(r.bound);
    case kIntDivByZero:
      return "integer division by zero";
    default:
      return "a kernel reported error code " + std::to_string(r.code);
  }
}

#ifdef __CUDACC__
constexpr unsigned long long kDeviceErrorWaitNs = 1000000000ull;

__device__ __forceinline__ unsigned long long device_error_clock_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// Records bad data found at `position` of step `site.step`, unless an earlier one is recorded.
/// Called only on the error path. Never waits unboundedly: a spin lock contended by lanes of one
/// warp can starve the lane holding it (a launch with millions of bad indices hung this way), so
/// the lanes that arrive together first elect the one with the lowest key (ties: the lowest lane),
/// and only it competes for the record with the other warps' electees, for at most a second. The
/// bound is in time, not tries: a count of tries ran out under compute-sanitizer (every instruction
/// of the lock holder slowed by the tool), and the record then named a later position than the CPU.
__device__ __forceinline__ void report_device_error(const DeviceErrorSite& site, int code, long long position,
                                                    long long value, long long bound) {
  DeviceErrorRecord* r = site.record;
  if (!r) return;
  const unsigned long long key = (static_cast<unsigned long long>(site.step) << 40) |
                                 (static_cast<unsigned long long>(position) & ((1ull << 40) - 1));
  volatile DeviceErrorRecord* v = r;
  if (v->code != 0 && v->key <= key) return;  // most threads of a bad launch stop here
  const unsigned lanes = __activemask();
  const unsigned hi = static_cast<unsigned>(key >> 32), lo = static_cast<unsigned>(key);
  const unsigned min_hi = __reduce_min_sync(lanes, hi);
  const unsigned min_lo = __reduce_min_sync(lanes, hi == min_hi ? lo : 0xffffffffu);
  const unsigned lowest = __ballot_sync(lanes, hi == min_hi && lo == min_lo);
  unsigned lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  if (lane != static_cast<unsigned>(__ffs(lowest) - 1)) return;
  const unsigned long long start = device_error_clock_ns();
  while (device_error_clock_ns() - start < kDeviceErrorWaitNs) {
    if (atomicCAS(&r->lock, 0, 1) == 0) {
      __threadfence();
      if (v->code == 0 || key < v->key) {
        v->key = key;
        v->value = value;
        v->bound = bound;
        v->step = site.step;
        v->code = code;
      }
      __threadfence();
      atomicExch(&r->lock, 0);
      return;
    }
    if (v->code != 0 && v->key <= key) return;
    __nanosleep(100);
  }
  // Still held after a second: the holder is starved; this run fails either way, naming the
  // holder's element.
}
#endif

}  // namespace fusec::cuda

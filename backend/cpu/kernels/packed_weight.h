// A constant weight packed for the GEMM once per executable step (backend/cpu/kernel.h's
// StepCache) instead of on every call. MatMul and Gemm use it for their B: packing B is a transpose
// into NR-wide slivers, and skipping it took BERT-base at batch 1 from 116 to 107 ms on two cores.
// Conv does not: its weights are A, whose packing is a streaming copy that overlaps the reads the
// product needs anyway; packed once, ResNet-50 at batch 4 ran no faster and held 97 MiB more.
#pragma once
#include <memory>
#include <new>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/cpu/kernel.h"

namespace fusec::cpu {

template <typename T>
struct PackedWeight : StepCache::Entry {
  std::vector<PackedOperand<T>> parts;  // MatMul and Gemm: one (a kernel with groups would keep one each)
  /// Part i, if it was packed from `source` (the kernel's view of the weight this run).
  const PackedOperand<T>* part(size_t i, const T* source) const {
    return i < parts.size() && parts[i].source() == source ? &parts[i] : nullptr;
  }
};

/// The step's weight as `pack` packs it (appending one PackedOperand per part), made on the first
/// call. Null without a cache, when the executable's budget for packed copies cannot hold `bytes`,
/// or when packing ran out of host memory: the kernel then packs per call, as without a cache.
template <typename T, class Pack>
const PackedWeight<T>* packed_weight(StepCache* cache, size_t bytes, Pack&& pack) {
  if (!cache) return nullptr;
  const PackedWeight<T>& w = cache->get<PackedWeight<T>>([&] {
    auto made = std::make_unique<PackedWeight<T>>();
    if (cache->take(bytes)) {
      try {
        pack(made->parts);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::BadInput) throw;  // the host budget's refusal; anything else is real
        made->parts.clear();
        cache->give_back(bytes);
      } catch (const std::bad_alloc&) {
        made->parts.clear();
        cache->give_back(bytes);
      }
    }
    return made;
  });
  return w.parts.empty() ? nullptr : &w;
}

}  // namespace fusec::cpu

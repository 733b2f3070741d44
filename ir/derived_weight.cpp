#include "ir/derived_weight.h"

#include <cstring>
#include <mutex>

#include "ir/error.h"

namespace fusec {

namespace {

std::mutex g_mu;
std::shared_ptr<DerivedWeightStore> g_store;

std::shared_ptr<DerivedWeightStore> current_store() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_store;
}

}  // namespace

void set_derived_weight_store(std::shared_ptr<DerivedWeightStore> store) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_store = std::move(store);
}

void append_run(std::vector<ByteRun>& runs, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (!runs.empty()) {
    ByteRun& last = runs.back();
    const bool zeros = !src && !last.src;
    const bool next = src && last.src && static_cast<const char*>(last.src) + last.bytes == src;
    if (zeros || next) {
      last.bytes += bytes;
      return;
    }
  }
  runs.push_back({src, bytes});
}

Tensor derived_weight(DType dtype, std::vector<int64_t> dims, const std::vector<ByteRun>& runs) {
  size_t total = 0;
  for (const ByteRun& r : runs) total += r.bytes;
  if (auto store = current_store()) {
    Tensor t = store->make(dtype, dims, runs);
    if (t.defined()) {
      if (t.nbytes() != total) internal_error("derived weight store built a tensor of the wrong size");
      return t;
    }
  }
  Tensor t(dtype, std::move(dims));
  if (t.nbytes() != total)
    internal_error("a derived weight's runs hold " + std::to_string(total) + " bytes for " +
                   std::to_string(t.nbytes()));
  auto* dst = static_cast<unsigned char*>(t.raw());
  for (const ByteRun& r : runs) {
    if (r.src) std::memcpy(dst, r.src, r.bytes);  // zeros are the fresh tensor's own
    dst += r.bytes;
  }
  return t;
}

}  // namespace fusec

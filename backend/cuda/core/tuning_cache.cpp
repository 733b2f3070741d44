#include "backend/cuda/core/tuning_cache.h"

#include "backend/cache_file.h"
#include "ir/switches.h"

#include <cuda_runtime_api.h>
#include <cstdlib>
#include <map>
#include <mutex>

namespace fusec::cuda {

struct TuningCache::State {
  std::mutex mu;
  std::map<std::string, std::string> entries;
};

TuningCache& TuningCache::global() {
  static TuningCache c;
  return c;
}

TuningCache::TuningCache() : state_(new State) {}

bool TuningCache::enabled() const {
  const char* e = env_switch("FUSEC_TUNE");
  return !(e && std::string(e) == "0");
}

std::string TuningCache::path() const { return fusec_cache_path("FUSEC_TUNING_CACHE", "tuning.json"); }

void TuningCache::load() {
  loaded_ = true;
  const std::string p = path();
  if (p.empty()) return;
  // A damaged cache reads as empty and is tuned over, not an error.
  const nlohmann::json j = read_json_object(p);  // a named object: items() only refers to it
  for (const auto& [k, v] : j.items())
    if (v.is_string()) state_->entries[k] = v.get<std::string>();
}

void TuningCache::reload() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->entries.clear();
  loaded_ = false;
}

std::optional<std::string> TuningCache::get(const std::string& key) {
  if (!enabled()) return std::nullopt;
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!loaded_) load();
  auto it = state_->entries.find(key);
  if (it == state_->entries.end()) return std::nullopt;
  return it->second;
}

void TuningCache::put(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!loaded_) load();
  state_->entries[key] = value;
  const std::string p = path();
  if (p.empty()) return;
  // Merge with what other processes wrote since this one loaded, then replace the file whole; a
  // cache that cannot be written only costs the next process its tuning time.
  nlohmann::json j = read_json_object(p);
  for (const auto& [k, v] : state_->entries) j[k] = v;
  write_json_atomically(p, j, nullptr);
}

std::string tuning_device_key(int device) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return "unknown device";
  int driver = 0;
  cudaDriverGetVersion(&driver);
  return std::string(p.name) + "|sm" + std::to_string(p.major * 10 + p.minor) + "|driver " + std::to_string(driver) +
         "|fusec " + FUSEC_VERSION;
}

}  // namespace fusec::cuda

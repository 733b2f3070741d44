#include "backend/cuda/tuning_cache.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

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
  const char* e = std::getenv("FUSEC_TUNE");
  return !(e && std::string(e) == "0");
}

std::string TuningCache::path() const {
  if (const char* p = std::getenv("FUSEC_TUNING_CACHE"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/fusec/tuning.json";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/fusec/tuning.json";
  return "";
}

void TuningCache::load() {
  loaded_ = true;
  const std::string p = path();
  if (p.empty()) return;
  std::ifstream f(p);
  if (!f) return;
  try {
    auto j = nlohmann::json::parse(f);
    if (!j.is_object()) return;
    for (auto& [k, v] : j.items())
      if (v.is_string()) state_->entries[k] = v.get<std::string>();
  } catch (const std::exception&) {
    state_->entries.clear();  // a damaged cache is tuned over, not an error
  }
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
  // Merge with what other processes wrote since this one loaded, then replace the file whole.
  nlohmann::json j = nlohmann::json::object();
  {
    std::ifstream f(p);
    if (f) {
      try {
        j = nlohmann::json::parse(f);
        if (!j.is_object()) j = nlohmann::json::object();
      } catch (const std::exception&) {
        j = nlohmann::json::object();
      }
    }
  }
  for (const auto& [k, v] : state_->entries) j[k] = v;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(p).parent_path(), ec);
  const std::string tmp = p + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp);
    if (!(f << j.dump(1) << "\n")) {
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, p, ec);
  if (ec) std::filesystem::remove(tmp, ec);
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

#include "profiler/peaks.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>
#include <vector>

#include "backend/cache_file.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/parallel.h"

namespace fusec::profiler {

namespace {

nlohmann::json to_json(const Peaks& p) {
  return {{"device", p.device},
          {"bandwidth_bytes_per_s", p.bandwidth_bytes_per_s},
          {"flops_per_s", p.flops_per_s},
          {"measured_at", p.measured_at},
          {"method", p.method}};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

template <typename F>
double median_seconds(int reps, F&& f) {
  f();  // warm-up: page faults, thread pool start
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  return median(t);
}

}  // namespace

std::string iso_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string peaks_cache_path() { return fusec_cache_path("FUSEC_PEAKS_CACHE", "peaks.json"); }

std::optional<Peaks> load_cached_peaks(const std::string& key) {
  const std::string path = peaks_cache_path();
  if (path.empty()) return std::nullopt;
  try {
    nlohmann::json j = read_json_object(path);
    if (!j.contains(key)) return std::nullopt;
    const auto& e = j.at(key);
    Peaks p;
    p.device = e.at("device").get<std::string>();
    p.bandwidth_bytes_per_s = e.at("bandwidth_bytes_per_s").get<double>();
    p.flops_per_s = e.at("flops_per_s").get<std::map<std::string, double>>();
    p.measured_at = e.at("measured_at").get<std::string>();
    p.method = e.value("method", "");
    if (p.bandwidth_bytes_per_s <= 0 || p.flops_per_s.empty()) return std::nullopt;
    for (const auto& [k, v] : p.flops_per_s)
      if (!(v > 0)) return std::nullopt;
    p.source = "cache";
    p.cache_path = path;
    return p;
  } catch (const std::exception&) {
    return std::nullopt;  // a damaged cache is measured over, not an error
  }
}

bool store_peaks(const std::string& key, const Peaks& peaks, std::string* why) {
  const std::string path = peaks_cache_path();
  if (path.empty()) {
    if (why) *why = "no cache folder (set HOME, XDG_CACHE_HOME or FUSEC_PEAKS_CACHE)";
    return false;
  }
  nlohmann::json j = read_json_object(path);
  j[key] = to_json(peaks);
  return write_json_atomically(path, j, why);
}

Peaks cached_or_measured(const std::string& key, bool remeasure, const std::function<Peaks()>& measure,
                         std::string* warning) {
  if (!remeasure)
    if (auto p = load_cached_peaks(key)) return *p;
  Peaks p = measure();
  p.measured_at = iso_now();
  p.source = "measured";
  std::string why;
  if (store_peaks(key, p, &why)) {
    p.cache_path = peaks_cache_path();
  } else if (warning) {
    *warning = "the measured peaks were not cached: " + why;
  }
  return p;
}

std::string cpu_device_key() {
  std::string model = "unknown CPU";
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) model = line.substr(line.find_first_not_of(" \t", colon + 1));
      break;
    }
  }
  return "cpu: " + model + " x" + std::to_string(cpu::num_threads()) + " threads";
}

Peaks measure_cpu_peaks() {
  Peaks p;
  p.device = cpu_device_key();
  // Bandwidth: large enough to leave every cache behind; split over the pool like the kernels are.
  const size_t bytes = size_t{256} << 20;
  std::unique_ptr<char[]> src(new char[bytes]), dst(new char[bytes]);
  std::memset(src.get(), 1, bytes);
  std::memset(dst.get(), 0, bytes);
  const int64_t chunk = 1 << 20;
  const int64_t chunks = static_cast<int64_t>(bytes / chunk);
  double s = median_seconds(7, [&] {
    cpu::parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
      std::memcpy(dst.get() + b * chunk, src.get() + b * chunk, static_cast<size_t>((e - b) * chunk));
    });
  });
  p.bandwidth_bytes_per_s = 2.0 * static_cast<double>(bytes) / s;
  // GEMM: big enough for the packed kernels to reach their steady state on every thread.
  const int64_t n = 1536;
  std::vector<float> A(static_cast<size_t>(n * n), 0.5f), B(static_cast<size_t>(n * n), 0.25f),
      C(static_cast<size_t>(n * n));
  double g =
      median_seconds(5, [&] { cpu::gemm(false, false, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f, C.data(), n); });
  p.flops_per_s["fp32"] = 2.0 * static_cast<double>(n) * n * n / g;
  p.method = "bandwidth: parallel memcpy of 256 MiB (read + written bytes), median of 7; fp32: fusec's CPU GEMM (" +
             std::string(cpu::gemm_isa_name(cpu::gemm_default_isa())) + ") 1536x1536x1536, median of 5";
  return p;
}

}  // namespace fusec::profiler

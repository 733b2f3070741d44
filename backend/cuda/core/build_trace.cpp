#include "backend/cuda/core/build_trace.h"
#include "ir/switches.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

namespace fusec::cuda {
namespace {

struct Entry {
  std::string phase, kind, what;
  double ms;
};

std::mutex& mu() {
  static std::mutex m;
  return m;
}
std::vector<Entry>& entries() {
  static std::vector<Entry> e;
  return e;
}

// "live": each entry is also printed as it is added, so a build that never ends shows the last
// thing it finished.
bool live() {
  static const bool enabled = [] {
    const char* e = env_switch("FUSEC_BUILD_TRACE");
    return e && std::string(e) == "live";
  }();
  return enabled;
}

}  // namespace

bool BuildTrace::on() {
  static const bool enabled = [] {
    const char* e = env_switch("FUSEC_BUILD_TRACE");
    return e && (std::string(e) == "1" || live());
  }();
  return enabled;
}

void BuildTrace::add(const std::string& phase, const std::string& kind, const std::string& what, double ms) {
  if (!on()) return;
  std::lock_guard<std::mutex> lock(mu());
  entries().push_back({phase, kind, what, ms});
  if (live()) {
    std::fprintf(stderr, "build trace: %9.1f ms  %-18s %-16s %s\n", ms, phase.c_str(), kind.c_str(), what.c_str());
    std::fflush(stderr);
  }
}

void BuildTrace::report() {
  if (!on()) return;
  std::lock_guard<std::mutex> lock(mu());
  auto& es = entries();
  if (es.empty()) return;
  // Phases in first-seen order; within each, op types by total time.
  std::vector<std::string> phases;
  std::map<std::string, std::map<std::string, std::pair<double, int>>> by_kind;
  std::map<std::string, double> phase_ms;
  for (const Entry& e : es) {
    if (!phase_ms.count(e.phase)) phases.push_back(e.phase);
    phase_ms[e.phase] += e.ms;
    auto& k = by_kind[e.phase][e.kind];
    k.first += e.ms;
    k.second += 1;
  }
  std::fprintf(stderr, "build trace (FUSEC_BUILD_TRACE=1; host ms, device synchronized)\n");
  for (const std::string& p : phases) {
    std::fprintf(stderr, "  %-22s %9.1f ms\n", p.c_str(), phase_ms[p]);
    std::vector<std::pair<std::string, std::pair<double, int>>> kinds(by_kind[p].begin(), by_kind[p].end());
    std::sort(kinds.begin(), kinds.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
    for (size_t i = 0; i < kinds.size() && i < 6; ++i)
      std::fprintf(stderr, "    %-20s %9.1f ms  (%d)\n", kinds[i].first.c_str(), kinds[i].second.first,
                   kinds[i].second.second);
  }
  std::vector<const Entry*> slow;
  for (const Entry& e : es) slow.push_back(&e);
  std::sort(slow.begin(), slow.end(), [](const Entry* a, const Entry* b) { return a->ms > b->ms; });
  std::fprintf(stderr, "  slowest:\n");
  for (size_t i = 0; i < slow.size() && i < 12; ++i)
    std::fprintf(stderr, "    %8.1f ms  %-18s %-16s %s\n", slow[i]->ms, slow[i]->phase.c_str(), slow[i]->kind.c_str(),
                 slow[i]->what.c_str());
  es.clear();
}

}  // namespace fusec::cuda

// Measured ceilings and their cache. The first profile on a device measures them (a large copy for
// bandwidth, large GEMMs for FLOP/s) and keeps them in the user's cache folder, keyed by the device,
// so later profiles divide by the same numbers; --remeasure-peaks measures again.
//
//   $FUSEC_PEAKS_CACHE, else $XDG_CACHE_HOME/fusec/peaks.json, else ~/.cache/fusec/peaks.json
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "profiler/profile.h"

namespace fusec::profiler {

std::string peaks_cache_path();
/// The cached peaks of `device_key`, or nullopt (no cache, unreadable, or no entry: never an error).
std::optional<Peaks> load_cached_peaks(const std::string& device_key);
/// Adds or replaces the entry; returns false (and leaves `why`) when the cache cannot be written.
bool store_peaks(const std::string& device_key, const Peaks& peaks, std::string* why);

/// Cached peaks for the key, or `measure()`'s, stored for next time. `source`/`cache_path` are set.
Peaks cached_or_measured(const std::string& device_key, bool remeasure, const std::function<Peaks()>& measure,
                         std::string* warning);

/// The CPU's: a parallel memcpy of 256 MiB and the CPU backend's own fp32 GEMM (1536³), each the
/// median of several timed repetitions after a warm-up.
Peaks measure_cpu_peaks();
/// "cpu: <model name> x<threads> threads": the CPU peaks' cache key.
std::string cpu_device_key();

/// Now, as ISO 8601 UTC ("2026-11-23T04:59:01Z").
std::string iso_now();

}  // namespace fusec::profiler

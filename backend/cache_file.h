// The user's cache folder and the files fusec keeps there (measured peaks, tuning choices, compiled
// kernels): read leniently (a missing, damaged or oversized file is an empty cache, rebuilt, never
// an error) and written whole through the one writer (importer/output_file.h, as a cache: a
// temporary renamed into place, so a reader in another process never sees half a file; a device
// named as the cache is written in place, never replaced).
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ir/switches.h"

namespace fusec {

/// $`env_override` (a switch of ir/switches.h), else $XDG_CACHE_HOME/fusec/`name`, else
/// ~/.cache/fusec/`name`; "" when none is set.
std::string fusec_cache_path(SwitchName env_override, const std::string& name);
/// The bytes of the cache file `path`, or nothing (missing, unreadable, not a regular file, or
/// more than `max_bytes`).
std::optional<std::string> read_cache_file(const std::string& path, uint64_t max_bytes);
/// Writes `bytes` to the cache file `path`, creating its folder; false, with `why`, when it cannot.
bool write_cache_file(const std::string& path, const std::string& bytes, std::string* why);
/// The JSON object in `path`, or {} (missing, unreadable, damaged, not an object).
nlohmann::json read_json_object(const std::string& path);
/// write_cache_file of `j`'s text.
bool write_json_atomically(const std::string& path, const nlohmann::json& j, std::string* why);

}  // namespace fusec

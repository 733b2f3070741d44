// The user's cache folder and the JSON files fusec keeps there (measured peaks, tuning choices):
// read leniently (a missing or damaged file is an empty cache, rebuilt, never an error) and written
// whole through a rename, so a reader in another process never sees half a file.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace fusec {

/// $`env_override`, else $XDG_CACHE_HOME/fusec/`name`, else ~/.cache/fusec/`name`; "" when none is set.
std::string fusec_cache_path(const char* env_override, const std::string& name);
/// The JSON object in `path`, or {} (missing, unreadable, damaged, not an object).
nlohmann::json read_json_object(const std::string& path);
/// Writes `j` to a temporary file beside `path` and renames it over `path`, creating the folder;
/// false, with `why`, when it cannot.
bool write_json_atomically(const std::string& path, const nlohmann::json& j, std::string* why);

}  // namespace fusec

#include "backend/cache_file.h"

#include <cstdlib>

#include "importer/input_file.h"
#include "importer/output_file.h"
#include "ir/error.h"
#include "ir/json_text.h"

namespace fusec {

std::string fusec_cache_path(SwitchName env_override, const std::string& name) {
  if (const char* p = env_switch(env_override); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/fusec/" + name;
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/fusec/" + name;
  return "";
}

std::optional<std::string> read_cache_file(const std::string& path, uint64_t max_bytes) {
  try {
    InputFile in(path, {"a cache", /*note=*/false});
    if (!in.sized()) return std::nullopt;  // a cache is a regular file; anything else is no cache
    return in.read_all(max_bytes, "the cache's size limit");
  } catch (const Error&) {
    return std::nullopt;
  }
}

bool write_cache_file(const std::string& path, const std::string& bytes, std::string* why) {
  try {
    write_output_file(path, bytes, {"the cache", /*user_named=*/true, /*cache=*/true});
    return true;
  } catch (const Error& e) {
    if (why) *why = e.what();
    return false;
  }
}

nlohmann::json read_json_object(const std::string& path) {
  // A cache holds a few KiB; more than 16 MiB is damaged, not read on.
  const std::optional<std::string> text = read_cache_file(path, uint64_t{16} << 20);
  if (!text) return nlohmann::json::object();
  auto j = try_parse_json(*text);  // too deep or out of range: damaged like any other bad JSON
  return j && j->is_object() ? std::move(*j) : nlohmann::json::object();
}

bool write_json_atomically(const std::string& path, const nlohmann::json& j, std::string* why) {
  return write_cache_file(path, json_text(j, 1) + "\n", why);
}

}  // namespace fusec

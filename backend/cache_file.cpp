#include "backend/cache_file.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "ir/json_text.h"

namespace fusec {

std::string fusec_cache_path(const char* env_override, const std::string& name) {
  if (const char* p = std::getenv(env_override); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/fusec/" + name;
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/fusec/" + name;
  return "";
}

nlohmann::json read_json_object(const std::string& path) {
  std::ifstream f(path);
  if (!f) return nlohmann::json::object();
  // A cache holds a few KiB; more than 16 MiB (or an endless device) is damaged, not read on.
  constexpr size_t kMaxBytes = 16 << 20;
  std::string text;
  char buf[1 << 16];
  while (f.read(buf, sizeof buf) || f.gcount() > 0) {
    text.append(buf, static_cast<size_t>(f.gcount()));
    if (text.size() > kMaxBytes) return nlohmann::json::object();
  }
  auto j = try_parse_json(text);  // too deep or out of range: damaged like any other bad JSON
  return j && j->is_object() ? std::move(*j) : nlohmann::json::object();
}

bool write_json_atomically(const std::string& path, const nlohmann::json& j, std::string* why) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp);
    if (!(f << json_text(j, 1) << "\n")) {
      if (why) *why = "cannot write " + path;
      std::filesystem::remove(tmp, ec);
      return false;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    if (why) *why = "cannot write " + path + ": " + ec.message();
    std::filesystem::remove(tmp, ec);
    return false;
  }
  return true;
}

}  // namespace fusec

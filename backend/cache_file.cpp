#include "backend/cache_file.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

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
  try {
    nlohmann::json j = nlohmann::json::parse(f);
    return j.is_object() ? j : nlohmann::json::object();
  } catch (const std::exception&) {
    return nlohmann::json::object();
  }
}

bool write_json_atomically(const std::string& path, const nlohmann::json& j, std::string* why) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp);
    if (!(f << j.dump(1) << "\n")) {
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

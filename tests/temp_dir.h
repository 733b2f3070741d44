// A fresh, empty folder for one test's files: /tmp/fusec_test_NAME_PID (so tests that ctest runs
// in parallel, each in its own process, never share one).
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

namespace fusec::test {

inline std::filesystem::path temp_dir(const std::string& name) {
  std::filesystem::path d =
      std::filesystem::temp_directory_path() / ("fusec_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace fusec::test

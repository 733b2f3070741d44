#include "ir/memory_limit.h"

#include <malloc.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "ir/error.h"

namespace fusec {

std::string format_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024 && u < 6) {
    b /= 1024;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

void MemoryBudget::check(size_t bytes, const std::string& what) const {
  const size_t lim = limit(), in_use = used();
  if (bytes <= lim && in_use <= lim - bytes) return;
  std::string msg = what + " needs " + format_bytes(static_cast<double>(bytes)) + ", but the " + name_ +
                    " memory limit is " + format_bytes(static_cast<double>(lim));
  if (in_use) msg += " with " + format_bytes(static_cast<double>(in_use)) + " in use";
  bad_input(msg + " (--max-memory)");
}

bool MemoryBudget::try_reserve(size_t bytes) {
  const size_t lim = limit();
  size_t cur = used_.load();
  do {
    if (bytes > lim || cur > lim - bytes) return false;
  } while (!used_.compare_exchange_weak(cur, cur + bytes));
  return true;
}

void MemoryBudget::reserve(size_t bytes, const std::string& what) {
  while (!try_reserve(bytes)) check(bytes, what);  // check() throws unless memory was freed meanwhile
}

void MemoryBudget::release(size_t bytes) { used_.fetch_sub(bytes); }

void keep_freed_memory_for_reuse() {
  // glibc's ceiling for the mmap threshold on 64-bit systems; above it, blocks stay mapped per use.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

size_t available_host_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : SIZE_MAX;
}

MemoryBudget& host_memory() {
  static MemoryBudget budget("host", available_host_memory());
  return budget;
}

void check_allocation(size_t bytes, const std::string& what) { host_memory().check(bytes, what); }

size_t parse_byte_size(const std::string& text, const std::string& flag) {
  auto fail = [&] { bad_input(flag + " '" + text + "' is not a size (examples: 512M, 8G, 1.5GiB, 1073741824)"); };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0 || i > 24) fail();
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(text.substr(0, i), &used);
    if (used != i) fail();
  } catch (const std::exception&) {
    fail();
  }
  std::string unit = text.substr(i);
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();   // "GB", "GIB" -> "G", "GI"
  if (unit.size() == 2 && unit.back() == 'I') unit.pop_back();  // binary units either way
  double scale = 1;
  if (unit == "" || unit == "B")
    scale = 1;
  else if (unit == "K")
    scale = 1024.0;
  else if (unit == "M")
    scale = 1024.0 * 1024;
  else if (unit == "G")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "T")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else
    fail();
  const double bytes = value * scale;
  if (!(bytes >= 1) || bytes >= 1.8e19) fail();
  return static_cast<size_t>(bytes);
}

}  // namespace fusec

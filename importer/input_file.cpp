#include "importer/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "importer/file_claims.h"
#include "ir/error.h"
#include "ir/memory_limit.h"

namespace fusec {

namespace fs = std::filesystem;

std::string quoted_path(const std::filesystem::path& p) {
  // Built piece by piece: GCC 12 warns (falsely, -Wrestrict) on `"'" + std::string`.
  std::string s = "'";
  s += p.string();
  s += "'";
  return s;
}

InputFile::InputFile(fs::path path, const InputOptions& opts) : path_(std::move(path)) {
  const std::string p = path_.string();
  if (p.empty()) bad_input("an input file's path is empty");
  // Examined before it is opened: opening a device can itself do something (a tape rewinds).
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    if (errno == ENOENT) bad_input("'" + p + "' does not exist");
    bad_input("cannot open '" + p + "': " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) bad_input("'" + p + "' is a directory, not a file");
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) bad_input("'" + p + "' is a device, not a file");
  // O_NONBLOCK: a FIFO nobody writes to reads as empty instead of waiting forever.
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd_ < 0) bad_input("cannot open '" + p + "': " + std::strerror(errno));
  if (::fstat(fd_, &st) != 0 || S_ISDIR(st.st_mode) || S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
    ::close(fd_);
    bad_input("'" + p + "' changed while fusec opened it");
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  sized_ = S_ISREG(st.st_mode) && st.st_size > 0;
  size_ = sized_ ? static_cast<uint64_t>(st.st_size) : 0;
  if (opts.note)
    if (CommandFiles* c = CommandFiles::current()) {
      FileKey k = file_key(path_);
      k.exists = true;  // the file open now, whatever the path names by the time it is compared
      k.dev = st.st_dev;
      k.ino = st.st_ino;
      c->note_input(k, p, opts.what);
    }
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::read_at(void* dst, size_t n, uint64_t offset) {
  char* out = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd_, out, std::min<size_t>(n, size_t{1} << 30), static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) bad_input("cannot read '" + path_.string() + "': " + std::strerror(errno));
    if (r == 0)
      bad_input(quoted_path(path_) + " ends at byte " + std::to_string(offset) + ", before the " + std::to_string(n) +
                " more bytes fusec expected (was it truncated?)");
    out += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

size_t InputFile::read_next(void* dst, size_t n) {
  char* out = static_cast<char*>(dst);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd_, out + got, std::min<size_t>(n - got, size_t{1} << 30));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) bad_input("cannot read '" + path_.string() + "': " + std::strerror(errno));
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  pos_ += got;
  return got;
}

void InputFile::expect_end(const std::string& what_ended) {
  char c;
  if (read_next(&c, 1) != 0) bad_input(quoted_path(path_) + " has more bytes after " + what_ended);
}

std::string InputFile::read_all(uint64_t max_bytes, const std::string& limit_name) {
  const MemoryBudget& mem = host_memory();
  const uint64_t budget_left = mem.limit() > mem.used() ? mem.limit() - mem.used() : 0;
  const uint64_t bound = std::min({max_bytes, budget_left, kNoFileLimit - 1});  // bound + 1 must not wrap
  const std::string why = bound == max_bytes
                              ? limit_name
                              : "the " + format_bytes(static_cast<double>(mem.limit())) + " host memory limit with " +
                                    format_bytes(static_cast<double>(mem.used())) + " in use (--max-memory)";
  if (sized_) {
    const uint64_t rest = size_ > pos_ ? size_ - pos_ : 0;
    if (rest > bound)
      bad_input(quoted_path(path_) + " holds " + format_bytes(static_cast<double>(rest)) + ", more than " + why);
    std::string out(static_cast<size_t>(rest), '\0');
    read_at(out.data(), out.size(), pos_);
    pos_ += rest;
    return out;
  }
  // A stream: read in growing chunks, and never more than one byte past the bound.
  std::string out;
  size_t chunk = size_t{1} << 16;
  for (;;) {
    const size_t old = out.size();
    const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk, bound + 1 - old));
    out.resize(old + want);
    const size_t got = read_next(out.data() + old, want);
    out.resize(old + got);
    if (out.size() > bound) bad_input(quoted_path(path_) + " is not a regular file and gives more than " + why);
    if (got < want) return out;
    chunk = std::min<size_t>(chunk * 2, size_t{64} << 20);
  }
}

std::string read_input_file(const fs::path& path, uint64_t max_bytes, const std::string& limit_name,
                            const InputOptions& opts) {
  return InputFile(path, opts).read_all(max_bytes, limit_name);
}

}  // namespace fusec

#include "importer/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "ir/error.h"

namespace fusec {

namespace fs = std::filesystem;

AtomicFile::AtomicFile(fs::path dest) : dest_(std::move(dest)) {
  static std::atomic<int> counter{0};
  const fs::path dir = dest_.parent_path().empty() ? fs::path(".") : dest_.parent_path();
  // Appended piece by piece: GCC 12 warns (falsely, -Wrestrict) on `"." + std::string`.
  std::string name = ".";
  name += dest_.filename().string();
  name += ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  tmp_ = dir / name;
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) bad_input("cannot write '" + dest_.string() + "': " + std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) {
    std::error_code ec;
    fs::remove(tmp_, ec);
  }
}

void AtomicFile::fail(const std::string& what) const {
  bad_input("failed writing '" + dest_.string() + "': " + what);
}

void AtomicFile::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, std::min<size_t>(bytes, size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(std::strerror(errno));
    p += n;
    bytes -= static_cast<size_t>(n);
    size_ += static_cast<uint64_t>(n);
  }
}

void AtomicFile::pad_to(uint64_t alignment) {
  const uint64_t target = (size_ + alignment - 1) / alignment * alignment;
  if (target == size_) return;
  std::vector<char> zeros(static_cast<size_t>(target - size_), '\0');
  write(zeros.data(), zeros.size());
}

void AtomicFile::copy_from(int src_fd, uint64_t offset, size_t bytes) {
  auto in = static_cast<off64_t>(offset);
  while (bytes > 0) {
    const ssize_t n = ::copy_file_range(src_fd, &in, fd_, nullptr, bytes, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP || errno == EINVAL)) {
      // Not supported between these files: read and write through a bounded buffer.
      std::vector<char> buf(std::min<size_t>(bytes, size_t{8} << 20));
      while (bytes > 0) {
        const ssize_t r = ::pread(src_fd, buf.data(), std::min(bytes, buf.size()), in);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) fail("cannot read the source data");
        write(buf.data(), static_cast<size_t>(r));
        in += r;
        bytes -= static_cast<size_t>(r);
      }
      return;
    }
    if (n <= 0) fail(n == 0 ? "the source data ended early" : std::strerror(errno));
    bytes -= static_cast<size_t>(n);
    size_ += static_cast<uint64_t>(n);
  }
}

void AtomicFile::commit() {
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail(std::strerror(errno));
  }
  fd_ = -1;
  std::error_code ec;
  fs::rename(tmp_, dest_, ec);
  if (ec) fail(ec.message());
  committed_ = true;
}

void write_file_atomically(const fs::path& dest, const std::string& text) {
  AtomicFile f(dest);
  f.write(text.data(), text.size());
  f.commit();
}

}  // namespace fusec

#include "importer/scratch_weights.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "importer/mapped_file.h"

namespace fusec {

namespace {

uint64_t page_size() {
  static const uint64_t p = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return p;
}

bool pwrite_all(int fd, const char* p, size_t n, uint64_t at) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(at));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    at += static_cast<uint64_t>(w);
    n -= static_cast<size_t>(w);
  }
  return true;
}

/// Writes a weight's runs into the scratch file from `at` on. Large runs of mapped files are
/// copied in the kernel (copy_file_range); small ones (a concatenation's row pieces, thousands of
/// a few KiB each, where one copy_file_range call each was several times slower: benchmarks.md,
/// scale) are gathered through a bounded buffer by pread, not through the source's map, whose
/// pages would then count against this process, and written out in large pieces.
class RunWriter {
 public:
  RunWriter(int fd, uint64_t at) : fd_(fd), at_(at) { buf_.reserve(kBuffer); }
  /// False (errno set) where the run could not be read or written.
  bool put(const ByteRun& r) {
    if (!r.src) return fill(nullptr, -1, 0, r.bytes);
    auto range = find_mapped_range(r.src, r.bytes);
    if (range && r.bytes >= kKernelCopy) return flush() && kernel_copy(range->file->fd(), range->offset, r.bytes);
    return range ? fill(nullptr, range->file->fd(), range->offset, r.bytes)
                 : fill(static_cast<const char*>(r.src), -1, 0, r.bytes);
  }
  bool flush() {
    if (buf_.empty()) return true;
    const bool ok = pwrite_all(fd_, buf_.data(), buf_.size(), at_);
    at_ += buf_.size();
    buf_.clear();
    return ok;
  }

 private:
  static constexpr size_t kBuffer = size_t{4} << 20;
  static constexpr size_t kKernelCopy = size_t{1} << 20;

  /// Appends `n` bytes to the buffer: from memory at `mem`, from `src_fd` at `off`, or zeros.
  bool fill(const char* mem, int src_fd, uint64_t off, size_t n) {
    while (n > 0) {
      if (buf_.size() == kBuffer && !flush()) return false;
      const size_t k = std::min(n, kBuffer - buf_.size());
      const size_t old = buf_.size();
      buf_.resize(old + k);
      if (mem) {
        std::memcpy(buf_.data() + old, mem, k);
        mem += k;
      } else if (src_fd >= 0) {
        size_t got = 0;
        while (got < k) {
          const ssize_t r = ::pread(src_fd, buf_.data() + old + got, k - got, static_cast<off_t>(off + got));
          if (r < 0 && errno == EINTR) continue;
          if (r <= 0) {
            if (r == 0) errno = EIO;  // the source ended early
            return false;
          }
          got += static_cast<size_t>(r);
        }
        off += k;
      } else {
        std::memset(buf_.data() + old, 0, k);
      }
      n -= k;
    }
    return true;
  }
  bool kernel_copy(int src_fd, uint64_t off, size_t n) {
    auto in = static_cast<off64_t>(off);
    auto out = static_cast<off64_t>(at_);
    while (n > 0) {
      const ssize_t c = ::copy_file_range(src_fd, &in, fd_, &out, n, 0);
      if (c < 0 && errno == EINTR) continue;
      if (c <= 0) {
        if (c < 0 && errno != EXDEV && errno != ENOSYS && errno != EOPNOTSUPP && errno != EINVAL) return false;
        at_ = static_cast<uint64_t>(out);  // not between these files: through the buffer
        return fill(nullptr, src_fd, static_cast<uint64_t>(in), n) && flush();
      }
      n -= static_cast<size_t>(c);
    }
    at_ = static_cast<uint64_t>(out);
    return true;
  }

  int fd_;
  uint64_t at_;
  std::vector<char> buf_;
};

}  // namespace

ScratchWeightFile::ScratchWeightFile(std::filesystem::path dir, size_t min_bytes, Warn warn)
    : dir_(std::move(dir)), min_bytes_(min_bytes), warn_(std::move(warn)) {}

void ScratchWeightFile::give_up(const char* what) {
  const std::string why = std::strerror(errno);
  unusable_ = true;
  if (warn_)
    warn_(std::string("weights derived by passes are built in memory: cannot ") + what + " a scratch file in '" +
          dir_.string() + "' (" + why + ")");
}

bool ScratchWeightFile::open_file() {
  if (fd_) return true;
  int fd = ::open(dir_.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {  // a filesystem without O_TMPFILE: a named file, unlinked at once
    std::string name = (dir_ / "fusec-weights-XXXXXX").string();
    fd = ::mkostemp(name.data(), O_CLOEXEC);
    if (fd >= 0) ::unlink(name.c_str());
  }
  if (fd < 0) {
    give_up("make");
    return false;
  }
  fd_ = std::shared_ptr<const int>(new int(fd), [](const int* p) {
    ::close(*p);
    delete p;
  });
  return true;
}

Tensor ScratchWeightFile::make(DType dtype, const std::vector<int64_t>& dims, const std::vector<ByteRun>& runs) {
  size_t total = 0;
  for (const ByteRun& r : runs) total += r.bytes;
  if (total < min_bytes_) return {};
  std::lock_guard<std::mutex> lock(mu_);
  if (unusable_ || !open_file()) return {};
  const uint64_t start = (end_ + page_size() - 1) / page_size() * page_size();
  const int fd = *fd_;
  bool ok = ::ftruncate(fd, static_cast<off_t>(start + total)) == 0;
  RunWriter w(fd, start);
  for (size_t i = 0; ok && i < runs.size(); ++i) ok = w.put(runs[i]);
  ok = ok && w.flush();
  std::shared_ptr<MappedFile> map =
      ok ? MappedFile::map_scratch(fd_, start, total, "fusec's scratch file for derived weights in " + dir_.string())
         : nullptr;
  if (!map) {  // a full disk, a map refused: memory from now on, and the space given back
    give_up(ok ? "map" : "write");
    if (::ftruncate(fd, static_cast<off_t>(end_)) != 0) {
      // the file is unused from now on and goes with the process
    }
    return {};
  }
  end_ = start + total;
  stored_ += total;
  return Tensor::view(dtype, dims, const_cast<char*>(map->data()), map);
}

void use_scratch_weights(const std::filesystem::path& dir, ScratchWeightFile::Warn warn) {
  std::filesystem::path d = dir;
  if (d.empty()) {
    std::error_code ec;
    d = std::filesystem::temp_directory_path(ec);
    if (ec) d = "/tmp";
  }
  set_derived_weight_store(std::make_shared<ScratchWeightFile>(d, size_t{1} << 20, std::move(warn)));
}

}  // namespace fusec

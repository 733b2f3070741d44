#include "importer/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "importer/file_claims.h"
#include "importer/mapped_file.h"
#include "importer/signal_cleanup.h"
#include "ir/error.h"

namespace fusec {

namespace fs = std::filesystem;

namespace {

/// The real stdout: 1, or a copy of it once claim_output moved the human output to stderr.
std::atomic<int> g_stdout_fd{1};

[[noreturn]] void cannot_write(const fs::path& dest, const std::string& why) {
  bad_input("cannot write '" + dest.string() + "': " + why);
}

/// Where the bytes for `dest` go, decided once from what is there now (see the table in the header).
struct Destination {
  enum Kind { Descriptor, InPlace, Replace } kind = Replace;
  int descriptor = -1;  // Descriptor: the fd the path names
  fs::path path;        // InPlace: what is opened; Replace: what the rename replaces
  FileKey key;          // for the claims
  bool replaces_file = false;
  mode_t mode = 0;  // Replace over a file: its permission bits, kept
};

Destination resolve(const fs::path& dest, const OutputOptions& o) {
  Destination d;
  const std::string s = dest.string();
  if (s.empty()) bad_input(o.what + ": the output path is empty");
  if (const int n = named_descriptor(s); n >= 0) {
    d.kind = Destination::Descriptor;
    d.descriptor = n;
    d.key = file_key(dest);
    const int flags = ::fcntl(n == 1 ? g_stdout_fd.load() : n, F_GETFL);
    if (flags < 0) cannot_write(dest, "descriptor " + std::to_string(n) + " is not open");
    if ((flags & O_ACCMODE) == O_RDONLY)
      cannot_write(dest, "descriptor " + std::to_string(n) + " is open only for reading");
    return d;
  }
  struct stat st {};
  if (::lstat(dest.c_str(), &st) != 0) {
    if (errno != ENOENT) cannot_write(dest, std::strerror(errno));
    // Nothing there yet: its folder must be.
    const fs::path dir = dest.parent_path().empty() ? fs::path(".") : dest.parent_path();
    if (o.cache) {
      std::error_code ec;
      fs::create_directories(dir, ec);
    }
    struct stat ds {};
    if (::stat(dir.c_str(), &ds) != 0) cannot_write(dest, "folder '" + dir.string() + "': " + std::strerror(errno));
    if (!S_ISDIR(ds.st_mode)) cannot_write(dest, "'" + dir.string() + "' is not a folder");
    d.path = dest;
    d.key = file_key(dest, /*follow_final_link=*/false);
    return d;
  }
  if (S_ISLNK(st.st_mode)) {
    if (!o.user_named) {  // a link fusec did not name: replaced, never followed
      d.path = dest;
      d.key = file_key(dest, /*follow_final_link=*/false);
      return d;
    }
    if (::stat(dest.c_str(), &st) != 0)
      cannot_write(dest, errno == ENOENT ? "it is a symlink to a file that does not exist" : std::strerror(errno));
    if (S_ISREG(st.st_mode)) {  // the user named a link to a file: the file is replaced, the link stays
      char* real = ::realpath(dest.c_str(), nullptr);
      if (!real) cannot_write(dest, std::strerror(errno));
      d.path = real;
      std::free(real);
      d.replaces_file = true;
      d.mode = st.st_mode & 07777;
      d.key = file_key(d.path);
      return d;
    }
  }
  if (S_ISDIR(st.st_mode)) cannot_write(dest, "it is a folder");
  if (S_ISREG(st.st_mode)) {
    d.path = dest;
    d.replaces_file = true;
    d.mode = st.st_mode & 07777;
    d.key = file_key(dest, /*follow_final_link=*/false);
    return d;
  }
  d.kind = Destination::InPlace;  // a device, FIFO or socket (or a named link to one)
  d.path = dest;
  d.key = file_key(dest);
  return d;
}

void claim(const Destination& d, const fs::path& dest, const OutputOptions& o, bool writing) {
  if (CommandFiles* c = CommandFiles::current()) c->claim_output(d.key, dest.string(), o.what, writing, o.cache);
}

}  // namespace

int stdout_descriptor() { return g_stdout_fd.load(); }

bool is_regular_output(const std::string& dest) {
  struct stat st {};
  return named_descriptor(dest) < 0 && ::stat(dest.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

void claim_output(const std::string& dest, const std::string& what, bool user_named) {
  if (dest.empty()) return;
  OutputOptions o;
  o.what = what;
  o.user_named = user_named;
  const Destination d = resolve(dest, o);
  claim(d, dest, o, /*writing=*/false);
  if (d.kind == Destination::Descriptor && d.descriptor == 1 && g_stdout_fd.load() == 1) {
    // stdout carries this output: the tables and messages meant for a person go to stderr.
    std::fflush(stdout);
    const int saved = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
    if (saved >= 0 && ::dup2(2, 1) >= 0) g_stdout_fd.store(saved);
  }
}

OutputFile::OutputFile(fs::path dest, OutputOptions opts) : dest_(std::move(dest)), opts_(std::move(opts)) {
  const Destination d = resolve(dest_, opts_);
  claim(d, dest_, opts_, /*writing=*/true);
  if (d.kind == Destination::Descriptor) {
    const int n = d.descriptor == 1 ? g_stdout_fd.load() : d.descriptor;
    if (n == 1) std::fflush(stdout);
    fd_ = ::fcntl(n, F_DUPFD_CLOEXEC, 3);
    if (fd_ < 0) cannot_write(dest_, std::strerror(errno));
    return;
  }
  if (d.kind == Destination::InPlace) {
    // O_NONBLOCK: opening a FIFO that nobody reads fails (ENXIO) instead of waiting forever.
    fd_ = ::open(d.path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC | O_NONBLOCK | (opts_.user_named ? 0 : O_NOFOLLOW));
    if (fd_ < 0)
      cannot_write(dest_,
                   errno == ENXIO ? "it is a FIFO (or socket) that no process is reading" : std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) {
      ::close(fd_);
      cannot_write(dest_, "it changed while fusec opened it");
    }
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
    return;
  }
  static std::atomic<unsigned> counter{0};
  target_ = d.path;
  const fs::path dir = target_.parent_path().empty() ? fs::path(".") : target_.parent_path();
  // "." + name + ".tmp-PID-N", the name cut so the whole stays within NAME_MAX.
  const std::string name = target_.filename().string().substr(0, 200);
  for (int attempt = 0; fd_ < 0; ++attempt) {
    std::string tmp_name = ".";
    tmp_name += name;  // appended piece by piece: GCC 12 warns (falsely, -Wrestrict) on `"." + std::string`
    tmp_name += ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    tmp_ = dir / tmp_name;
    tmp_guard_ = std::make_unique<TempPathGuard>(tmp_.string());  // before it exists: no window for a signal
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && (errno != EEXIST || attempt > 100)) {
      const int err = errno;
      tmp_guard_.reset();
      cannot_write(dest_, std::strerror(err));
    }
  }
  if (d.replaces_file) ::fchmod(fd_, d.mode);
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && tmp_guard_) ::unlink(tmp_.c_str());
}

void OutputFile::fail(const std::string& what) const { bad_input("failed writing '" + dest_.string() + "': " + what); }

void OutputFile::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, std::min<size_t>(bytes, size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(n == 0 ? "nothing was written" : std::strerror(errno));
    p += n;
    bytes -= static_cast<size_t>(n);
    size_ += static_cast<uint64_t>(n);
  }
}

void OutputFile::pad_to(uint64_t alignment) {
  const uint64_t target = (size_ + alignment - 1) / alignment * alignment;
  if (target == size_) return;
  std::vector<char> zeros(static_cast<size_t>(target - size_), '\0');
  write(zeros.data(), zeros.size());
}

void OutputFile::copy_from(int src_fd, uint64_t offset, size_t bytes) {
  auto in = static_cast<off64_t>(offset);
  while (bytes > 0) {
    const ssize_t n = ::copy_file_range(src_fd, &in, fd_, nullptr, bytes, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP || errno == EINVAL || errno == EBADF ||
                  errno == ESPIPE)) {
      // Not supported between these files (or into a device, a pipe, an append-only stdout): read
      // and write through a bounded buffer.
      std::vector<char> buf(std::min<size_t>(bytes, size_t{8} << 20));
      while (bytes > 0) {
        const ssize_t r = ::pread(src_fd, buf.data(), std::min(bytes, buf.size()), in);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
          fail(r == 0 ? "the source data ended early"
                      : std::string("cannot read the source data: ") + std::strerror(errno));
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

void OutputFile::commit() {
  // Results computed from weights that changed under their map are not trustworthy.
  if (!opts_.cache) check_mapped_files_unchanged();
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail(std::strerror(errno));
  if (tmp_guard_ && ::rename(tmp_.c_str(), target_.c_str()) != 0) fail(std::strerror(errno));
  committed_ = true;
}

void write_output_file(const fs::path& dest, std::string_view text, const OutputOptions& opts) {
  OutputFile f(dest, opts);
  f.write(text);
  f.commit();
}

}  // namespace fusec

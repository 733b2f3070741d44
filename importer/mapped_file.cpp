#include "importer/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "importer/input_file.h"
#include "importer/signal_cleanup.h"
#include "ir/error.h"

namespace fusec {

namespace {

/// Live maps by start address, for find_mapped_range. Weak: a map goes when its last tensor does.
struct Registry {
  std::mutex mu;
  std::map<const char*, std::weak_ptr<MappedFile>> by_start;
};
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

std::shared_ptr<MappedFile> MappedFile::open(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) bad_input("cannot open '" + file.string() + "': " + std::strerror(errno));
  auto m = map(fd, file);
  ::close(fd);
  return m;
}

std::shared_ptr<MappedFile> MappedFile::map(int fd_in, const std::filesystem::path& file) {
  struct stat st {};
  if (::fstat(fd_in, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) return nullptr;
  const int fd = ::fcntl(fd_in, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return nullptr;
  auto m = map_bytes(fd, 0, static_cast<size_t>(st.st_size), MAP_PRIVATE, file);
  if (!m) {
    ::close(fd);
    return nullptr;
  }
  m->mtime_ns_ = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  enroll(m);
  return m;
}

std::shared_ptr<MappedFile> MappedFile::map_scratch(std::shared_ptr<const int> fd, uint64_t offset, size_t size,
                                                    const std::string& what) {
  if (size == 0 || !fd) return nullptr;
  auto m = map_bytes(*fd, offset, size, MAP_SHARED, what);
  if (!m) return nullptr;
  m->fd_owner_ = std::move(fd);
  m->scratch_ = true;
  enroll(m);
  return m;
}

std::shared_ptr<MappedFile> MappedFile::map_bytes(int fd, uint64_t offset, size_t size, int flags,
                                                  const std::filesystem::path& path) {
  void* base = ::mmap(nullptr, size, PROT_READ, flags, fd, static_cast<off_t>(offset));
  if (base == MAP_FAILED) return nullptr;
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->base_ = base;
  m->size_ = size;
  m->file_offset_ = offset;
  m->fd_ = fd;
  m->path_ = path;
  return m;
}

void MappedFile::enroll(const std::shared_ptr<MappedFile>& m) {
  m->sigbus_handle_ = register_mapped_range(m->base_, m->size_, m->path_.string());
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.by_start[m->data()] = m;
}

void check_mapped_files_unchanged() {
  std::vector<std::shared_ptr<MappedFile>> live;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (auto& [start, weak] : r.by_start)
      if (auto m = weak.lock()) live.push_back(std::move(m));
  }
  for (const auto& m : live) {
    if (m->scratch_) continue;  // fusec's own, and growing
    struct stat st {};
    if (::fstat(m->fd_, &st) != 0) continue;
    const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    if (static_cast<uint64_t>(st.st_size) != m->size_ || mtime != m->mtime_ns_)
      bad_input(quoted_path(m->path_) +
                " changed while fusec was reading it (another program wrote to it); "
                "results computed from it would mix old and new bytes, so none were written");
  }
}

MappedFile::~MappedFile() {
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.by_start.find(data());
    if (it != r.by_start.end() && it->second.expired()) r.by_start.erase(it);
  }
  unregister_mapped_range(sigbus_handle_);
  ::munmap(base_, size_);
  if (!fd_owner_) ::close(fd_);
}

std::optional<MappedRange> find_mapped_range(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_start.upper_bound(c);
  if (it == r.by_start.begin()) return std::nullopt;
  --it;
  std::shared_ptr<MappedFile> m = it->second.lock();
  if (!m || c < m->data() || bytes > m->size() || static_cast<size_t>(c - m->data()) > m->size() - bytes)
    return std::nullopt;
  return MappedRange{m, m->file_offset() + static_cast<uint64_t>(c - m->data())};
}

std::shared_ptr<MappedFile> MappedFiles::get(const std::filesystem::path& file) {
  auto it = open_.find(file);
  if (it != open_.end()) return it->second;
  return open_[file] = MappedFile::open(file);
}

}  // namespace fusec

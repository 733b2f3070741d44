// Output files written whole or not at all: bytes go to a temporary file in the destination's
// folder (same filesystem), renamed over the destination only once everything is written. An
// interrupted or failed run leaves the previous file untouched (and no truncated one), and a file
// fusec has memory-mapped (an input's external data) keeps its inode, so its maps stay valid.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

namespace fusec {

class AtomicFile {
 public:
  /// Creates "<dir>/.<name>.tmp-<pid>-<n>"; BadInput naming `dest` if it cannot.
  explicit AtomicFile(std::filesystem::path dest);
  /// Removes the temporary file unless commit() succeeded.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  int fd() const { return fd_; }
  const std::filesystem::path& dest() const { return dest_; }
  /// Bytes written so far (the next write's offset).
  uint64_t size() const { return size_; }

  void write(const void* data, size_t bytes);
  /// Zero bytes up to the next multiple of `alignment`.
  void pad_to(uint64_t alignment);
  /// Appends `bytes` bytes at `offset` of the file open as `src_fd`, in the kernel
  /// (copy_file_range: no copy through this process's memory, a reflink where the filesystem can).
  void copy_from(int src_fd, uint64_t offset, size_t bytes);
  /// Closes and renames the temporary file over the destination.
  void commit();

 private:
  [[noreturn]] void fail(const std::string& what) const;
  std::filesystem::path dest_, tmp_;
  int fd_ = -1;
  uint64_t size_ = 0;
  bool committed_ = false;
};

/// Writes `text` to `dest` through an AtomicFile.
void write_file_atomically(const std::filesystem::path& dest, const std::string& text);

}  // namespace fusec

// The one way fusec reads a file it is given: models, external data, .npy and .pb tensors, reports,
// project files, caches. Every read is bounded and every failure is one BadInput (exit 2) naming
// the file:
//   - a folder, a device (/dev/zero, /dev/urandom, a terminal) or a missing file is refused when
//     opened; a FIFO, pipe or socket (/dev/stdin, `<(...)`) is read, but never past a bound;
//   - a whole-file read is bounded by the caller's limit (protobuf's 2 GiB for a model) and by
//     the host memory budget (--max-memory) before anything is allocated; a regular file is
//     measured first, a stream is refused as soon as it passes the bound;
//   - readers of formats that declare sizes (.npy, TensorProto, external data) compare the
//     declaration with the bytes the file really holds before they allocate (size(), or
//     read_next() for a stream);
//   - a read error (EIO) or a file that ends early is an error, never a short tensor;
//   - the file is noted as an input of the command (importer/file_claims.h), so no output of the
//     same command can replace it.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

namespace fusec {

struct InputOptions {
  /// What the file is to the command, for collision errors ("the input model", "--input x").
  std::string what = "an input";
  /// Note it as an input of the command (false for caches fusec rewrites).
  bool note = true;
};

class InputFile {
 public:
  /// Opens `path` for reading; BadInput naming it if it does not exist, is a folder or a device,
  /// or cannot be opened.
  explicit InputFile(std::filesystem::path path, const InputOptions& opts = {});
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  int fd() const { return fd_; }
  /// A regular file whose size is known (false for FIFOs, pipes, sockets, and /proc files, which
  /// report 0 bytes); only then are size() and read_at() meaningful.
  bool sized() const { return sized_; }
  uint64_t size() const { return size_; }

  /// Exactly `n` bytes at `offset` (sized files); BadInput if the file ends first or a read fails.
  void read_at(void* dst, size_t n, uint64_t offset);
  /// The next up to `n` bytes in order (any file); fewer only at the end of the file.
  size_t read_next(void* dst, size_t n);
  /// Fails unless the file has nothing after what was read so far (a stream: reads one more byte).
  void expect_end(const std::string& what_ended);
  /// The rest of the file, at most `max_bytes` (and at most what the host memory budget has left);
  /// past it BadInput naming `limit_name` (e.g. "protobuf's 2 GiB limit") or the memory limit.
  std::string read_all(uint64_t max_bytes, const std::string& limit_name);

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  bool sized_ = false;
  uint64_t size_ = 0;
  uint64_t pos_ = 0;  // read_next's position
};

/// InputFile(path, opts).read_all(max_bytes, limit_name).
std::string read_input_file(const std::filesystem::path& path, uint64_t max_bytes, const std::string& limit_name,
                            const InputOptions& opts = {});

/// No limit but the host memory budget's.
constexpr uint64_t kNoFileLimit = ~uint64_t{0};

/// Protobuf cannot parse a message of 2 GiB or more: the bound for model and .pb files.
constexpr uint64_t kProtobufFileLimit = (uint64_t{1} << 31) - 1;

/// 'path' in single quotes, as errors name files.
std::string quoted_path(const std::filesystem::path& p);

}  // namespace fusec

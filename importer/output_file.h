// The one way fusec writes a file: models, external data, reports, traces, HTML pages, DOT and SVG
// pictures, run outputs and the caches. What happens depends on what the destination is:
//
//   a regular file, or nothing yet   bytes go to a temporary file in the same folder (same
//                                    filesystem), renamed over the destination once complete: an
//                                    interrupted or failed run leaves the previous file untouched,
//                                    never a truncated one, and a file fusec has memory-mapped keeps
//                                    its inode. The temporary is removed on an error and on SIGINT,
//                                    SIGTERM and SIGHUP (importer/signal_cleanup.h).
//   a symlink the user named         its target is replaced that way (the link stays a link);
//                                    a link to a device or FIFO writes into that, in place
//   a symlink fusec named            (run's output_K.pb, a model's .data) replaced by the new file,
//                                    never followed: fusec never writes through a link it did not name
//   a device, FIFO or socket         written in place, never replaced (a FIFO nobody reads is an
//                                    error, not a hang)
//   `-`, /dev/stdout, /dev/fd/N      that descriptor, in place. Claimed up front (claim_output),
//                                    `-` also sends the command's human output to stderr, so the
//                                    machine output is all stdout carries
//   a folder                         an error
//
// Before anything is created the destination is claimed (importer/file_claims.h): one that is an
// input of the command or another of its outputs is refused with one error. Every failure is
// BadInput (exit 2) naming the file; a non-cache output is not committed when a memory-mapped input
// changed under fusec (importer/mapped_file.h).
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace fusec {

class TempPathGuard;

struct OutputOptions {
  /// What the output is, for errors: "--report", "-o", "the output model's external data".
  std::string what = "output";
  /// The path is the user's (a flag's value): a symlink there is followed. False for names fusec
  /// derives (run's output_K.pb in a folder the user named, a model's .data file).
  bool user_named = true;
  /// A cache (peaks, tuning, compiled kernels): may be rewritten by the same command, its folder is
  /// created, and it is written even if a mapped input changed.
  bool cache = false;
};

class OutputFile {
 public:
  /// Claims and opens `dest`; BadInput naming it if it cannot.
  explicit OutputFile(std::filesystem::path dest, OutputOptions opts = {});
  /// Removes the temporary file unless commit() succeeded.
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  int fd() const { return fd_; }
  const std::filesystem::path& dest() const { return dest_; }
  /// Written straight into the destination (a device, FIFO or descriptor), not through a temporary.
  bool in_place() const { return !tmp_guard_; }
  /// Bytes written so far (the next write's offset).
  uint64_t size() const { return size_; }

  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  /// Zero bytes up to the next multiple of `alignment`.
  void pad_to(uint64_t alignment);
  /// Appends `bytes` bytes at `offset` of the file open as `src_fd`, in the kernel
  /// (copy_file_range: no copy through this process's memory, a reflink where the filesystem can).
  void copy_from(int src_fd, uint64_t offset, size_t bytes);
  /// Completes the file: renames the temporary over the destination, or closes the in-place one.
  void commit();

 private:
  [[noreturn]] void fail(const std::string& what) const;
  std::filesystem::path dest_;    // as given
  std::filesystem::path target_;  // what the rename replaces (the link's target for a named link)
  std::filesystem::path tmp_;
  OutputOptions opts_;
  int fd_ = -1;
  uint64_t size_ = 0;
  bool committed_ = false;
  std::unique_ptr<TempPathGuard> tmp_guard_;
};

/// Writes `text` to `dest` through an OutputFile.
void write_output_file(const std::filesystem::path& dest, std::string_view text, const OutputOptions& opts = {});

/// Claims `dest` for the output `what` (a flag) before any work, so that a collision with an input
/// or another output is one error up front, and so is a destination that cannot be written
/// (no such folder, a folder, a dangling link). Empty paths are skipped. A claim of stdout
/// (`-`, /dev/stdout) sends the command's human output (printf to stdout) to stderr from now on.
/// `user_named` as in OutputOptions: false for a name fusec makes (run's output_K.pb).
void claim_output(const std::string& dest, const std::string& what, bool user_named = true);

/// Whether `dest` names a regular file (that exists): not `-`, a descriptor, a device or a FIFO.
bool is_regular_output(const std::string& dest);

/// The descriptor that writes to the real stdout (1, unless claim_output moved it).
int stdout_descriptor();

}  // namespace fusec

// Read-only memory maps of model and external-data files. Weights in external data become tensor
// views into the map: nothing is read until a kernel or a pass touches a page, the kernel reads
// each page once, straight into the page cache the process maps, and a command that needs no
// weight bytes (inspect) reads none. The map is PROT_READ, so a view's bytes always equal the
// file's, which is what lets the exporter copy them file to file (copy_file_range) without
// bringing them into memory at all.
//
// A mapped file that another program truncates while fusec runs faults (SIGBUS) on the next touch
// of a lost page, wherever that is (a pass, a CPU kernel reading weights in place, the exporter);
// every map is registered with importer/signal_cleanup.h, whose SIGBUS handler turns that into one
// `fusec: error:` line naming the file and exit 2. A file changed without shrinking cannot fault:
// check_mapped_files_unchanged() (called before any output is committed) compares each map's file
// size and modification time with those it had when mapped. fusec itself never writes a file it
// has mapped: its own inputs are refused as outputs (importer/file_claims.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace fusec {

class MappedFile {
 public:
  /// Maps the whole file read-only; nullptr if it cannot be mapped (empty file, a filesystem
  /// without mmap), in which case callers read it instead. BadInput if it cannot be opened.
  static std::shared_ptr<MappedFile> open(const std::filesystem::path& file);
  /// Maps the regular file open as `fd` (the map keeps its own copy of the descriptor).
  static std::shared_ptr<MappedFile> map(int fd, const std::filesystem::path& file);
  /// Maps bytes [offset, offset + size) of a scratch file fusec writes itself (offset a multiple
  /// of the page size; importer/scratch_weights.h): found by find_mapped_range like any map, but
  /// left out of check_mapped_files_unchanged, since the file grows as fusec appends to it. The
  /// map uses the scratch file's one descriptor, `*fd`, which `fd` keeps open (one descriptor
  /// however many weights the file holds). `what` names it in messages. nullptr if it cannot be
  /// mapped.
  static std::shared_ptr<MappedFile> map_scratch(std::shared_ptr<const int> fd, uint64_t offset, size_t size,
                                                 const std::string& what);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const char* data() const { return static_cast<const char*>(base_); }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  /// Where data() lies in the file (0 but for a scratch range).
  uint64_t file_offset() const { return file_offset_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  MappedFile() = default;
  friend void check_mapped_files_unchanged();
  /// Maps bytes [offset, offset + size) of `fd` read-only; the map owns `fd` (closes it) unless
  /// fd_owner_ is set after. Not yet enrolled.
  static std::shared_ptr<MappedFile> map_bytes(int fd, uint64_t offset, size_t size, int flags,
                                               const std::filesystem::path& path);
  /// Registers the map with the SIGBUS handler and with find_mapped_range.
  static void enroll(const std::shared_ptr<MappedFile>& m);
  void* base_ = nullptr;
  size_t size_ = 0;
  uint64_t file_offset_ = 0;  // of base_ in the file
  bool scratch_ = false;
  int fd_ = -1;
  std::shared_ptr<const int> fd_owner_;  // where the descriptor is shared (scratch maps)
  int64_t mtime_ns_ = 0;
  void* sigbus_handle_ = nullptr;
  std::filesystem::path path_;
};

/// BadInput naming the first mapped file whose size or modification time changed since it was
/// mapped: results computed from it may mix old and new bytes.
void check_mapped_files_unchanged();

/// Where `bytes` bytes at `p` live in a file fusec has mapped, if they do: the map (kept alive)
/// and the offset. Lets a writer copy unchanged weights from their source file.
struct MappedRange {
  std::shared_ptr<MappedFile> file;
  uint64_t offset = 0;
};
std::optional<MappedRange> find_mapped_range(const void* p, size_t bytes);

/// The maps one import opens, one per external-data file however many tensors it holds.
class MappedFiles {
 public:
  /// `contents` false: an import that only checks external-data references (file, offset, length)
  /// and leaves those tensors without data, mapping nothing.
  /// `owner`: the model the files belong to, for messages ("the external data of m.onnx").
  explicit MappedFiles(bool contents = true, std::string owner = "") : contents_(contents), owner_(std::move(owner)) {}
  bool contents() const { return contents_; }
  const std::string& owner() const { return owner_; }
  /// The file's map (opened on first use); nullptr if it cannot be mapped.
  std::shared_ptr<MappedFile> get(const std::filesystem::path& file);

 private:
  bool contents_;
  std::string owner_;
  std::map<std::filesystem::path, std::shared_ptr<MappedFile>> open_;
};

}  // namespace fusec

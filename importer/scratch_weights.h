// The derived-weight store of commands that write or run models (ir/derived_weight.h): weights a
// pass builds from others go into one unlinked scratch file, page-aligned, each then memory-mapped
// read-only. Bytes from a memory-mapped model or external-data file are copied file to file
// (copy_file_range, or pread into a bounded buffer for small pieces), so neither the sources nor
// the result are held in this process's memory; the writer then finds the result mapped like any
// weight and copies it into the output the same way. A kernel that reads it pages it in from the file as it would a
// model's weights.
//
// The file is made with O_TMPFILE (or created and unlinked at once), so nothing is left behind
// however fusec exits. Where it cannot be made or written (no such folder, a full disk) the
// weight is built in memory as before, under the host memory budget.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ir/derived_weight.h"

namespace fusec {

class ScratchWeightFile final : public DerivedWeightStore {
 public:
  /// Says why, once, when the weights go to memory after all (fusec: warning: ...).
  using Warn = std::function<void(const std::string&)>;
  /// The file goes into `dir` when the first weight of at least `min_bytes` is made.
  explicit ScratchWeightFile(std::filesystem::path dir, size_t min_bytes = size_t{1} << 20, Warn warn = nullptr);
  ScratchWeightFile(const ScratchWeightFile&) = delete;
  ScratchWeightFile& operator=(const ScratchWeightFile&) = delete;

  Tensor make(DType dtype, const std::vector<int64_t>& dims, const std::vector<ByteRun>& runs) override;

  /// Bytes placed in the file so far (the weights' sizes, without alignment).
  uint64_t bytes_stored() const { return stored_; }

 private:
  bool open_file();
  /// Memory from now on, and the warning, naming the folder and errno's reason.
  void give_up(const char* what);

  std::filesystem::path dir_;
  size_t min_bytes_;
  Warn warn_;
  std::mutex mu_;
  std::shared_ptr<const int> fd_;  // closed when this store and every weight mapped from it are gone
  bool unusable_ = false;  // the file could not be made: memory from now on
  uint64_t end_ = 0;
  uint64_t stored_ = 0;
};

/// Installs a ScratchWeightFile in `dir` (the system's temporary folder where empty) as the
/// derived-weight store.
void use_scratch_weights(const std::filesystem::path& dir = {}, ScratchWeightFile::Warn warn = nullptr);

}  // namespace fusec

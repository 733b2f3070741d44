// The files one command reads and writes, so that no output lands on one of the command's inputs
// (the model, its external data, an input tensor, a report it compares) or on another of its
// outputs. The reader (importer/input_file.h) notes every input it opens; the writer
// (importer/output_file.h) claims every destination before it creates anything, and the CLI claims
// all of a command's outputs as soon as the model is loaded, so a collision is one error before any
// work rather than a lost file after it.
//
// Files are told apart by filesystem identity (device and inode) where they exist, and by their
// normalized absolute path (symlinks in the existing part resolved) where they do not yet: a hard
// link, a symlink or `a/../b` reach the same entry. A path that names one of fusec's own
// descriptors (`-`, /dev/stdout, /dev/fd/N) is that descriptor.
//
// The bookkeeping lives in a CommandFiles, one per command (cli/main.cpp makes it). Without one
// (a library caller, most tests) nothing is checked: a library may well replace its own input.
#pragma once
#include <sys/types.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace fusec {

struct FileKey {
  bool exists = false;  // dev/ino are meaningful
  dev_t dev = 0;
  ino_t ino = 0;
  std::string path;  // normalized absolute path, or "<fd N>" for a descriptor
  bool same_as(const FileKey& o) const {
    return (exists && o.exists && dev == o.dev && ino == o.ino) || (!path.empty() && path == o.path);
  }
};

/// The descriptor a path names: "-" and /dev/stdout are 1, /dev/stderr 2, /dev/fd/N and
/// /proc/self/fd/N are N; -1 for any other path.
int named_descriptor(const std::string& path);

/// How `p` is recognised. `follow_final_link` false: a symlink at the end of `p` is the file
/// itself (what a rename over `p` replaces), not its target. Never throws: a path that cannot be
/// examined (too long, a loop) is compared by its lexically normalized absolute form.
FileKey file_key(const std::filesystem::path& p, bool follow_final_link = true);

class CommandFiles {
 public:
  /// Becomes the current command's bookkeeping until destroyed (the previous one comes back).
  CommandFiles();
  ~CommandFiles();
  CommandFiles(const CommandFiles&) = delete;
  CommandFiles& operator=(const CommandFiles&) = delete;

  /// The innermost live CommandFiles, or nullptr.
  static CommandFiles* current();

  /// Records an input, `what` saying what it is ("the input model", "external data of
  /// initializer 'w'"); the first description of a file is kept. BadInput if an output not yet
  /// written was claimed there (claims may come before the inputs are known).
  void note_input(const FileKey& key, const std::string& shown, const std::string& what);

  /// Claims `key` for the output `what` ("--report", "the output model's external data").
  /// BadInput when it is an input, or another output's. `writing`: the writer is about to create
  /// it: a claim made earlier for it (by the CLI, not yet written) is taken over rather than a
  /// collision. `cache`: a cache file, which the command may rewrite as often as it likes (only
  /// another cache write may share it).
  void claim_output(const FileKey& key, const std::string& shown, const std::string& what, bool writing, bool cache);

 private:
  struct Entry {
    FileKey key;
    std::string shown, what;
    enum Role { Input, Output, Cache } role;
    bool written = false;
  };
  std::mutex mu_;
  std::vector<Entry> entries_;
  CommandFiles* previous_ = nullptr;
};

/// CommandFiles::current()->note_input(file_key(p), ...), if there is a current one.
void note_input(const std::filesystem::path& p, const std::string& what);

}  // namespace fusec

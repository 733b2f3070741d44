#include "importer/file_claims.h"

#include <sys/stat.h>

#include <atomic>

#include "ir/error.h"

namespace fusec {

namespace fs = std::filesystem;

namespace {

std::atomic<CommandFiles*> g_current{nullptr};

/// N if `s` is a non-empty run of digits (at most 9), else -1.
int parse_fd(const std::string& s) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoi(s);
}

}  // namespace

int named_descriptor(const std::string& path) {
  if (path == "-" || path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  for (const char* prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    const std::string p = prefix;
    if (path.size() > p.size() && path.compare(0, p.size(), p) == 0) return parse_fd(path.substr(p.size()));
  }
  return -1;
}

FileKey file_key(const fs::path& p, bool follow_final_link) {
  FileKey k;
  if (const int fd = named_descriptor(p.string()); fd >= 0) {
    k.path = "<fd " + std::to_string(fd) + ">";
    return k;
  }
  struct stat st {};
  if ((follow_final_link ? ::stat(p.c_str(), &st) : ::lstat(p.c_str(), &st)) == 0) {
    k.exists = true;
    k.dev = st.st_dev;
    k.ino = st.st_ino;
  }
  std::error_code ec;
  fs::path abs = fs::absolute(p, ec);
  if (ec) abs = p;
  fs::path norm;
  if (follow_final_link || !abs.has_filename()) {
    norm = fs::weakly_canonical(abs, ec);
  } else {
    norm = fs::weakly_canonical(abs.parent_path(), ec);
    if (!ec) norm /= abs.filename();
  }
  k.path = (ec ? abs.lexically_normal() : norm).string();
  return k;
}

CommandFiles::CommandFiles() : previous_(g_current.exchange(this)) {}

CommandFiles::~CommandFiles() { g_current.store(previous_); }

CommandFiles* CommandFiles::current() { return g_current.load(); }

void CommandFiles::note_input(const FileKey& key, const std::string& shown, const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Entry& e : entries_) {
    if (!e.key.same_as(key)) continue;
    if (e.role == Entry::Input) return;
    // Claimed as an output before it was read (the CLI claims first): the same collision. Reading
    // back what the command itself wrote (optimize checks its model loads) is fine.
    if (!e.written) bad_input(e.what + " '" + e.shown + "' is " + what + "; fusec does not write over its own inputs");
  }
  entries_.push_back({key, shown, what, Entry::Input, false});
}

void CommandFiles::claim_output(const FileKey& key, const std::string& shown, const std::string& what, bool writing,
                                bool cache) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Entry& e : entries_) {
    if (!e.key.same_as(key)) continue;
    if (e.role == Entry::Input)
      bad_input(what + " '" + shown + "' is " + e.what + "; fusec does not write over its own inputs");
    if (cache && e.role == Entry::Cache) return;
    if (writing && !cache && e.role == Entry::Output && !e.written) {
      e.written = true;  // the write an earlier claim announced
      return;
    }
    if (e.what == what || (writing && e.written))
      bad_input("'" + shown + "' would be written twice (" + e.what + "); give each output its own file");
    bad_input(what + " '" + shown + "' is also " + e.what + (e.shown == shown ? "" : " ('" + e.shown + "')") +
              "; give each output its own file");
  }
  entries_.push_back({key, shown, what, cache ? Entry::Cache : Entry::Output, writing});
}

void note_input(const fs::path& p, const std::string& what) {
  if (CommandFiles* c = CommandFiles::current()) c->note_input(file_key(p), p.string(), what);
}

}  // namespace fusec

#include "cli/graph_pictures.h"

#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "cli/common.h"
#include "importer/output_file.h"
#include "ir/error.h"
#include "ir/graph_dot.h"

extern char** environ;

namespace fusec::cli {

namespace fs = std::filesystem;

namespace {

std::pair<std::string, std::string> split_pair(const std::string& value, const char* flag, const char* ext) {
  size_t comma = value.find(',');
  std::string a = value.substr(0, comma), b = comma == std::string::npos ? "" : value.substr(comma + 1);
  if (comma == std::string::npos || a.empty() || b.empty() || b.find(',') != std::string::npos)
    bad_input(std::string(flag) + " needs two paths, before and after: " + flag + " before." + ext + ",after." + ext +
              " (got '" + value + "')");
  return {a, b};
}

/// Graphviz's `dot` on PATH, or "".
std::string find_dot() {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string d; std::getline(dirs, d, ':');) {
    fs::path p = fs::path(d.empty() ? "." : d) / "dot";
    if (access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

/// An anonymous in-memory file (memfd) holding `text`, rewound: Graphviz's stdin, or (empty) its
/// stderr. Nothing is created on disk, so nothing can be left behind.
int memory_file(const char* name, const std::string& text) {
  const int fd = ::memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) bad_input(std::string("--svg: cannot create an in-memory file: ") + std::strerror(errno));
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      bad_input(std::string("--svg: cannot write an in-memory file: ") + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  ::lseek(fd, 0, SEEK_SET);
  return fd;
}

/// `dot -Tsvg` with the DOT text on its stdin and its stdout into the one writer's file, so the
/// SVG lands like every other output (a temporary renamed into place, never through a symlink
/// fusec did not name).
void render_svg(const std::string& dot_exe, const std::string& dot_text, const std::string& svg_path,
                const std::string& what) {
  OutputFile out(svg_path, {what, true, false});
  const int in = memory_file("fusec-dot-in", dot_text), err = memory_file("fusec-dot-err", "");
  std::vector<std::string> args = {dot_exe, "-Tsvg"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in, 0);
  posix_spawn_file_actions_adddup2(&fa, out.fd(), 1);
  posix_spawn_file_actions_adddup2(&fa, err, 2);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, dot_exe.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  int status = 0;
  if (rc == 0)
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  char buf[512] = {};
  const ssize_t n = ::pread(err, buf, sizeof buf - 1, 0);
  std::string message(buf, n > 0 ? static_cast<size_t>(n) : 0);
  message = message.substr(0, message.find('\n'));
  ::close(in);
  ::close(err);
  if (rc != 0) bad_input("--svg: cannot run " + dot_exe + ": " + std::strerror(rc));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    bad_input("--svg: Graphviz could not write '" + svg_path + "'" + (message.empty() ? "" : ": " + message));
  out.commit();
}

}  // namespace

void check_picture_flags(const std::string& dot_pair, const std::string& svg_pair) {
  if (!dot_pair.empty()) {
    auto [before, after] = split_pair(dot_pair, "--dot", "dot");
    claim_output(before, "--dot (before)");
    claim_output(after, "--dot (after)");
  }
  if (!svg_pair.empty()) {
    auto [before, after] = split_pair(svg_pair, "--svg", "svg");
    claim_output(before, "--svg (before)");
    claim_output(after, "--svg (after)");
    if (find_dot().empty())
      bad_input(
          "--svg needs Graphviz's dot on PATH (Debian: apt install graphviz); --dot before.dot,after.dot writes the "
          "DOT text without it");
  }
}

void write_graph_pictures(const Graph& original, const Graph& optimized, const std::string& dot_pair,
                          const std::string& svg_pair) {
  if (dot_pair.empty() && svg_pair.empty()) return;
  DotPair d = graphs_to_dot(original, optimized);
  if (!dot_pair.empty()) {
    auto [before, after] = split_pair(dot_pair, "--dot", "dot");
    write_output_file(before, d.before, {"--dot (before)", true, false});
    write_output_file(after, d.after, {"--dot (after)", true, false});
  }
  if (!svg_pair.empty()) {
    auto [before, after] = split_pair(svg_pair, "--svg", "svg");
    std::string dot = find_dot();
    if (dot.empty()) bad_input("--svg needs Graphviz's dot on PATH (Debian: apt install graphviz)");
    render_svg(dot, d.before, before, "--svg (before)");
    render_svg(dot, d.after, after, "--svg (after)");
  }
}

}  // namespace fusec::cli

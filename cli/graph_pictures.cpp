#include "cli/graph_pictures.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/common.h"
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

/// dot -Tsvg -o svg_path (reading the DOT text from a temporary file beside the output).
void render_svg(const std::string& dot_exe, const std::string& dot_text, const std::string& svg_path) {
  std::string tmp = svg_path + ".fusec-tmp.dot";
  {
    std::ofstream f(tmp);
    if (!(f << dot_text)) bad_input("cannot write '" + svg_path + "' (its folder is not writable)");
  }
  std::string err = svg_path + ".fusec-tmp.err";
  std::vector<std::string> args = {dot_exe, "-Tsvg", "-o", svg_path, tmp};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, dot_exe.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  int status = 0;
  if (rc == 0)
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  std::string message;
  {
    std::ifstream e(err);
    std::getline(e, message);
  }
  std::error_code ec;
  fs::remove(tmp, ec);
  fs::remove(err, ec);
  if (rc != 0) bad_input("--svg: cannot run " + dot_exe + ": " + std::strerror(rc));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    bad_input("--svg: Graphviz could not write '" + svg_path + "'" + (message.empty() ? "" : ": " + message));
}

}  // namespace

void check_picture_flags(const std::string& dot_pair, const std::string& svg_pair) {
  if (!dot_pair.empty()) split_pair(dot_pair, "--dot", "dot");
  if (!svg_pair.empty()) {
    split_pair(svg_pair, "--svg", "svg");
    if (find_dot().empty())
      bad_input("--svg needs Graphviz's dot on PATH (Debian: apt install graphviz); --dot before.dot,after.dot writes the "
                "DOT text without it");
  }
}

void write_graph_pictures(const Graph& original, const Graph& optimized, const std::string& dot_pair,
                          const std::string& svg_pair) {
  if (dot_pair.empty() && svg_pair.empty()) return;
  DotPair d = graphs_to_dot(original, optimized);
  if (!dot_pair.empty()) {
    auto [before, after] = split_pair(dot_pair, "--dot", "dot");
    write_text_file(before, d.before);
    write_text_file(after, d.after);
  }
  if (!svg_pair.empty()) {
    auto [before, after] = split_pair(svg_pair, "--svg", "svg");
    std::string dot = find_dot();
    if (dot.empty()) bad_input("--svg needs Graphviz's dot on PATH (Debian: apt install graphviz)");
    render_svg(dot, d.before, before);
    render_svg(dot, d.after, after);
  }
}

}  // namespace fusec::cli

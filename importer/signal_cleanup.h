// What fusec undoes when a signal ends it, and the one signal a file can cause.
//
// SIGINT, SIGTERM, SIGHUP: the temporary files and folders registered here are removed (a running
// child is stopped first, with the same signal, and waited for), then the signal is raised again
// with its default action, so the caller still sees "killed by SIGINT". Without this an
// interrupted `optimize` of a large model left a hidden 1 GiB temporary beside its output.
// A signal the process inherited as ignored (nohup, a background job) stays ignored.
//
// SIGBUS: a memory-mapped input (external-data weights) that another program truncates under the
// map makes the next touch of a lost page fault. When the faulting address lies in a registered
// map, fusec prints one line, `fusec: error: '<file>' was truncated while fusec was reading it
// ...`, removes its temporaries and exits 2. Any other SIGBUS keeps its default action.
//
// Everything the handlers touch is lock-free and preallocated: registration allocates (outside the
// handler), the handlers only walk lists of atomics and make async-signal-safe calls (unlink,
// rmdir, getdents64, kill, waitpid, write, _exit).
#pragma once
#include <signal.h>
#include <sys/types.h>

#include <cstddef>
#include <string>

namespace fusec {

/// A temporary file or folder removed if a termination signal arrives while this object lives.
/// A folder is removed with everything in it (to a depth of 8 levels).
class TempPathGuard {
 public:
  enum class Kind { File, Folder };
  TempPathGuard(const std::string& path, Kind kind = Kind::File);
  /// Unregisters (the path itself is not touched: the owner removes or renames it).
  ~TempPathGuard();
  TempPathGuard(const TempPathGuard&) = delete;
  TempPathGuard& operator=(const TempPathGuard&) = delete;

 private:
  void* slot_ = nullptr;
};

/// The child process a signal must stop (same signal, then waited for) before the temporaries go:
/// its own outputs may be in a registered folder. 0: none.
void set_signal_child(pid_t pid);

/// Holds SIGINT, SIGTERM and SIGHUP back (this thread) for its lifetime, so a child can be started
/// and registered with set_signal_child with no signal in between; a signal that arrives meanwhile
/// is handled when it ends. Give the child previous() as its mask (posix_spawnattr_setsigmask).
class TerminationSignalsHeld {
 public:
  TerminationSignalsHeld();
  ~TerminationSignalsHeld();
  TerminationSignalsHeld(const TerminationSignalsHeld&) = delete;
  TerminationSignalsHeld& operator=(const TerminationSignalsHeld&) = delete;
  const sigset_t& previous() const { return previous_; }

 private:
  sigset_t previous_;
};

/// Registers a read-only map of `path` at [base, base + size) for the SIGBUS message; returns a
/// handle for unregister_mapped_range.
void* register_mapped_range(const void* base, size_t size, const std::string& path);
void unregister_mapped_range(void* handle);

/// Installs the handlers (idempotent; registration does it too). For tests and main().
void install_signal_cleanup();

/// Removes every registered temporary now (what the handlers do); for tests.
void remove_registered_temporaries_for_test();

}  // namespace fusec

#include "importer/signal_cleanup.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <algorithm>
#include <mutex>
#include <vector>

#include "ir/escape.h"

namespace fusec {

namespace {

// One registration: a temporary (path) or a map (base, size, message). Slots are never freed, only
// marked free and reused, so a handler walking the list never meets freed memory.
struct Slot {
  enum State : int { Free = 0, Filling = 1, File = 2, Folder = 3, Map = 4 };
  std::atomic<int> state{Free};
  char* text = nullptr;  // the path (temporaries) or the whole error line (maps)
  size_t cap = 0;
  std::atomic<const char*> base{nullptr};
  std::atomic<size_t> size{0};
  std::atomic<Slot*> next{nullptr};
};

std::atomic<Slot*> g_temps{nullptr};
std::atomic<Slot*> g_maps{nullptr};
std::atomic<pid_t> g_child{0};
std::atomic<int> g_handling{0};

/// A free slot of `list` holding a copy of `text` (a new one if none is free), state Filling.
Slot* acquire(std::atomic<Slot*>& list, const std::string& text) {
  Slot* s = nullptr;
  for (Slot* p = list.load(); p; p = p->next.load()) {
    int expected = Slot::Free;
    if (p->state.compare_exchange_strong(expected, Slot::Filling)) {
      s = p;
      break;
    }
  }
  if (!s) {
    s = new Slot();
    s->state.store(Slot::Filling);
    Slot* head = list.load();
    do s->next.store(head);
    while (!list.compare_exchange_weak(head, s));
  }
  if (s->cap < text.size() + 1) {
    // The old buffer stays allocated (a handler on another thread may still be reading it), kept
    // in a list that is never freed, so it is not lost either; paths rarely outgrow the first one.
    static std::mutex retired_mutex;
    static auto* retired = new std::vector<char*>;
    if (s->text) {
      std::lock_guard<std::mutex> lock(retired_mutex);
      retired->push_back(s->text);
    }
    s->cap = std::max<size_t>(text.size() + 1, 256);
    s->text = new char[s->cap];
  }
  std::memcpy(s->text, text.c_str(), text.size() + 1);
  return s;
}

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

struct LinuxDirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

/// Empties the folder open as `dir` (async-signal-safe: raw getdents64, unlinkat, no allocation).
void empty_folder(int dir, int depth) {
  alignas(8) char buf[4096];
  for (int pass = 0; pass < 64; ++pass) {
    bool removed = false;
    ::lseek(dir, 0, SEEK_SET);
    for (;;) {
      const long n = ::syscall(SYS_getdents64, dir, buf, sizeof buf);
      if (n <= 0) break;
      for (long off = 0; off < n;) {
        auto* e = reinterpret_cast<LinuxDirent64*>(buf + off);
        off += e->d_reclen;
        const char* name = e->d_name;
        if (std::strcmp(name, ".") == 0 || std::strcmp(name, "..") == 0) continue;
        if (::unlinkat(dir, name, 0) == 0) {
          removed = true;
          continue;
        }
        if ((errno == EISDIR || errno == EPERM) && depth < 8) {
          const int sub = ::openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
          if (sub >= 0) {
            empty_folder(sub, depth + 1);
            ::close(sub);
          }
          if (::unlinkat(dir, name, AT_REMOVEDIR) == 0) removed = true;
        }
      }
    }
    if (!removed) return;
  }
}

void remove_temporaries() {
  for (Slot* s = g_temps.load(); s; s = s->next.load()) {
    const int st = s->state.load();
    if (st == Slot::File) {
      ::unlink(s->text);
    } else if (st == Slot::Folder) {
      const int dir = ::open(s->text, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (dir >= 0) {
        empty_folder(dir, 0);
        ::close(dir);
      }
      ::rmdir(s->text);
    }
  }
}

void on_termination_signal(int sig) {
  if (g_handling.exchange(1) != 0) return;  // another thread is cleaning up; it raises its signal again
  if (const pid_t child = g_child.load(); child > 0) {
    ::kill(child, sig);
    while (::waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  remove_temporaries();
  ::signal(sig, SIG_DFL);
  ::raise(sig);  // delivered with the default action once this handler returns
}

void on_sigbus(int sig, siginfo_t* info, void*) {
  // si_addr is the faulting address only for a fault the kernel raised (si_code > 0), not for a
  // SIGBUS another process sent.
  const char* addr = static_cast<const char*>(info && info->si_code > 0 ? info->si_addr : nullptr);
  for (Slot* s = g_maps.load(); s && addr; s = s->next.load()) {
    if (s->state.load() != Slot::Map) continue;
    const char* base = s->base.load();
    if (addr >= base && static_cast<size_t>(addr - base) < s->size.load()) {
      write_all(2, s->text, std::strlen(s->text));
      if (g_handling.exchange(1) == 0) remove_temporaries();
      ::_exit(2);
    }
  }
  // Not a map of ours: the default action, for a fault (which repeats) and a sent signal alike.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void install_signal_cleanup() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;  // nohup: stays ignored
      struct sigaction sa {};
      sa.sa_handler = on_termination_signal;
      sigemptyset(&sa.sa_mask);
      for (int other : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&sa.sa_mask, other);
      sa.sa_flags = SA_RESTART;
      ::sigaction(sig, &sa, nullptr);
    }
    struct sigaction bus {};
    bus.sa_sigaction = on_sigbus;
    sigemptyset(&bus.sa_mask);
    bus.sa_flags = SA_SIGINFO;
    ::sigaction(SIGBUS, &bus, nullptr);
  });
}

TempPathGuard::TempPathGuard(const std::string& path, Kind kind) {
  install_signal_cleanup();
  Slot* s = acquire(g_temps, path);
  s->state.store(kind == Kind::File ? Slot::File : Slot::Folder);
  slot_ = s;
}

TempPathGuard::~TempPathGuard() { static_cast<Slot*>(slot_)->state.store(Slot::Free); }

void set_signal_child(pid_t pid) { g_child.store(pid); }

TerminationSignalsHeld::TerminationSignalsHeld() {
  sigset_t held;
  sigemptyset(&held);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&held, sig);
  ::pthread_sigmask(SIG_BLOCK, &held, &previous_);
}

TerminationSignalsHeld::~TerminationSignalsHeld() { ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }

void* register_mapped_range(const void* base, size_t size, const std::string& path) {
  install_signal_cleanup();
  // The whole line made now: the handler can only copy bytes (one_line: a path stays one line).
  Slot* s = acquire(g_maps, "fusec: error: " +
                                one_line("'" + path +
                                         "' was truncated by another program while fusec was reading it through a "
                                         "memory map; outputs not yet complete were not written") +
                                "\n");
  s->base.store(static_cast<const char*>(base));
  s->size.store(size);
  s->state.store(Slot::Map);
  return s;
}

void unregister_mapped_range(void* handle) {
  if (handle) static_cast<Slot*>(handle)->state.store(Slot::Free);
}

void remove_registered_temporaries_for_test() { remove_temporaries(); }

}  // namespace fusec

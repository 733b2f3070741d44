#include "backend/cpu/parallel.h"
#include "ir/switches.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace fusec::cpu {
namespace {

thread_local bool in_worker = false;

/// How long a thread spins on the pool's state before it sleeps: a worker waiting for the next
/// region, and run() waiting for the workers to leave this one. The executor runs one node's
/// parallel region after another with little serial work between; with only a condition
/// variable, every region paid a futex wake of each worker and a sleep of the caller, and a
/// 2-thread run of BERT-small or a pointwise conv with its residual was slower than one thread
/// (`perf`: a third of the samples in the kernel's task switching). Bounded, so an idle pool
/// costs nothing and a pool sharing its cores with another process gives them back soon.
constexpr std::chrono::microseconds kSpin{100};

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// Spins until done() or kSpin has passed; returns done().
template <typename Done>
bool spin_until(Done&& done) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    if (done()) return true;
    cpu_relax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() - start > kSpin) return done();
  }
}

// One parallel region's state, on run()'s stack. A worker takes the job only while run() has it
// posted (registering itself in `active` under the pool's mutex), and run() returns only when
// every chunk is done and every worker that took the job has left it; a worker touches the job
// last when it leaves. (A shared chunk counter reset for each region let a worker that was late
// leaving one region claim a chunk of the next before the reset: that chunk ran twice, the count
// of finished chunks reached the total early, and run() returned while a chunk was still running
// on the caller's destroyed task: an intermittent crash in depthwise_plane under CI's 2-core load.)
struct Job {
  const std::function<void(int64_t)>* task = nullptr;
  int64_t chunks = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};  // chunks finished
  std::atomic<int> active{0};    // workers inside work(*this); raised only under the pool's mutex
  std::exception_ptr error;      // the first chunk's exception (under the pool's mutex)
};

class Pool {
 public:
  explicit Pool(int n) {
    for (int i = 0; i < n - 1; ++i) workers_.emplace_back([this] { loop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_.store(true);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void run(int64_t chunks, const std::function<void(int64_t)>& task) {
    std::unique_lock<std::mutex> run_lock(run_mu_);  // one parallel region at a time
    Job job;
    job.task = &task;
    job.chunks = chunks;
    bool wake;
    {
      std::lock_guard<std::mutex> l(mu_);
      job_ = &job;
      generation_.fetch_add(1, std::memory_order_release);
      wake = sleepers_ > 0;
    }
    if (wake) cv_.notify_all();
    work(job);
    {
      std::lock_guard<std::mutex> l(mu_);
      job_ = nullptr;  // no worker takes it from here on
    }
    auto finished = [&] {
      return job.done.load(std::memory_order_acquire) == job.chunks && job.active.load(std::memory_order_acquire) == 0;
    };
    if (!spin_until(finished)) {
      std::unique_lock<std::mutex> l(mu_);
      done_cv_.wait(l, finished);
    }
    // No lock for job.error: every writer set it before its done or active release, which
    // finished()'s acquire loads have seen, and no thread is left in the job to write it again.
    if (job.error) std::rethrow_exception(job.error);
  }

 private:
  void work(Job& j) {
    in_worker = true;
    for (;;) {
      const int64_t c = j.next.fetch_add(1);
      if (c >= j.chunks) break;
      try {
        (*j.task)(c);
      } catch (...) {
        std::lock_guard<std::mutex> l(mu_);
        if (!j.error) j.error = std::current_exception();
      }
      j.done.fetch_add(1, std::memory_order_release);
    }
    in_worker = false;
  }
  void loop() {
    uint64_t seen = 0;
    for (;;) {
      auto posted = [&] { return stop_.load() || generation_.load(std::memory_order_acquire) != seen; };
      Job* j = nullptr;
      {
        const bool early = spin_until(posted);
        std::unique_lock<std::mutex> l(mu_);
        if (!early) {
          ++sleepers_;
          cv_.wait(l, posted);
          --sleepers_;
        }
        if (stop_.load()) return;
        seen = generation_.load();
        j = job_;
        if (!j) continue;  // the region ended before this worker came to it
        j->active.fetch_add(1);
      }
      work(*j);
      // The last access to the job: once active reaches 0 run() may return and free it.
      if (j->active.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> l(mu_);  // run() checks its predicate under mu_: no lost wake
        done_cv_.notify_all();
      }
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_, run_mu_;
  std::condition_variable cv_, done_cv_;
  Job* job_ = nullptr;  // the region run() has posted, or null (under mu_)
  std::atomic<uint64_t> generation_{0};
  int sleepers_ = 0;  // workers blocked on cv_ (under mu_)
  std::atomic<bool> stop_{false};
};

Pool& pool() {
  static Pool p(num_threads());
  return p;
}

}  // namespace

int num_threads() {
  static int n = [] {
    if (const char* e = env_switch("FUSEC_NUM_THREADS")) {
      int v = std::atoi(e);
      if (v > 0) return v;
    }
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return n;
}

void parallel_for(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  int threads = num_threads();
  min_chunk = std::max<int64_t>(min_chunk, 1);
  if (threads == 1 || in_worker || n < 2 * min_chunk) {
    fn(0, n);
    return;
  }
  int64_t chunks = std::min<int64_t>(threads * 4, n / min_chunk);
  int64_t step = (n + chunks - 1) / chunks;
  chunks = (n + step - 1) / step;
  pool().run(chunks, [&](int64_t c) { fn(c * step, std::min(n, (c + 1) * step)); });
}

}  // namespace fusec::cpu

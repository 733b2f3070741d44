#include "backend/cpu/parallel.h"
#include "ir/switches.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace fusec::cpu {
namespace {

thread_local bool in_worker = false;

// One parallel region's state, on run()'s stack. A worker takes the job only while run() has it
// posted, and run() returns only when every chunk is done and every worker that took the job has
// left it. (A shared chunk counter reset for each region let a worker that was late leaving one
// region claim a chunk of the next before the reset: that chunk ran twice, the count of finished
// chunks reached the total early, and run() returned while a chunk was still running on the
// caller's destroyed task: an intermittent crash in depthwise_plane under CI's 2-core load.)
struct Job {
  const std::function<void(int64_t)>* task = nullptr;
  int64_t chunks = 0;
  std::atomic<int64_t> next{0};
  int64_t done = 0;          // chunks finished (under the pool's mutex)
  int active = 0;            // workers inside work(*this) (under the pool's mutex)
  std::exception_ptr error;  // the first chunk's exception (under the pool's mutex)
};

class Pool {
 public:
  explicit Pool(int n) {
    for (int i = 0; i < n - 1; ++i) workers_.emplace_back([this] { loop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
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
    {
      std::lock_guard<std::mutex> l(mu_);
      job_ = &job;
      ++generation_;
    }
    cv_.notify_all();
    work(job);
    std::unique_lock<std::mutex> l(mu_);
    job_ = nullptr;  // no worker takes it from here on
    done_cv_.wait(l, [&] { return job.done == job.chunks && job.active == 0; });
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
      std::lock_guard<std::mutex> l(mu_);
      if (++j.done == j.chunks) done_cv_.notify_all();
    }
    in_worker = false;
  }
  void loop() {
    uint64_t seen = 0;
    for (;;) {
      Job* j = nullptr;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || (generation_ != seen && job_); });
        if (stop_) return;
        seen = generation_;
        j = job_;
        ++j->active;
      }
      work(*j);
      std::lock_guard<std::mutex> l(mu_);
      if (--j->active == 0) done_cv_.notify_all();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_, run_mu_;
  std::condition_variable cv_, done_cv_;
  Job* job_ = nullptr;  // the region run() has posted, or null
  uint64_t generation_ = 0;
  bool stop_ = false;
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

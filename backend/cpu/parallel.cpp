#include "backend/cpu/parallel.h"

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
    {
      std::lock_guard<std::mutex> l(mu_);
      task_ = &task;
      chunks_ = chunks;
      next_.store(0);
      done_ = 0;
      error_ = nullptr;
      ++generation_;
    }
    cv_.notify_all();
    work();
    std::unique_lock<std::mutex> l(mu_);
    done_cv_.wait(l, [&] { return done_ == chunks_; });
    task_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void work() {
    in_worker = true;
    for (;;) {
      int64_t c = next_.fetch_add(1);
      if (c >= chunks_) break;
      try {
        (*task_)(c);
      } catch (...) {
        std::lock_guard<std::mutex> l(mu_);
        if (!error_) error_ = std::current_exception();
      }
      std::lock_guard<std::mutex> l(mu_);
      if (++done_ == chunks_) done_cv_.notify_all();
    }
    in_worker = false;
  }
  void loop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || (generation_ != seen && task_); });
        if (stop_) return;
        seen = generation_;
      }
      work();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_, run_mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t)>* task_ = nullptr;
  int64_t chunks_ = 0;
  std::atomic<int64_t> next_{0};
  int64_t done_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

Pool& pool() {
  static Pool p(num_threads());
  return p;
}

}  // namespace

int num_threads() {
  static int n = [] {
    if (const char* e = std::getenv("FUSEC_NUM_THREADS")) {
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

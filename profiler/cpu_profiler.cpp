#include <chrono>

#include "profiler/collect.h"

namespace fusec::profiler {

void StepRecorder::step_begin(const StepInfo& s) {
  if (steps.size() <= s.index) steps.resize(s.index + 1);
  StepDesc& d = steps[s.index];
  if (d.label.empty()) {
    d.label = s.label;
    d.kind = s.kind;
    d.node = s.node;
  }
  current = static_cast<int>(s.index);
}

void StepRecorder::step_end(const StepInfo&) { current = -1; }

namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

/// Each step becomes one Host record of the iteration being run.
class CpuTimer : public StepRecorder {
 public:
  void step_begin(const StepInfo& s) override {
    StepRecorder::step_begin(s);
    start_ = now_ns();
  }
  void step_end(const StepInfo& s) override {
    const uint64_t end = now_ns();
    StepRecorder::step_end(s);
    if (iteration < 0) return;
    Record r;
    r.kind = RecordKind::Host;
    r.name = s.label;
    r.iteration = iteration;
    r.step = static_cast<int>(s.index);
    r.start_ns = start_;
    r.end_ns = end;
    records.push_back(std::move(r));
  }
  int iteration = -1;
  std::vector<Record> records;

 private:
  uint64_t start_ = 0;
};

}  // namespace

Collected profile_cpu(Executable& exe, const std::vector<Tensor>& inputs, const RunSettings& s) {
  CpuTimer timer;
  exe.set_step_observer(&timer);
  struct Detach {
    Executable& e;
    ~Detach() { e.set_step_observer(nullptr); }
  } detach{exe};
  for (int i = 0; i < s.warmup; ++i) exe.run(inputs);
  Collected c;
  c.device_kind = "cpu";
  c.modes.push_back({"cpu", {}});
  for (int i = 0; i < s.iterations; ++i) {
    timer.iteration = i;
    auto t = std::chrono::steady_clock::now();
    exe.run(inputs);
    c.modes[0].wall_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count());
  }
  timer.iteration = -1;
  c.graph = exe.executed_graph();
  c.steps = timer.steps;
  c.records = std::move(timer.records);
  c.attribution = "host clock around each node";
  return c;
}

}  // namespace fusec::profiler

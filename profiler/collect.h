// Running a compiled model under the profiler: the backend-specific half. Both return what was
// collected; profiler/analysis.cpp and profiler/report.cpp do the rest.
#pragma once
#include <vector>

#include "backend/backend.h"
#include "ir/tensor.h"
#include "profiler/profile.h"

namespace fusec::profiler {

struct RunSettings {
  int warmup = 3;
  int iterations = 20;
};

/// Times each step with the host clock (the CPU backend runs one node at a time, on the calling
/// thread and its pool) and each iteration around Executable::run.
Collected profile_cpu(Executable& exe, const std::vector<Tensor>& inputs, const RunSettings& s);

/// Records each step as the executable announces it (the first run fixes the list).
class StepRecorder : public StepObserver {
 public:
  void step_begin(const StepInfo& s) override;
  void step_end(const StepInfo& s) override;
  std::vector<StepDesc> steps;
  int current = -1;  // the step being launched, -1 between steps
};

}  // namespace fusec::profiler

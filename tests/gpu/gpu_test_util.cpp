#include "gpu_test_util.h"

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels/common.h"
#include "backend/cuda/core/tuning_cache.h"
#include "passes/infer_shapes.h"

namespace fusec::test {

Tensor random_tensor(DType dtype, std::vector<int64_t> dims, uint64_t seed, double lo, double hi) {
  Tensor f(DType::Float64, dims);
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < f.numel(); ++i) {
    double v = dist(rng);
    if (is_integer(dtype)) v = std::floor(v);
    if (dtype == DType::Bool) v = v > (lo + hi) / 2 ? 1 : 0;
    f.data<double>()[i] = v;
  }
  if (dtype == DType::Float64) return f;
  Tensor out(dtype, dims);
  cpu::convert_tensor(f, out);
  return out;
}

double default_tolerance(Precision p) {
  switch (p) {
    case Precision::FP32:
      return 1e-5;
    case Precision::TF32:
      return 1e-3;
    case Precision::FP16:
    case Precision::BF16:
      return 1e-2;
  }
  return 1e-5;
}

std::shared_ptr<cuda::Context> shared_context() {
  static std::shared_ptr<cuda::Context> ctx = std::make_shared<cuda::Context>(0);
  return ctx;
}

std::unique_ptr<Graph> build_case(const OpCase& c, std::vector<Tensor>* feeds) {
  GraphBuilder b(c.opset);
  if (!c.domain.empty()) b.graph().opsets[c.domain] = 1;
  std::vector<Value*> ins;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Tensor& t = c.inputs[i];
    if (!t.defined()) {
      ins.push_back(nullptr);
      continue;
    }
    std::string name = "in" + std::to_string(i);
    if (c.constant.count(i)) {
      ins.push_back(b.initializer(name, t.clone()));
    } else {
      ins.push_back(b.input(name, t.dtype(), shape_of(t.dims())));
      feeds->push_back(t);
    }
  }
  for (Value* v : b.node_n(c.op, ins, c.num_outputs, c.attrs, "node_under_test", c.domain)) b.output(v);
  return b.build();
}

void compare(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.dims(), want.dims()) << what;
  if (is_float(want.dtype())) {
    double scale = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      double w = want.as_double(i);
      if (std::isfinite(w)) scale = std::max(scale, std::fabs(w));
    }
    scale = std::max(scale, 1e-6);
    int reported = 0;
    double worst = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      double g = got.as_double(i), w = want.as_double(i);
      if (std::isnan(w) || std::isinf(w)) {
        if (std::isnan(w) ? !std::isnan(g) : g != w) {
          if (reported++ < 5) ADD_FAILURE() << what << " element " << i << ": got " << g << ", want " << w;
        }
        continue;
      }
      double err = std::fabs(g - w) / scale;
      worst = std::max(worst, std::isnan(err) ? INFINITY : err);
      if (!(err <= tol) && reported++ < 5)
        ADD_FAILURE() << what << " element " << i << ": got " << g << ", want " << w << " (error " << err
                      << " of max|ref| " << scale << ", tolerance " << tol << ")";
    }
    if (reported)
      ADD_FAILURE() << what << ": " << reported << " element(s) out of tolerance; worst relative error " << worst;
  } else {
    int reported = 0;
    for (int64_t i = 0; i < want.numel(); ++i)
      if (got.as_int64(i) != want.as_int64(i) && reported++ < 5)
        ADD_FAILURE() << what << " element " << i << ": got " << got.as_int64(i) << ", want " << want.as_int64(i);
  }
}

void expect_gpu_matches_cpu(const OpCase& c, Precision p, double tol, bool require_gpu_kernel,
                            const std::string& kernel_has, std::string* ran_as) {
  if (tol < 0) tol = default_tolerance(p);
  std::vector<Tensor> feeds;
  auto g = build_case(c, &feeds);
  infer_shapes(*g);
  auto want = cpu::CpuBackend().compile(*g)->run(feeds);
  cuda::CudaOptions o;
  o.precision = p;
  o.context = shared_context();
  cuda::CudaBackend backend(o);
  auto exe = backend.compile_cuda(*g);
  auto got = exe->run(feeds);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& pl : exe->placement())
    if (pl.node == "node_under_test" && ran_as) *ran_as = pl.kernel;
  if (require_gpu_kernel) {
    for (const auto& pl : exe->placement())
      if (pl.node == "node_under_test") {
        EXPECT_TRUE(pl.on_gpu) << c.op << " ran on the CPU: " << pl.reason;
        if (!kernel_has.empty())
          EXPECT_NE(pl.kernel.find(kernel_has), std::string::npos) << c.op << " ran as " << pl.kernel;
      }
  }
  for (size_t i = 0; i < want.size(); ++i)
    compare(got[i], want[i], tol, c.op + " output " + std::to_string(i) + " at " + precision_name(p));
}

void expect_graph_gpu_matches_cpu(const Graph& g, const std::vector<Tensor>& inputs, Precision p, double tol,
                                  bool cuda_graph) {
  if (tol < 0) tol = default_tolerance(p);
  auto want = cpu::CpuBackend().compile(g)->run(inputs);
  cuda::CudaOptions o;
  o.precision = p;
  o.cuda_graph = cuda_graph;
  o.context = shared_context();
  auto exe = cuda::CudaBackend(o).compile_cuda(g);
  // Twice: the second run replays the captured CUDA graph when capture is on.
  for (int run = 0; run < 2; ++run) {
    auto got = exe->run(inputs);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      compare(got[i], want[i], tol,
              "output " + g.outputs[i]->name + " run " + std::to_string(run) + " at " + precision_name(p));
  }
}

ScopedTuningCache::ScopedTuningCache(const std::string& tag)
    : dir_(std::filesystem::temp_directory_path() / ("fusec_" + tag + "_" + std::to_string(::getpid()))) {
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
  path_ = (dir_ / "t.json").string();
  setenv("FUSEC_TUNING_CACHE", path_.c_str(), 1);
  cuda::TuningCache::global().reload();
}

ScopedTuningCache::~ScopedTuningCache() {
  unsetenv("FUSEC_TUNING_CACHE");
  cuda::TuningCache::global().reload();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string ScopedTuningCache::text() const {
  std::ifstream f(path_);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::string ScopedTuningCache::key_containing(const std::string& part) const {
  const std::string t = text();
  const size_t at = t.find(part);
  if (at == std::string::npos) return "";
  const size_t open = t.rfind('"', at), close = t.find('"', at);
  if (open == std::string::npos || close == std::string::npos) return "";
  return t.substr(open + 1, close - open - 1);
}

std::string kernel_of(const cuda::CudaExecutable& exe, const std::string& node) {
  for (const auto& pl : exe.placement())
    if (pl.node == node) return pl.kernel;
  return "";
}

int PlannedRun::relayouts(const std::string& v) const {
  int n = 0;
  for (const auto& [kind, label] : steps)
    n += kind == "relayout" && (v.empty() || label.find("'" + v + "'") != std::string::npos);
  return n;
}

PlannedRun plan_and_run(const Graph& g, const std::vector<Tensor>& inputs, Precision p) {
  cuda::CudaOptions o;
  o.precision = p;
  PlannedRun r;
  r.exe = cuda::CudaBackend(o).compile_cuda(g);
  StepLog log;
  r.exe->set_step_observer(&log);
  r.exe->run(inputs);
  r.exe->set_step_observer(nullptr);
  r.steps = std::move(log.steps);
  return r;
}

}  // namespace fusec::test

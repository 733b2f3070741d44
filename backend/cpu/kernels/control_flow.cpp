// CPU kernels for If and Loop: each runs its body (ir/subgraph.h) on the reference backend and
// hands back what the body made, whatever its shape (Writes::Itself). The body's inputs are the
// op's own (Loop: iteration number, condition, loop-carried values), then the captured values.
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels/common.h"
#include "ir/shape_inference.h"
#include "ir/subgraph.h"

namespace fusec::cpu {

namespace {

/// A body compiled for one set of input types, compiled again when they change (a loop-carried
/// value may change shape from one iteration to the next).
class BodyRunner {
 public:
  explicit BodyRunner(const Graph& body) : body_(body) {}

  std::vector<Tensor> run(const KernelContext& ctx, const std::vector<Tensor>& inputs) {
    if (inputs.size() != body_.inputs.size())
      ctx.fail("its body takes " + std::to_string(body_.inputs.size()) + " inputs; the op gives it " +
               std::to_string(inputs.size()));
    std::vector<std::pair<DType, std::vector<int64_t>>> sig;
    for (const Tensor& t : inputs) sig.emplace_back(t.dtype(), t.dims());
    if (!exe_ || sig != sig_) {
      auto g = body_.clone();
      for (size_t i = 0; i < inputs.size(); ++i) g->inputs[i]->type = {inputs[i].dtype(), shape_of(inputs[i].dims())};
      // What the body's values were inferred or declared to be at import must not constrain these.
      for (Value* v : g->values())
        if (v->producer && !v->is_initializer()) v->type.shape.reset();
      infer_shapes(*g, evaluate_node);
      exe_ = CpuBackend().compile(*g);
      sig_ = std::move(sig);
    }
    std::vector<Tensor> outs = exe_->run(inputs);
    // A body output that is one of its inputs (a branch handing back a captured value) shares that
    // input's storage, which the outer plan may reuse once the node has run: a copy.
    for (size_t i = 0; i < outs.size(); ++i)
      if (body_.outputs[i]->is_graph_input) outs[i] = outs[i].clone();
    return outs;
  }

 private:
  const Graph& body_;
  std::unique_ptr<Executable> exe_;
  std::vector<std::pair<DType, std::vector<int64_t>>> sig_;
};

/// An If's or Loop's compiled bodies, kept in its step's cache from one run to the next: compiling
/// a body (a clone, shape inference, a plan) can cost more than running it (SSDlite's
/// post-processing If: 9 ms a run on two cores, compiling each time). A body depends only on the
/// node's attributes and the input types, which BodyRunner checks on every call.
struct CompiledBodies : StepCache::Entry {
  std::mutex mutex;  // held while a body runs: a runner keeps one executable
  std::map<const Graph*, std::unique_ptr<BodyRunner>> runners;
};

/// Runs `body` through the step's kept runner, or through one made for this call outside an
/// executable.
class Bodies {
 public:
  explicit Bodies(const KernelContext& ctx)
      : ctx_(ctx),
        kept_(ctx.cache() ? &ctx.cache()->get<CompiledBodies>([] { return std::make_unique<CompiledBodies>(); })
                          : nullptr) {
    if (kept_) lock_ = std::unique_lock<std::mutex>(kept_->mutex);
  }

  std::vector<Tensor> run(const Graph& body, const std::vector<Tensor>& inputs) {
    auto& runners = kept_ ? kept_->runners : local_;
    auto& r = runners[&body];
    if (!r) r = std::make_unique<BodyRunner>(body);
    return r->run(ctx_, inputs);
  }

 private:
  const KernelContext& ctx_;
  CompiledBodies* kept_;
  std::unique_lock<std::mutex> lock_;
  std::map<const Graph*, std::unique_ptr<BodyRunner>> local_;
};

const Graph& body_of(const KernelContext& ctx, const std::string& attr) {
  const SubGraph* sg = subgraph_attr(ctx.node(), attr);
  if (!sg || !sg->body) ctx.unsupported("its " + attr + " was not imported" + (sg ? ": " + sg->why_not : ""));
  return *sg->body;
}

/// The value of a one-element condition or count.
double scalar_of(const KernelContext& ctx, const Tensor& t, const std::string& what) {
  if (t.numel() != 1) ctx.fail(what + " has " + std::to_string(t.numel()) + " elements, not 1");
  return t.as_double(0);
}

std::vector<Tensor> captured_inputs(const KernelContext& ctx) {
  std::vector<Tensor> t;
  for (size_t i = declared_input_count(ctx.node()); i < ctx.num_inputs(); ++i) t.push_back(ctx.input(i));
  return t;
}

void if_kernel(KernelContext& ctx) {
  const bool then = scalar_of(ctx, ctx.input(0), "the condition") != 0;
  std::vector<Tensor> outs = Bodies(ctx).run(body_of(ctx, then ? "then_branch" : "else_branch"), captured_inputs(ctx));
  if (outs.size() != ctx.num_outputs())
    ctx.fail("its " + std::string(then ? "then" : "else") + "_branch made " + std::to_string(outs.size()) +
             " outputs, the node has " + std::to_string(ctx.num_outputs()));
  for (size_t i = 0; i < outs.size(); ++i)
    if (ctx.has_output(i)) ctx.output(i) = std::move(outs[i]);
}

Tensor scalar(DType t, int64_t v) {
  Tensor s(t, {});
  if (t == DType::Int64)
    s.data<int64_t>()[0] = v;
  else
    s.data<uint8_t>()[0] = v != 0;
  return s;
}

/// Scan output: the iterations' slices stacked on a new axis 0. `declared` types it when the loop
/// ran no iteration.
Tensor stack(const KernelContext& ctx, const std::vector<Tensor>& slices, const Value& declared, size_t k) {
  if (slices.empty()) {
    if (declared.type.dtype == DType::Undefined)
      ctx.fail("ran no iteration, and the type of scan output " + std::to_string(k) + " is not declared");
    std::vector<int64_t> dims = {0};
    if (declared.type.shape)
      for (const Dim& d : *declared.type.shape) dims.push_back(d.is_static() ? d.value : 0);
    return Tensor(declared.type.dtype, dims);
  }
  const Tensor& first = slices[0];
  std::vector<int64_t> dims = {static_cast<int64_t>(slices.size())};
  dims.insert(dims.end(), first.dims().begin(), first.dims().end());
  Tensor out(first.dtype(), dims);
  char* dst = static_cast<char*>(out.raw());
  for (size_t i = 0; i < slices.size(); ++i) {
    if (slices[i].dtype() != first.dtype() || slices[i].dims() != first.dims())
      ctx.fail("scan output " + std::to_string(k) + " is " + dims_str(first.dims()) + " in iteration 0 and " +
               dims_str(slices[i].dims()) + " in iteration " + std::to_string(i) + ": the slices cannot be stacked");
    std::memcpy(dst + i * first.nbytes(), slices[i].raw(), first.nbytes());
  }
  return out;
}

/// A loop runs while its condition holds, at most its trip count M times; past this many iterations
/// it is taken for one that never ends, or whose M is corrupt (an error, not a hang).
constexpr int64_t kMaxIterations = 10'000'000;

void loop_kernel(KernelContext& ctx) {
  const Graph& body = body_of(ctx, "body");
  const size_t declared = declared_input_count(ctx.node());
  const size_t carried = declared < 2 ? 0 : declared - 2;
  if (body.outputs.size() < 1 + carried)
    ctx.fail("its body gives " + std::to_string(body.outputs.size()) + " outputs, too few for a condition and " +
             std::to_string(carried) + " loop-carried values");
  const size_t scans = body.outputs.size() - 1 - carried;
  if (ctx.num_outputs() != carried + scans)
    ctx.fail("it has " + std::to_string(ctx.num_outputs()) + " outputs; its body makes " + std::to_string(carried) +
             " loop-carried values and " + std::to_string(scans) + " scan outputs");
  std::optional<int64_t> trips;
  if (ctx.has_input(0)) trips = static_cast<int64_t>(scalar_of(ctx, ctx.input(0), "the trip count M"));
  bool go = !ctx.has_input(1) || scalar_of(ctx, ctx.input(1), "the condition") != 0;
  std::vector<Tensor> v;
  for (size_t j = 0; j < carried; ++j) {
    if (!ctx.has_input(2 + j)) ctx.fail("loop-carried value " + std::to_string(j) + " has no initial value");
    v.push_back(ctx.input(2 + j));
  }
  const std::vector<Tensor> captured = captured_inputs(ctx);
  std::vector<std::vector<Tensor>> slices(scans);
  Bodies bodies(ctx);
  bool iterated = false;
  for (int64_t i = 0; go && (!trips || i < *trips); ++i, iterated = true) {
    if (i >= kMaxIterations)
      ctx.fail("ran " + std::to_string(i) + " iterations, the most fusec runs (" +
               (trips ? "its trip count M is " + std::to_string(*trips)
                      : std::string("it has no trip count, and its condition never turned false")) +
               ")");
    std::vector<Tensor> ins = {scalar(DType::Int64, i), scalar(DType::Bool, 1)};
    ins.insert(ins.end(), v.begin(), v.end());
    ins.insert(ins.end(), captured.begin(), captured.end());
    std::vector<Tensor> outs = bodies.run(body, ins);
    go = scalar_of(ctx, outs[0], "the body's condition output") != 0;
    for (size_t j = 0; j < carried; ++j) v[j] = std::move(outs[1 + j]);
    for (size_t k = 0; k < scans; ++k) slices[k].push_back(std::move(outs[1 + carried + k]));
  }
  // After no iteration a loop-carried value is still the node's input, whose storage the outer plan
  // may reuse: a copy.
  for (size_t j = 0; j < carried; ++j)
    if (ctx.has_output(j)) ctx.output(j) = iterated ? std::move(v[j]) : v[j].clone();
  for (size_t k = 0; k < scans; ++k)
    if (ctx.has_output(carried + k)) ctx.output(carried + k) = stack(ctx, slices[k], *body.outputs[1 + carried + k], k);
}

}  // namespace

void register_control_flow_kernels(KernelRegistry& r) {
  r.add("If", if_kernel, "", Writes::Itself);
  r.add("Loop", loop_kernel, "", Writes::Itself);
}

}  // namespace fusec::cpu

// Channels-last regions: the questions build_plan() asks to fill in the facts for the layout rule
// (layout_rule.h, a pure function tested without a GPU), and the relayout steps at a region's
// edges. Kept out of the planner so that the layout policy (which storage types run NHWC, which
// ops follow their input) reads in one place.
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/executor/executable.h"
#include "backend/cuda/executor/layout_rule.h"
#include "backend/cuda/ops/conv/conv_pointwise_route.h"
#include "backend/cuda/ops/movement/movement.cuh"
#include "ir/error.h"
#include "ir/switches.h"

namespace fusec::cuda::executor {

bool Impl::layout_free(const Slot& s) { return cuda::layout_free(s.dims); }

bool Impl::nhwc_dtype(DType t) const {
  if (t == DType::Float32 && opts_.precision == Precision::FP32) {
    // Strict fp32 stays NCHW unless asked (FUSEC_CHANNELS_LAST=all): cuDNN's NHWC fp32 kernels
    // ran ResNet-50 at batch 16 slower than its NCHW ones.
    const char* env = env_switch("FUSEC_CHANNELS_LAST");
    return env && std::string(env) == "all";
  }
  return t == DType::Float16 || t == DType::BFloat16 || (t == DType::Float32 && opts_.precision == Precision::TF32);
}

/// Elementwise nodes that compute the same on channels-last memory (elementwise_follows: inputs
/// of the output's dims or layout-free).
bool Impl::layout_agnostic(const Node& n) {
  static const std::unordered_set<std::string> ops = {
      "Relu",        "Add",  "Sub",      "Mul",       "Div",
      "Sigmoid",     "Tanh", "Clip",     "LeakyRelu", "HardSwish",
      "HardSigmoid", "Gelu", "Erf",      "Sqrt",      "Exp",
      "Neg",         "Abs",  "Max",      "Min",       "Sum",
      "Elu",         "Selu", "Softplus", "Mish",      "Swish",
      "FusedElementwise"};
  if (!ops.count(n.op_type) || n.outputs.size() != 1 || !n.outputs[0] || !n.outputs[0]->type.shape) return false;
  std::vector<std::vector<int64_t>> ins;
  for (Value* v : n.inputs) {
    if (!v) continue;
    if (!v->type.shape || !is_static(*v->type.shape)) return false;
    ins.push_back(static_dims(*v->type.shape));
    // Broadcasting before opset 7 aligns B at an `axis` of NCHW dims: equal dims only.
    if (n.has_attr("broadcast") && *v->type.shape != *n.outputs[0]->type.shape) return false;
  }
  return is_static(*n.outputs[0]->type.shape) && elementwise_follows(ins, static_dims(*n.outputs[0]->type.shape));
}

/// Inputs that are activations (laid out like the output); weights and bias stay as they are.
bool Impl::activation_input(const Node& n, size_t i) {
  if (layout_agnostic(n) || (n.op_type == "Concat" && n.domain.empty())) return true;
  return i == 0 || (n.op_type == "FusedConv" && i == 3);
}

bool Impl::activations_mostly_nhwc(const Node& n, const std::unordered_map<const Value*, int>& slot_of) const {
  std::vector<std::pair<int64_t, bool>> activations;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (!n.inputs[i] || !activation_input(n, i)) continue;
    const Slot& s = slots_[slot_of.at(n.inputs[i])];
    if (layout_free(s)) continue;
    int64_t elements = 1;
    for (int64_t d : s.dims) elements *= d;
    activations.push_back({elements, s.nhwc});
  }
  return majority_channels_last(activations);
}

bool Impl::conv_pads_channels(const Node& n, const Slot& x) {
  const bool conv = (n.op_type == "Conv" && n.domain.empty()) || (n.op_type == "FusedConv" && n.domain == "ai.fusec");
  if (!conv || !channels_last_rank(x.dims.size()) || n.outputs.empty() || !n.outputs[0] || !n.outputs[0]->type.shape ||
      !is_static(*n.outputs[0]->type.shape))
    return false;
  const int64_t group = n.attr_int("group", 1), cin = x.dims[1];
  const int64_t cout = static_dims(*n.outputs[0]->type.shape)[1];
  if (group < 1 || (group > 1 && group == cin)) return false;  // depthwise: fusec's own kernels, any width
  // A 1x1 conv of such widths runs on fusec's narrow-channel kernel, unpadded.
  if (n.inputs.size() > 1 && n.inputs[1] && n.inputs[1]->type.shape && is_static(*n.inputs[1]->type.shape) &&
      pointwise_route_planned() &&
      pointwise_narrow_applies(static_dims(*n.inputs[1]->type.shape), group, n.attr_ints("strides"),
                               n.attr_ints("pads"), x.dtype))
    return false;
  const int64_t v = 16 / static_cast<int64_t>(dtype_size(x.dtype));
  return (cin / group) % v != 0 || (cout / group) % v != 0;
}

bool Impl::consumers_take_nhwc(const Value& v, const Graph& g, bool concat_counts) const {
  (void)g;
  const auto& reg = CudaOpRegistry::global();
  if (v.type.shape && channels_last_rank(v.type.shape->size()) && is_static(*v.type.shape)) {
    Slot probe;
    probe.dims = static_dims(*v.type.shape);
    if (layout_free(probe)) return true;
  }
  for (const Node* c : v.consumers) {
    // A permute to N,H,W,C dims reads channels-last memory as it is (transpose_view).
    const bool permute_view = c->op_type == "Transpose" && c->domain.empty() &&
                              transpose_view(c->attr_ints("perm"), true, false) == TransposeView::FromChannelsLast;
    if (!concat_counts && c->op_type == "Concat" && c->domain.empty()) return false;
    if (!reg.find_channels_last(c->domain, c->op_type) && !layout_agnostic(*c) && !permute_view) return false;
  }
  return true;
}

/// The slot holding `v` in the wanted layout; a relayout step (appended now, so it runs before
/// the node being planned) makes it on first use.
int Impl::layout_slot(Value* v, bool nhwc, std::unordered_map<const Value*, int>& slot_of) {
  int s = slot_of.at(v);
  if (slots_[s].nhwc == nhwc || layout_free(slots_[s])) return s;
  auto key = std::make_pair(v, nhwc);
  if (auto it = relayouts_.find(key); it != relayouts_.end()) return it->second;
  Slot copy = slots_[s];
  copy.place = Slot::Place::Arena;
  copy.host_constant = nullptr;
  copy.nhwc = nhwc;
  copy.pinned = false;
  copy.first = copy.last = -1;
  slots_.push_back(copy);
  int t = static_cast<int>(slots_.size()) - 1;
  // N, C, spatial...: the copy walks the output in memory order, reading the input by strides.
  const auto& d = copy.dims;
  const size_t rank = d.size();
  int64_t spatial = 1;
  for (size_t i = 2; i < rank; ++i) spatial *= d[i];
  const int64_t N = d[0], C = d[1];
  // Each spatial dim's stride among the spatial dims alone (packed, innermost last).
  std::vector<int64_t> sp_stride(rank, 1);
  for (size_t i = rank - 1; i-- > 2;) sp_stride[i] = sp_stride[i + 1] * d[i + 1];
  std::vector<int64_t> out_dims, strides;
  if (nhwc) {  // output N,spatial...,C read from NCHW
    out_dims = nhwc_order(d, rank);
    strides.push_back(C * spatial);
    for (size_t i = 2; i < rank; ++i) strides.push_back(sp_stride[i]);
    strides.push_back(spatial);
  } else {  // output N,C,spatial... read from channels-last
    out_dims = d;
    strides = {spatial * C, 1};
    for (size_t i = 2; i < rank; ++i) strides.push_back(sp_stride[i] * C);
  }
  Step st;
  st.kind = Step::Kind::Relayout;
  st.label = std::string(nhwc ? "to NHWC" : "to NCHW") + " '" + v->name + "'";
  st.in_slots = {s};
  st.out_slots = {t};
  bool ok = true;
  st.relayout = plan_strided_copy(out_dims, strides, 0, dtype_size(copy.dtype), N * C * spatial, &ok);
  if (!ok) internal_error("cannot plan the layout change of '" + v->name + "'");
  steps_.push_back(std::move(st));
  relayouts_[key] = t;
  return t;
}

}  // namespace fusec::cuda::executor

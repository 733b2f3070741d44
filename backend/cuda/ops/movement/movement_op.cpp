// Entry points for the data movement family: Transpose, Slice, Expand, Tile, DepthToSpace,
// SpaceToDepth (one planned strided copy each), Concat, Split, Gather, GatherElements, GatherND,
// ScatterND, ScatterElements (and Scatter), TopK, Col2Im, Pad, Trilu, CumSum, CumProd, Resize and
// Upsample. Every shape operand (starts, pads, axes, scales, ...) is read here from the node's
// constant inputs at plan time; a runtime shape operand leaves the node to the CPU reference. Most
// ops only move bytes, so any dtype of 1, 2, 4 or 8 bytes runs.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <type_traits>
#include <utility>

#include "backend/axis_layout.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/ops/movement/gather.cuh"
#include "backend/cuda/ops/movement/movement.cuh"
#include "backend/cuda/ops/movement/resize.cuh"
#include "backend/cuda/ops/movement/scatter.cuh"
#include "backend/cuda/ops/movement/col2im.cuh"
#include "backend/cuda/ops/movement/topk.cuh"
#include "ir/ops/movement_util.h"
#include "ir/ops/resize_taps.h"

namespace fusec::cuda {

namespace {

using Dims = std::vector<int64_t>;

std::unique_ptr<CudaOp> refuse(std::string* why, const std::string& msg) {
  if (why) *why = msg;
  return nullptr;
}

int64_t prod(const Dims& d, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e && i < d.size(); ++i) p *= d[i];
  return p;
}

Dims contiguous(const Dims& d) {
  Dims s(d.size());
  int64_t st = 1;
  for (size_t i = d.size(); i-- > 0;) {
    s[i] = st;
    st *= d[i];
  }
  return s;
}

/// Input 0 and output 0 present with the same storage dtype of 1, 2, 4 or 8 bytes.
bool byte_movable(const PlanContext& c, std::string* why) {
  if (!c.has_input(0) || !c.has_output(0)) {
    *why = "missing input or output";
    return false;
  }
  const DType t = c.in_dtype(0);
  if (t != c.out_dtype(0)) {
    *why =
        std::string("input ") + dtype_name(t) + " and output " + dtype_name(c.out_dtype(0)) + " storage types differ";
    return false;
  }
  const size_t es = dtype_size(t);
  if (es != 1 && es != 2 && es != 4 && es != 8) {
    *why = std::string("unsupported element type ") + dtype_name(t);
    return false;
  }
  return true;
}

/// Values of a constant shape-like input, or false (with *why) when it is computed at run time.
bool const_ints(const PlanContext& c, size_t i, const char* what, Dims* out, std::string* why) {
  const Tensor* t = c.constant(i);
  if (!t) {
    *why = std::string(what) + " is computed at run time (not a constant)";
    return false;
  }
  *out = t->to_int64_vector();
  return true;
}

/// Runs f, turning a schema/validation error into a refusal: the CPU reference then reports it.
template <typename F>
bool checked(std::string* why, F&& f) {
  try {
    f();
    return true;
  } catch (const std::exception& e) {
    *why = e.what();
    return false;
  }
}

/// A scalar constant in the storage type of the data.
bool storage_bits(const Tensor& t, DType storage, uint64_t* bits) {
  const bool is_int = !is_float(t.dtype());
  return scalar_bits(is_int ? 0.0 : t.as_double(0), is_int ? t.as_int64(0) : 0, is_int, storage, bits);
}

// ---------------------------------------------------------------- strided copy ops

class StridedCopyOp : public CudaOp {
 public:
  StridedCopyOp(StridedCopyPlan p, std::string op) : p_(p), op_(std::move(op)) {}
  void launch(const LaunchArgs& a) override { launch_strided_copy(p_, a.inputs[0].data, a.outputs[0].data, a.stream); }
  std::string kernel_name() const override { return op_ + ": " + p_.describe(); }

 private:
  StridedCopyPlan p_;
  std::string op_;
};

std::unique_ptr<CudaOp> make_copy(const PlanContext& c, std::string* why, const Dims& dims, const Dims& strides,
                                  int64_t base, const char* op) {
  bool ok = true;
  StridedCopyPlan p = plan_strided_copy(dims, strides, base, dtype_size(c.in_dtype(0)), prod(c.in_dims(0), 0, 99), &ok);
  if (!ok) return refuse(why, "more than 8 dims remain after merging");
  return std::make_unique<StridedCopyOp>(p, op);
}

std::unique_ptr<CudaOp> make_transpose(const PlanContext& c, std::string* why) {
  if (!byte_movable(c, why)) return nullptr;
  const Dims& in = c.in_dims(0);
  const int64_t r = static_cast<int64_t>(in.size());
  Dims perm = c.has_attr("perm") ? c.attr_ints("perm") : Dims{};
  if (perm.empty())
    for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
  if (static_cast<int64_t>(perm.size()) != r) return refuse(why, "perm does not match the input rank");
  const Dims xs = contiguous(in);
  Dims st(r), dims(r);
  for (int64_t i = 0; i < r; ++i) {
    if (perm[i] < 0 || perm[i] >= r) return refuse(why, "perm is not a permutation");
    st[i] = xs[perm[i]];
    dims[i] = in[perm[i]];
  }
  if (dims != c.out_dims(0)) return refuse(why, "output dims disagree with perm");
  return make_copy(c, why, dims, st, 0, "Transpose");
}

std::unique_ptr<CudaOp> make_slice(const PlanContext& c, std::string* why) {
  if (!byte_movable(c, why)) return nullptr;
  Dims starts, ends, axes, steps;
  if (c.opset() < 10) {
    starts = c.attr_ints("starts");
    ends = c.attr_ints("ends");
    if (c.has_attr("axes")) axes = c.attr_ints("axes");
  } else {
    if (!const_ints(c, 1, "starts", &starts, why) || !const_ints(c, 2, "ends", &ends, why)) return nullptr;
    if (c.has_input(3) && !const_ints(c, 3, "axes", &axes, why)) return nullptr;
    if (c.has_input(4) && !const_ints(c, 4, "steps", &steps, why)) return nullptr;
  }
  const Dims& in = c.in_dims(0);
  movement::SliceParams p;
  if (!checked(why, [&] { p = movement::compute_slice(in, starts, ends, axes, steps, c); })) return nullptr;
  if (p.out_dims != c.out_dims(0)) return refuse(why, "output dims disagree with the slice");
  const Dims xs = contiguous(in);
  Dims st(in.size());
  int64_t base = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    st[i] = xs[i] * p.step[i];
    base += p.start[i] * xs[i];
  }
  return make_copy(c, why, p.out_dims, st, base, "Slice");
}

std::unique_ptr<CudaOp> make_expand(const PlanContext& c, std::string* why) {
  if (!byte_movable(c, why)) return nullptr;
  // The output dims are static at plan time, so the shape operand's value is never needed.
  const Dims& in = c.in_dims(0);
  const Dims& out = c.out_dims(0);
  if (out.size() < in.size()) return refuse(why, "output rank below input rank");
  const Dims xs = contiguous(in);
  Dims st(out.size(), 0);
  for (size_t i = 0; i < in.size(); ++i) {
    const size_t o = out.size() - in.size() + i;
    if (in[i] == out[o])
      st[o] = xs[i];
    else if (in[i] != 1)
      return refuse(why, "input dims do not broadcast to the output");
  }
  return make_copy(c, why, out, st, 0, "Expand");
}

std::unique_ptr<CudaOp> make_tile(const PlanContext& c, std::string* why) {
  if (!byte_movable(c, why)) return nullptr;
  const Dims& in = c.in_dims(0);
  const Dims& out = c.out_dims(0);
  if (in.size() != out.size()) return refuse(why, "output rank differs from input rank");
  const Dims xs = contiguous(in);
  // Output dim i (= repeats_i · d_i) viewed as [repeats_i, d_i] reads [0, stride_i].
  Dims dims, st;
  for (size_t i = 0; i < in.size(); ++i) {
    const int64_t rep = in[i] == 0 ? 0 : out[i] / in[i];
    if (in[i] != 0 && rep * in[i] != out[i]) return refuse(why, "output dims are not multiples of the input's");
    dims.push_back(rep);
    st.push_back(0);
    dims.push_back(in[i]);
    st.push_back(xs[i]);
  }
  return make_copy(c, why, dims, st, 0, "Tile");
}

std::unique_ptr<CudaOp> make_depth_to_space(const PlanContext& c, std::string* why) {
  if (!byte_movable(c, why)) return nullptr;
  const Dims& x = c.in_dims(0);
  if (x.size() != 4) return refuse(why, "input must have rank 4");
  const int64_t b = c.attr_int("blocksize");
  if (b <= 0 || x[1] % (b * b)) return refuse(why, "channels not divisible by blocksize^2");
  const bool crd = c.opset() >= 11 && c.attr_string("mode") == "CRD";
  const int64_t N = x[0], C = x[1], H = x[2], W = x[3], Co = C / (b * b);
  if (c.out_dims(0) != Dims{N, Co, H * b, W * b}) return refuse(why, "unexpected output dims");
  // Output viewed as [N, Co, H, b1, W, b2]; strides of those into the input.
  int64_t sC, s1, s2;
  if (crd) {  // input [N, Co, b1, b2, H, W]
    sC = b * b * H * W;
    s1 = b * H * W;
    s2 = H * W;
  } else {  // DCR: input [N, b1, b2, Co, H, W]
    s1 = b * Co * H * W;
    s2 = Co * H * W;
    sC = H * W;
  }
  return make_copy(c, why, {N, Co, H, b, W, b}, {C * H * W, sC, W, s1, 1, s2}, 0,
                   crd ? "DepthToSpace CRD" : "DepthToSpace DCR");
}

std::unique_ptr<CudaOp> make_space_to_depth(const PlanContext& c, std::string* why) {
  if (!byte_movable(c, why)) return nullptr;
  const Dims& x = c.in_dims(0);
  if (x.size() != 4) return refuse(why, "input must have rank 4");
  const int64_t b = c.attr_int("blocksize");
  if (b <= 0 || x[2] % b || x[3] % b) return refuse(why, "spatial dims not divisible by blocksize");
  const bool crd = c.opset() >= 28 && c.attr_string("mode") == "CRD";
  const int64_t N = x[0], C = x[1], H = x[2], W = x[3], Ho = H / b, Wo = W / b;
  if (c.out_dims(0) != Dims{N, C * b * b, Ho, Wo}) return refuse(why, "unexpected output dims");
  // Input viewed as [N, C, Ho, b1, Wo, b2]; output [N, b1, b2, C, Ho, Wo] (DCR) or [N, C, b1, b2, Ho, Wo] (CRD).
  if (crd) return make_copy(c, why, {N, C, b, b, Ho, Wo}, {C * H * W, H * W, W, 1, b * W, b}, 0, "SpaceToDepth CRD");
  return make_copy(c, why, {N, b, b, C, Ho, Wo}, {C * H * W, W, 1, H * W, b * W, b}, 0, "SpaceToDepth DCR");
}

// ---------------------------------------------------------------- Concat, Split

class ConcatOp : public CudaOp {
 public:
  explicit ConcatOp(PartsPlan p) : p_(std::move(p)), parts_(p_.width.size(), nullptr) {}
  void launch(const LaunchArgs& a) override {
    for (size_t i = 0; i < parts_.size(); ++i) parts_[i] = a.inputs[i].data;
    launch_concat(p_, parts_.data(), parts_.size(), a.outputs[0].data, a.stream);
  }
  std::string kernel_name() const override {
    return "Concat: one launch per 32 inputs, " + std::to_string(p_.vec) + "B vectors";
  }

 private:
  PartsPlan p_;
  std::vector<const void*> parts_;  // sized at plan time; launch only refills it (no allocation)
};

class SplitOp : public CudaOp {
 public:
  explicit SplitOp(PartsPlan p) : p_(std::move(p)), parts_(p_.width.size(), nullptr) {}
  void launch(const LaunchArgs& a) override {
    for (size_t i = 0; i < parts_.size(); ++i) parts_[i] = a.outputs[i].data;
    launch_split(p_, a.inputs[0].data, parts_.data(), parts_.size(), a.stream);
  }
  std::string kernel_name() const override {
    return "Split: one launch per 32 outputs, " + std::to_string(p_.vec) + "B vectors";
  }

 private:
  PartsPlan p_;
  std::vector<void*> parts_;
};

/// Concat over dims in memory order: `order` maps a memory position to the node's axis (identity
/// for the node's own layout; N,H,W,C for channels-last 4-D values).
std::unique_ptr<CudaOp> concat_in_order(const PlanContext& c, std::string* why, const std::vector<int64_t>& order) {
  if (!c.has_output(0) || c.num_inputs() == 0) return refuse(why, "missing input or output");
  const DType t = c.out_dtype(0);
  const size_t es = dtype_size(t);
  if (es != 1 && es != 2 && es != 4 && es != 8)
    return refuse(why, std::string("unsupported element type ") + dtype_name(t));
  const int64_t r = static_cast<int64_t>(c.out_dims(0).size());
  if (static_cast<int64_t>(order.size()) != r) return refuse(why, "the output's rank does not match its layout");
  auto in_memory_order = [&](const Dims& d) {
    Dims m(d.size());
    for (size_t i = 0; i < d.size(); ++i) m[i] = d[order[i]];
    return m;
  };
  int64_t node_axis = 0;
  if (!checked(why, [&] { node_axis = normalize_axis(c.attr_int("axis"), r, c); })) return nullptr;
  const int64_t ax = std::find(order.begin(), order.end(), node_axis) - order.begin();
  const Dims out = in_memory_order(c.out_dims(0));
  const int64_t rows = prod(out, 0, ax), inner = prod(out, ax + 1, r);
  Dims width;
  int64_t total = 0;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) return refuse(why, "an input is left out");
    if (c.in_dtype(i) != t) return refuse(why, "inputs have different storage types");
    if (static_cast<int64_t>(c.in_dims(i).size()) != r) return refuse(why, "inputs have different ranks");
    const Dims d = in_memory_order(c.in_dims(i));
    width.push_back(d[ax] * inner);
    total += d[ax];
  }
  if (total != out[ax]) return refuse(why, "input dims do not add up to the output");
  return std::make_unique<ConcatOp>(plan_parts(rows, out[ax] * inner, width, es));
}

std::unique_ptr<CudaOp> make_concat(const PlanContext& c, std::string* why) {
  std::vector<int64_t> order(c.has_output(0) ? c.out_dims(0).size() : 0);
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  return concat_in_order(c, why, order);
}

/// Concat of channels-last 4-D activations: the same copy over N,H,W,C memory (a channel concat
/// writes each input's C-wide rows side by side).
std::unique_ptr<CudaOp> make_concat_channels_last(const PlanContext& c, std::string* why) {
  if (!c.has_output(0) || !channels_last_rank(c.out_dims(0).size()))
    return refuse(why, "channels-last Concat is 4-D or 5-D only");
  return concat_in_order(c, why, channels_last_perm(c.out_dims(0).size()));
}

std::unique_ptr<CudaOp> make_split(const PlanContext& c, std::string* why) {
  if (!c.has_input(0) || c.num_outputs() == 0) return refuse(why, "missing input or output");
  const DType t = c.in_dtype(0);
  const size_t es = dtype_size(t);
  if (es != 1 && es != 2 && es != 4 && es != 8)
    return refuse(why, std::string("unsupported element type ") + dtype_name(t));
  const Dims& in = c.in_dims(0);
  const int64_t r = static_cast<int64_t>(in.size());
  int64_t ax = 0;
  if (!checked(why, [&] { ax = normalize_axis(c.attr_int("axis"), r, c); })) return nullptr;
  const int64_t rows = prod(in, 0, ax), inner = prod(in, ax + 1, r);
  // The sizes come from the static output dims, so a runtime `split` operand is fine.
  Dims width;
  int64_t total = 0;
  for (size_t i = 0; i < c.num_outputs(); ++i) {
    if (!c.has_output(i)) return refuse(why, "an output is left out");
    if (c.out_dtype(i) != t) return refuse(why, "outputs have different storage types");
    const Dims& d = c.out_dims(i);
    if (static_cast<int64_t>(d.size()) != r) return refuse(why, "outputs have different ranks");
    width.push_back(d[ax] * inner);
    total += d[ax];
  }
  if (total != in[ax]) return refuse(why, "output dims do not add up to the input");
  return std::make_unique<SplitOp>(plan_parts(rows, in[ax] * inner, width, es));
}

// ---------------------------------------------------------------- TopK

class TopKOp : public CudaOp {
 public:
  explicit TopKOp(TopKPlan p) : p_(p) {}
  void launch(const LaunchArgs& a) override {
    auto* idx = a.outputs.size() > 1 && a.outputs[1].defined() ? static_cast<int64_t*>(a.outputs[1].data) : nullptr;
    require_launched(launch_topk(p_, a.inputs[0].data, a.outputs[0].data, idx, a.stream), "TopK");
  }
  std::string kernel_name() const override {
    return std::string("TopK: ") + (topk_block_a_row(p_) ? "a block a row, " : "a thread a row, ") +
           std::to_string(p_.k) + " passes over " + std::to_string(p_.n);
  }

 private:
  TopKPlan p_;
};

std::unique_ptr<CudaOp> make_topk(const PlanContext& c, std::string* why) {
  if (!c.has_output(0)) return refuse(why, "missing output");
  const DType t = c.in_dtype(0);
  bool typed = false;
  for (DType ok : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::Int32, DType::Int64})
    typed = typed || t == ok;
  if (!typed) return refuse(why, std::string("no CUDA TopK for ") + dtype_name(t));
  if (c.out_dtype(0) != t || (c.has_output(1) && c.out_dtype(1) != DType::Int64))
    return refuse(why, "outputs of unexpected types");
  const Dims& x = c.in_dims(0);
  const int64_t r = static_cast<int64_t>(x.size());
  int64_t ax = 0;
  if (!checked(why, [&] { ax = normalize_axis(c.attr_int("axis"), r, c); })) return nullptr;
  TopKPlan p;
  p.dtype = t;
  p.largest = c.opset() < 11 || c.attr_int("largest") != 0;
  p.n = x[ax];
  p.k = c.out_dims(0)[ax];
  p.outer = prod(x, 0, ax);
  p.inner = prod(x, ax + 1, r);
  if (p.k > p.n) return refuse(why, "k is larger than the axis length");
  if (topk_thread_work(p) > kTopKMaxPasses)
    return refuse(why, "k passes over the axis would read " + std::to_string(topk_thread_work(p)) +
                           " elements a thread, over " + std::to_string(kTopKMaxPasses) +
                           " (the CPU reference's partial sort is faster there)");
  return std::make_unique<TopKOp>(p);
}

// ---------------------------------------------------------------- Col2Im

class Col2ImOp : public CudaOp {
 public:
  explicit Col2ImOp(Col2ImPlan p) : p_(p) {}
  void launch(const LaunchArgs& a) override {
    require_launched(launch_col2im(p_, a.inputs[0].data, a.outputs[0].data, a.stream), "Col2Im");
  }
  std::string kernel_name() const override {
    return "Col2Im: a thread an output value, over " + std::to_string(p_.per_block) + " block offsets";
  }

 private:
  Col2ImPlan p_;
};

/// The plan from constant image and block shapes; anything the CPU reference would refuse is
/// refused here too, so that the reference names the fault.
std::unique_ptr<CudaOp> make_col2im(const PlanContext& c, std::string* why) {
  const DType t = c.in_dtype(0);
  if (t != DType::Float32 && t != DType::Float16 && t != DType::BFloat16 && t != DType::Float64)
    return refuse(why, std::string("no CUDA Col2Im for ") + dtype_name(t));
  if (!c.has_output(0) || c.out_dtype(0) != t) return refuse(why, "the output is not of the input's type");
  Dims image, block;
  if (!const_ints(c, 1, "image_shape", &image, why) || !const_ints(c, 2, "block_shape", &block, why)) return nullptr;
  const int64_t n = static_cast<int64_t>(image.size());
  const Dims& x = c.in_dims(0);
  if (n < 1 || n > kCol2ImMaxDims || static_cast<int64_t>(block.size()) != n || x.size() != 3)
    return refuse(why, "an input of rank other than 3, or image and block shapes of 0 or more than " +
                           std::to_string(kCol2ImMaxDims) + " dims, or of different lengths");
  Dims dil = c.attr_ints("dilations"), pads = c.attr_ints("pads"), str = c.attr_ints("strides");
  if (dil.empty()) dil.assign(static_cast<size_t>(n), 1);
  if (pads.empty()) pads.assign(static_cast<size_t>(2 * n), 0);
  if (str.empty()) str.assign(static_cast<size_t>(n), 1);
  if (static_cast<int64_t>(dil.size()) != n || static_cast<int64_t>(pads.size()) != 2 * n ||
      static_cast<int64_t>(str.size()) != n)
    return refuse(why, "dilations, pads or strides of another length than the image's dims");
  Col2ImPlan p;
  p.dtype = t;
  p.dims = static_cast<int>(n);
  p.pixels = p.per_block = p.positions = 1;
  for (int64_t d = 0; d < n; ++d) {
    const size_t i = static_cast<size_t>(d);
    if (image[i] < 1 || block[i] < 1 || dil[i] < 1 || str[i] < 1 || pads[i] < 0 || pads[i + n] < 0 ||
        image[i] > (int64_t{1} << 31) || block[i] > (int64_t{1} << 31) || dil[i] > (int64_t{1} << 31) ||
        pads[i] > (int64_t{1} << 31) || pads[i + n] > (int64_t{1} << 31))
      return refuse(why, "image_shape, block_shape, dilations, strides or pads out of range");
    const int64_t span = dil[i] * (block[i] - 1) + 1, padded = image[i] + pads[i] + pads[i + n];
    if (padded < span) return refuse(why, "the block is larger than the padded image");
    p.image[d] = image[i];
    p.block[d] = block[i];
    p.grid[d] = (padded - span) / str[i] + 1;
    p.stride[d] = str[i];
    p.dilation[d] = dil[i];
    p.pad_begin[d] = pads[i];
    if (__builtin_mul_overflow(p.pixels, image[i], &p.pixels) ||
        __builtin_mul_overflow(p.per_block, block[i], &p.per_block) ||
        __builtin_mul_overflow(p.positions, p.grid[d], &p.positions))
      return refuse(why, "the image, block or block grid is too large");
  }
  if (x[1] % p.per_block || x[2] != p.positions || __builtin_mul_overflow(x[0], x[1] / p.per_block, &p.images))
    return refuse(why, "the input's dims do not fit the image and block shapes");
  Dims want{x[0], x[1] / p.per_block};
  want.insert(want.end(), image.begin(), image.end());
  if (c.out_dims(0) != want) return refuse(why, "the output is not [N, C, image_shape...]");
  return std::make_unique<Col2ImOp>(p);
}

// ---------------------------------------------------------------- Gather family

/// An op that launches `f(plan, its first N inputs' data, output 0's data, stream, error site)`:
/// the Gather family (data, indices) and the Scatter family (data, indices, updates, and the
/// workspace after the error site where it asks for one).
template <size_t N, typename Plan, typename Launch>
class IndexedOp : public CudaOp {
 public:
  IndexedOp(Plan p, std::string name, Launch f, size_t workspace = 0)
      : p_(p), name_(std::move(name)), f_(f), workspace_(workspace) {}
  void launch(const LaunchArgs& a) override { call(a, std::make_index_sequence<N>{}); }
  std::string kernel_name() const override { return name_; }
  size_t workspace_bytes() const override { return workspace_; }

 private:
  template <size_t... I>
  void call(const LaunchArgs& a, std::index_sequence<I...>) {
    if constexpr (std::is_invocable_v<Launch&, const Plan&, decltype(a.inputs[I].data)..., void*, decltype(a.stream),
                                      const DeviceErrorSite&, void*>)
      f_(p_, a.inputs[I].data..., a.outputs[0].data, a.stream, a.error, a.workspace);
    else
      f_(p_, a.inputs[I].data..., a.outputs[0].data, a.stream, a.error);
  }
  Plan p_;
  std::string name_;
  Launch f_;
  size_t workspace_;
};

template <typename Plan, typename Launch>
std::unique_ptr<CudaOp> gather_op(Plan p, std::string name, Launch f) {
  return std::make_unique<IndexedOp<2, Plan, Launch>>(p, std::move(name), f);
}

bool index_input(const PlanContext& c, std::string* why, bool int32_ok) {
  if (!c.has_input(1)) {
    *why = "missing indices";
    return false;
  }
  const DType t = c.in_dtype(1);
  if (t == DType::Int64 || (int32_ok && t == DType::Int32)) return true;
  *why = std::string("indices of type ") + dtype_name(t);
  return false;
}

std::unique_ptr<CudaOp> make_gather(const PlanContext& c, std::string* why) {
  if (!byte_movable(c, why) || !index_input(c, why, true)) return nullptr;
  const Dims& x = c.in_dims(0);
  const int64_t r = static_cast<int64_t>(x.size());
  int64_t ax = 0;
  if (!checked(why, [&] { ax = normalize_axis(c.attr_int("axis"), r, c); })) return nullptr;
  const int64_t nidx = prod(c.in_dims(1), 0, 99);
  const int64_t outer = prod(x, 0, ax), inner = prod(x, ax + 1, r);
  if (prod(c.out_dims(0), 0, 99) != outer * nidx * inner) return refuse(why, "unexpected output size");
  GatherPlan p = plan_gather(outer, x[ax], nidx, inner, dtype_size(c.in_dtype(0)), c.in_dtype(1));
  return gather_op(p, "Gather: row gather, " + std::to_string(p.vec) + "B vectors", launch_gather);
}

/// The geometry GatherElements and ScatterElements share: indices of dims q address data of dims x
/// along the node's axis, every other coordinate their own. Fills the plan's index dims (`idx_dims`),
/// its data strides (0 on the axis), the axis's stride and length, the rank and the index count;
/// false (with *why) where the kernels do not take the case.
template <typename Plan>
bool element_axis(const PlanContext& c, std::string* why, int64_t* idx_dims, Plan& p) {
  const Dims& x = c.in_dims(0);
  const Dims& q = c.in_dims(1);
  const int64_t r = static_cast<int64_t>(x.size());
  const auto no = [why](const char* reason) {
    *why = reason;
    return false;
  };
  if (static_cast<int64_t>(q.size()) != r) return no("indices rank differs from data rank");
  if (r > kMoveMaxRank) return no("rank above 8");
  int64_t ax = 0;
  if (!checked(why, [&] { ax = normalize_axis(c.attr_int("axis"), r, c); })) return false;
  for (int64_t d = 0; d < r; ++d)
    if (d != ax && q[d] > x[d]) return no("indices shape exceeds data shape off the axis");
  p.rank = static_cast<int>(r);
  const Dims xs = contiguous(x);
  for (int64_t d = 0; d < r; ++d) {
    idx_dims[d] = q[d];
    p.data_strides[d] = d == ax ? 0 : xs[d];
  }
  p.axis_stride = xs[ax];
  p.axis_dim = x[ax];
  p.numel = prod(q, 0, q.size());
  p.index_type = c.in_dtype(1);
  return true;
}

std::unique_ptr<CudaOp> make_gather_elements(const PlanContext& c, std::string* why) {
  GatherElementsPlan p;
  if (!byte_movable(c, why) || !index_input(c, why, true) || !element_axis(c, why, p.out_dims, p)) return nullptr;
  if (c.out_dims(0) != c.in_dims(1)) return refuse(why, "unexpected output dims");
  p.esize = static_cast<int>(dtype_size(c.in_dtype(0)));
  return gather_op(p, "GatherElements: element gather", launch_gather_elements);
}

void gather_nd_launch(const GatherNDPlan& p, const void* x, const void* i, void* y, cudaStream_t s,
                      const DeviceErrorSite& err) {
  launch_gather_nd(p, x, static_cast<const int64_t*>(i), y, s, err);
}

std::unique_ptr<CudaOp> make_gather_nd(const PlanContext& c, std::string* why) {
  if (!byte_movable(c, why) || !index_input(c, why, false)) return nullptr;
  const int64_t b = c.opset() >= 12 ? c.attr_int("batch_dims") : 0;
  const Dims& D = c.in_dims(0);
  const Dims& Q = c.in_dims(1);
  const int64_t r = static_cast<int64_t>(D.size()), qr = static_cast<int64_t>(Q.size());
  if (r < 1 || qr < 1 || b < 0 || b >= std::min(r, qr)) return refuse(why, "bad batch_dims or ranks");
  const int64_t k = Q.back();
  if (k < 1 || k > r - b || k > kMoveMaxRank) return refuse(why, "last indices dim out of range");
  for (int64_t i = 0; i < b; ++i)
    if (D[i] != Q[i]) return refuse(why, "batch dims of data and indices differ");
  GatherNDPlan p;
  p.esize = static_cast<int>(dtype_size(c.in_dtype(0)));
  p.k = static_cast<int>(k);
  const Dims xs = contiguous(D);
  for (int64_t j = 0; j < k; ++j) {
    p.dims[j] = D[b + j];
    p.strides[j] = xs[b + j];
  }
  p.count = prod(Q, 0, qr - 1);
  p.per_batch = prod(Q, b, qr - 1);
  p.batch_stride = prod(D, b, r);
  p.slice = prod(D, b + k, r);
  if (prod(c.out_dims(0), 0, 99) != p.count * p.slice) return refuse(why, "unexpected output size");
  return gather_op(p, "GatherND: slice gather", gather_nd_launch);
}

// ---------------------------------------------------------------- Scatter family

/// The reduction a scatter kernel takes, or false (with *why): assignment for any byte-movable
/// type; add, mul, max and min on float32, float64, int32, int64, float16 and bfloat16 (atomics).
/// Other types (bool, 8- and 16-bit integers) run their reductions on the CPU reference.
bool scatter_reduction(const PlanContext& c, ScatterReduction* r, std::string* why) {
  const std::string red = c.has_attr("reduction") ? c.attr_string("reduction") : "none";
  const DType t = c.in_dtype(0);
  for (ScatterReduction k : {ScatterReduction::None, ScatterReduction::Add, ScatterReduction::Mul,
                             ScatterReduction::Max, ScatterReduction::Min}) {
    if (red != scatter_reduction_name(k)) continue;
    *r = k;
    if (k == ScatterReduction::None) return true;
    for (DType ok : {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::Float16, DType::BFloat16})
      if (t == ok) return true;
  }
  *why = "no CUDA kernel for reduction '" + red + "' on " + dtype_name(t);
  return false;
}

template <typename Plan, typename Launch>
std::unique_ptr<CudaOp> scatter_op(Plan p, std::string name, Launch f) {
  if (p.reduction != ScatterReduction::None) name += std::string(", ") + scatter_reduction_name(p.reduction);
  const size_t ws = scatter_workspace_bytes(p.dtype, p.reduction, p.data_numel);
  return std::make_unique<IndexedOp<3, Plan, Launch>>(p, std::move(name), f, ws);
}

void scatter_nd_launch(const ScatterNDPlan& p, const void* x, const void* i, const void* u, void* y, cudaStream_t s,
                       const DeviceErrorSite& err, void* ws) {
  launch_scatter_nd(p, x, static_cast<const int64_t*>(i), u, y, s, err, ws);
}

std::unique_ptr<CudaOp> make_scatter_nd(const PlanContext& c, std::string* why) {
  ScatterNDPlan p;
  if (!byte_movable(c, why) || !index_input(c, why, false) || !scatter_reduction(c, &p.reduction, why)) return nullptr;
  if (!c.has_input(2) || c.in_dtype(2) != c.in_dtype(0)) return refuse(why, "updates missing or of another type");
  const Dims& D = c.in_dims(0);
  const Dims& Q = c.in_dims(1);
  if (Q.empty()) return refuse(why, "indices of rank 0");
  const int64_t k = Q.back();
  if (k < 1 || k > static_cast<int64_t>(D.size()) || k > kMoveMaxRank)
    return refuse(why, "last indices dim out of range");
  Dims want(Q.begin(), Q.end() - 1);
  want.insert(want.end(), D.begin() + k, D.end());
  if (c.in_dims(2) != want || c.out_dims(0) != D) return refuse(why, "updates or output of unexpected dims");
  p.dtype = c.in_dtype(0);
  p.k = static_cast<int>(k);
  const Dims xs = contiguous(D);
  for (int64_t j = 0; j < k; ++j) {
    p.dims[j] = D[j];
    p.strides[j] = xs[j];
  }
  p.count = prod(Q, 0, Q.size() - 1);
  p.slice = prod(D, k, D.size());
  p.data_numel = prod(D, 0, D.size());
  return scatter_op(p, "ScatterND: slice scatter", scatter_nd_launch);
}

std::unique_ptr<CudaOp> make_scatter_elements(const PlanContext& c, std::string* why) {
  ScatterElementsPlan p;
  if (!byte_movable(c, why) || !index_input(c, why, true) || !scatter_reduction(c, &p.reduction, why)) return nullptr;
  if (!c.has_input(2) || c.in_dtype(2) != c.in_dtype(0)) return refuse(why, "updates missing or of another type");
  if (c.in_dims(2) != c.in_dims(1)) return refuse(why, "indices and updates differ in dims");
  if (!element_axis(c, why, p.upd_dims, p)) return nullptr;
  const Dims& x = c.in_dims(0);
  if (c.out_dims(0) != x) return refuse(why, "unexpected output dims");
  p.dtype = c.in_dtype(0);
  p.data_numel = prod(x, 0, x.size());
  return scatter_op(p, "ScatterElements: element scatter", launch_scatter_elements);
}

// ---------------------------------------------------------------- Pad

class PadOp : public CudaOp {
 public:
  PadOp(PadPlan p, int value_input) : p_(p), value_input_(value_input) {}
  void launch(const LaunchArgs& a) override {
    const void* v = value_input_ >= 0 ? a.inputs[value_input_].data : nullptr;
    launch_pad(p_, a.inputs[0].data, a.outputs[0].data, v, a.stream);
  }
  std::string kernel_name() const override {
    static const char* modes[] = {"constant", "edge", "reflect", "wrap"};
    return std::string("Pad ") + modes[static_cast<int>(p_.mode)];
  }

 private:
  PadPlan p_;
  int value_input_;  // a runtime constant_value input, else -1
};

std::unique_ptr<CudaOp> make_pad(const PlanContext& c, std::string* why) {
  if (!byte_movable(c, why)) return nullptr;
  const DType t = c.in_dtype(0);
  const Dims& in = c.in_dims(0);
  const Dims& out = c.out_dims(0);
  const int64_t r = static_cast<int64_t>(in.size());
  if (r > kMoveMaxRank) return refuse(why, "rank above 8");
  const std::string mode = c.attr_string("mode");
  PadPlan p;
  if (mode == "constant")
    p.mode = PadMode::Constant;
  else if (mode == "edge")
    p.mode = PadMode::Edge;
  else if (mode == "reflect")
    p.mode = PadMode::Reflect;
  else if (mode == "wrap")
    p.mode = PadMode::Wrap;
  else
    return refuse(why, "unknown mode '" + mode + "'");
  Dims pads, axes;
  int value_input = -1;
  if (c.opset() < 11) {
    pads = c.attr_ints("pads");
    if (!scalar_bits(c.attr_float("value"), 0, false, t, &p.value_bits))
      return refuse(why, "constant not representable");
  } else {
    if (!const_ints(c, 1, "pads", &pads, why)) return nullptr;
    if (c.has_input(2)) {
      if (const Tensor* v = c.constant(2)) {
        if (v->numel() != 1) return refuse(why, "constant_value must have one element");
        if (!storage_bits(*v, t, &p.value_bits)) return refuse(why, "constant not representable");
      } else {
        if (c.in_dtype(2) != t || prod(c.in_dims(2), 0, 99) != 1)
          return refuse(why, "runtime constant_value of another type or size");
        value_input = 2;
      }
    }
    if (c.has_input(3) && !const_ints(c, 3, "axes", &axes, why)) return nullptr;
  }
  Dims full;
  if (!checked(why, [&] { full = movement::full_pads(r, pads, axes, c); })) return nullptr;
  if (static_cast<int64_t>(out.size()) != r) return refuse(why, "unexpected output rank");
  for (int64_t d = 0; d < r; ++d) {
    if (in[d] + full[d] + full[r + d] != out[d]) return refuse(why, "output dims disagree with pads");
    if (in[d] == 0 && out[d] > 0 && p.mode != PadMode::Constant)
      return refuse(why, "cannot pad an empty dim in mode " + mode);
  }
  p.esize = static_cast<int>(dtype_size(t));
  p.rank = static_cast<int>(r);
  const Dims xs = contiguous(in);
  for (int64_t d = 0; d < r; ++d) {
    p.out_dims[d] = out[d];
    p.in_dims[d] = in[d];
    p.in_strides[d] = xs[d];
    p.pad_begin[d] = full[d];
  }
  p.numel = prod(out, 0, 99);
  return std::make_unique<PadOp>(p, value_input);
}

// ---------------------------------------------------------------- Trilu, CumSum

class TriluOp : public CudaOp {
 public:
  TriluOp(size_t es, int64_t batches, int64_t m, int64_t n, bool upper, int64_t k, bool k_runtime)
      : es_(es), batches_(batches), m_(m), n_(n), upper_(upper), k_(k), k_runtime_(k_runtime) {}
  void launch(const LaunchArgs& a) override {
    const int64_t* kd = k_runtime_ ? static_cast<const int64_t*>(a.inputs[1].data) : nullptr;
    launch_trilu(a.inputs[0].data, a.outputs[0].data, es_, batches_, m_, n_, upper_, k_, kd, a.stream);
  }
  std::string kernel_name() const override { return upper_ ? "Trilu upper" : "Trilu lower"; }

 private:
  size_t es_;
  int64_t batches_, m_, n_;
  bool upper_;
  int64_t k_;
  bool k_runtime_;
};

std::unique_ptr<CudaOp> make_trilu(const PlanContext& c, std::string* why) {
  if (!byte_movable(c, why)) return nullptr;
  const Dims& x = c.in_dims(0);
  if (x.size() < 2 || c.out_dims(0) != x) return refuse(why, "input must have rank >= 2");
  int64_t k = 0;
  bool k_runtime = false;
  if (c.has_input(1)) {
    if (const Tensor* kt = c.constant(1)) {
      if (kt->numel() != 1) return refuse(why, "k must be a scalar");
      k = kt->as_int64(0);
    } else {
      if (c.in_dtype(1) != DType::Int64 || prod(c.in_dims(1), 0, 99) != 1)
        return refuse(why, "runtime k must be one int64");
      k_runtime = true;  // read on the device at run time
    }
  }
  const int64_t m = x[x.size() - 2], n = x.back();
  const int64_t batches = prod(x, 0, x.size() - 2);
  return std::make_unique<TriluOp>(dtype_size(c.in_dtype(0)), batches, m, n, c.attr_int("upper") != 0, k, k_runtime);
}

/// CumSum and CumProd: one scan kernel, its operation a flag.
class ScanOp : public CudaOp {
 public:
  ScanOp(DType t, int64_t outer, int64_t len, int64_t inner, bool exclusive, bool reverse, bool product)
      : t_(t), outer_(outer), len_(len), inner_(inner), exclusive_(exclusive), reverse_(reverse), product_(product) {}
  void launch(const LaunchArgs& a) override {
    require_launched(launch_scan(a.inputs[0].data, a.outputs[0].data, t_, outer_, len_, inner_, exclusive_, reverse_,
                                 product_, a.stream),
                     product_ ? "CumProd" : "CumSum");
  }
  std::string kernel_name() const override {
    return std::string(product_ ? "CumProd" : "CumSum") + (inner_ == 1 ? ": warp scan per row" : ": thread per lane");
  }

 private:
  DType t_;
  int64_t outer_, len_, inner_;
  bool exclusive_, reverse_, product_;
};

std::unique_ptr<CudaOp> make_scan(const PlanContext& c, std::string* why, bool product) {
  const char* op = product ? "CumProd" : "CumSum";
  if (!byte_movable(c, why)) return nullptr;
  const DType t = c.in_dtype(0);
  if (!is_float(t) && t != DType::Int32 && t != DType::Int64)
    return refuse(why, std::string(op) + " on " + dtype_name(t));
  Dims axis;
  if (!const_ints(c, 1, "axis", &axis, why)) return nullptr;
  if (axis.size() != 1) return refuse(why, "axis must be a scalar");
  const Dims& x = c.in_dims(0);
  const int64_t r = static_cast<int64_t>(x.size());
  int64_t ax = 0;
  if (!checked(why, [&] { ax = normalize_axis(axis[0], r, c); })) return nullptr;
  const AxisView v = axis_view(x, ax);  // as the CPU kernel (shape_ops.cpp)
  return std::make_unique<ScanOp>(t, v.outer, v.n, v.inner, c.attr_int("exclusive") != 0, c.attr_int("reverse") != 0,
                                  product);
}

std::unique_ptr<CudaOp> make_cumsum(const PlanContext& c, std::string* why) { return make_scan(c, why, false); }
std::unique_ptr<CudaOp> make_cumprod(const PlanContext& c, std::string* why) { return make_scan(c, why, true); }

// ---------------------------------------------------------------- Resize, Upsample

/// An optional float/int operand: absent or empty → empty; present but not constant → false.
bool optional_operand(const PlanContext& c, int i, const char* what, const Tensor** out, std::string* why) {
  *out = nullptr;
  if (i < 0 || !c.has_input(static_cast<size_t>(i))) return true;
  if (prod(c.in_dims(i), 0, 99) == 0) return true;
  const Tensor* t = c.constant(static_cast<size_t>(i));
  if (!t) {
    *why = std::string(what) + " is computed at run time (not a constant)";
    return false;
  }
  if (t->numel() > 0) *out = t;
  return true;
}

template <typename T>
void append(std::vector<char>& blob, const std::vector<T>& v, size_t align = 16) {
  blob.resize((blob.size() + align - 1) / align * align);
  const size_t at = blob.size();
  blob.resize(at + v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(blob.data() + at, v.data(), v.size() * sizeof(T));
}

DeviceBuffer upload(const std::vector<char>& blob) {
  DeviceBuffer buf(std::max<size_t>(blob.size(), 16), "resize tables");
  if (!blob.empty()) FUSEC_CUDA_CHECK(cudaMemcpy(buf.get(), blob.data(), blob.size(), cudaMemcpyHostToDevice));
  return buf;
}

class ResizeNearestOp : public CudaOp {
 public:
  ResizeNearestOp(ResizeNearestPlan p, DeviceBuffer tables) : p_(p), tables_(std::move(tables)) {
    p_.maps = static_cast<const int32_t*>(tables_.get());
  }
  void launch(const LaunchArgs& a) override {
    launch_resize_nearest(p_, a.inputs[0].data, a.outputs[0].data, a.stream);
  }
  std::string kernel_name() const override { return "Resize nearest: index tables"; }

 private:
  ResizeNearestPlan p_;
  DeviceBuffer tables_;
};

class ResizeInterpOp : public CudaOp {
 public:
  ResizeInterpOp(ResizeInterpPlan p, DeviceBuffer tables, size_t w_at, size_t out_at, std::string name)
      : p_(p), tables_(std::move(tables)), name_(std::move(name)) {
    const char* base = static_cast<const char*>(tables_.get());
    p_.idx = reinterpret_cast<const int32_t*>(base);
    p_.w = reinterpret_cast<const float*>(base + w_at);
    p_.outside = reinterpret_cast<const uint8_t*>(base + out_at);
  }
  void launch(const LaunchArgs& a) override {
    require_launched(launch_resize_interp(p_, a.inputs[0].data, a.outputs[0].data, a.stream), "Resize");
  }
  std::string kernel_name() const override { return name_; }

 private:
  ResizeInterpPlan p_;
  DeviceBuffer tables_;
  std::string name_;
};

std::unique_ptr<CudaOp> make_resize(const PlanContext& c, std::string* why) {
  if (!byte_movable(c, why)) return nullptr;
  const std::string& op = c.node().op_type;
  const int64_t opset = c.opset();
  const auto ins = resize::resize_inputs(op, opset);
  std::vector<double> roi, scales;
  Dims sizes;
  const Tensor* t = nullptr;
  if (ins.scales_attr) {
    for (float f : c.attr_floats("scales")) scales.push_back(f);
  } else {
    if (!optional_operand(c, ins.scales, "scales", &t, why)) return nullptr;
    if (t) scales = resize::doubles_of(*t);
  }
  if (!optional_operand(c, ins.sizes, "sizes", &t, why)) return nullptr;
  if (t) sizes = t->to_int64_vector();
  if (!optional_operand(c, ins.roi, "roi", &t, why)) return nullptr;
  if (t) roi = resize::doubles_of(*t);

  // The sampling tables are the CPU reference's (ir/ops/resize_taps.h), indices narrowed to
  // int32 and weights rounded to float32.
  const Dims& in = c.in_dims(0);
  resize::ResizeParams params;
  if (!checked(why, [&] { params = resize::resize_params(c, opset, in, roi, scales, sizes); })) return nullptr;
  if (params.out_dims != c.out_dims(0)) return refuse(why, "output dims disagree with scales/sizes");
  const resize::ResizeConfig cfg = resize::resize_config(c, opset, std::move(params));
  if (cfg.antialias) return refuse(why, "antialias runs on the CPU");
  static const char* known[] = {"half_pixel",         "asymmetric",           "align_corners",
                                "pytorch_half_pixel", "tf_half_pixel_for_nn", "half_pixel_symmetric",
                                "tf_crop_and_resize"};
  if (std::find(std::begin(known), std::end(known), cfg.ctm) == std::end(known))
    return refuse(why, "unknown coordinate_transformation_mode '" + cfg.ctm + "'");
  if (cfg.mode != "nearest" && cfg.mode != "linear" && cfg.mode != "cubic")
    return refuse(why, "unknown mode '" + cfg.mode + "'");

  const DType dt = c.in_dtype(0);
  const Dims& out = cfg.p.out_dims;
  const size_t r = in.size();
  if (r > static_cast<size_t>(kMoveMaxRank)) return refuse(why, "rank above 8");
  const int64_t in_numel = prod(in, 0, 99), out_numel = prod(out, 0, 99);
  const Dims xs = contiguous(in);

  if (cfg.mode == "nearest") {
    if (in_numel == 0 && out_numel > 0 && cfg.ctm != "tf_crop_and_resize")
      return refuse(why, "cannot resize an empty input to a non-empty output");
    ResizeNearestPlan p;
    p.esize = static_cast<int>(dtype_size(dt));
    p.rank = static_cast<int>(r);
    p.numel = out_numel;
    p.in_numel = in_numel;
    std::vector<int32_t> maps;
    bool any_outside = false;
    for (size_t a = 0; a < r; ++a) {
      p.out_dims[a] = out[a];
      p.in_strides[a] = xs[a];
      const std::vector<int64_t> m64 = resize::nearest_map(cfg, a, in[a]);
      const std::vector<int32_t> m(m64.begin(), m64.end());
      bool identity = out[a] == in[a];
      for (int64_t x = 0; x < out[a] && identity; ++x) identity = m[x] == x;
      for (int32_t v : m) any_outside |= v < 0;
      if (identity) {
        p.map_offset[a] = -1;
      } else {
        p.map_offset[a] = static_cast<int64_t>(maps.size());
        maps.insert(maps.end(), m.begin(), m.end());
      }
    }
    if (any_outside) {
      if (!is_float(dt)) return refuse(why, "extrapolation into integer data runs on the CPU");
      scalar_bits(cfg.extrapolation, 0, false, dt, &p.extrapolation_bits);
    }
    std::vector<char> blob;
    append(blob, maps);
    return std::make_unique<ResizeNearestOp>(p, upload(blob));
  }

  // linear / cubic
  if (!is_float(dt)) return refuse(why, cfg.mode + " resize of " + dtype_name(dt) + " data runs on the CPU");
  if (out_numel > 0 && in_numel == 0) return refuse(why, "cannot resize an empty input to a non-empty output");
  ResizeInterpPlan p;
  p.dtype = dt;
  p.rank = static_cast<int>(r);
  p.numel = out_numel;
  p.extrapolation = static_cast<float>(cfg.extrapolation);
  std::vector<int32_t> idx;
  std::vector<float> w;
  std::vector<uint8_t> outside;
  for (size_t a = 0; a < r; ++a) {
    p.out_dims[a] = out[a];
    p.in_strides[a] = xs[a];
    p.slot[a] = -1;
    if (out_numel == 0) continue;
    const resize::ResizeTaps taps = resize::make_taps(cfg, a, in[a]);
    if (taps.identity) continue;
    if (p.naxes == kResizeMaxAxes) return refuse(why, "more than 3 resampled axes");
    const int k = p.naxes++;
    p.slot[a] = k;
    p.taps[k] = static_cast<int>(taps.n);
    p.stride[k] = xs[a];
    p.tap_offset[k] = static_cast<int64_t>(idx.size());
    p.out_offset[k] = static_cast<int64_t>(outside.size());
    for (int64_t i : taps.idx) idx.push_back(static_cast<int32_t>(i));
    for (double v : taps.w) w.push_back(static_cast<float>(v));
    outside.insert(outside.end(), taps.outside.begin(), taps.outside.end());
  }
  if (p.naxes == 0) {
    // Nothing resamples: a plain copy, as the CPU's convert_tensor.
    bool ok = true;
    StridedCopyPlan cp = plan_strided_copy(in, contiguous(in), 0, dtype_size(dt), in_numel, &ok);
    return std::make_unique<StridedCopyOp>(cp, "Resize (identity)");
  }
  std::vector<char> blob;
  append(blob, idx);
  const size_t w_at = (blob.size() + 15) / 16 * 16;
  append(blob, w);
  const size_t out_at = (blob.size() + 15) / 16 * 16;
  append(blob, outside);
  const std::string name = "Resize " + cfg.mode + " (" + cfg.ctm + "), " + std::to_string(p.naxes) + " resampled axes";
  return std::make_unique<ResizeInterpOp>(p, upload(blob), w_at, out_at, name);
}

}  // namespace

void register_movement_ops(CudaOpRegistry& r) {
  r.add("Transpose", make_transpose);
  r.add("Slice", make_slice);
  r.add("Expand", make_expand);
  r.add("Tile", make_tile);
  r.add("DepthToSpace", make_depth_to_space);
  r.add("SpaceToDepth", make_space_to_depth);
  r.add("Concat", make_concat);
  r.add_channels_last("Concat", make_concat_channels_last, "", ChannelsLast::FollowInput);
  r.add("Split", make_split);
  r.add("Gather", make_gather);
  r.add("GatherElements", make_gather_elements);
  r.add("GatherND", make_gather_nd);
  r.add("ScatterND", make_scatter_nd);
  r.add("TopK", make_topk);
  r.add("Col2Im", make_col2im);
  r.add("ScatterElements", make_scatter_elements);
  r.add("Scatter", make_scatter_elements);
  r.add("Pad", make_pad);
  r.add("Trilu", make_trilu);
  r.add("CumSum", make_cumsum);
  r.add("CumProd", make_cumprod);
  r.add("Resize", make_resize);
  r.add("Upsample", make_resize);
}

}  // namespace fusec::cuda

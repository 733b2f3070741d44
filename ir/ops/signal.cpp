// Signal processing (opset 17 on): the Hann, Hamming and Blackman windows, DFT (17; 20 moves the
// axis to an input), STFT and MelWeightMatrix: what audio front ends (spectrograms, log-mel
// features) export to. Complex tensors are real ones with a trailing dim of 2 (real, imaginary);
// a real signal may have a trailing dim of 1.
#include "ir/ops/signal_axis.h"
#include "ir/dim_math.h"
#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"

namespace fusec {

namespace {

constexpr std::initializer_list<DType> kFloats = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};

/// A scalar integer input's value, or nullopt while it is not known.
std::optional<int64_t> int_scalar(const InferContext& c, size_t i, const char* what) {
  if (!c.has_input(i)) return std::nullopt;
  c.require_dtype(i, {DType::Int32, DType::Int64});
  const Tensor* t = c.input_value(i);
  if (!t) return std::nullopt;
  if (t->numel() != 1) c.fail(std::string(what) + " must hold one value, got " + dims_str(t->dims()));
  return t->as_int64(0);
}

/// The output dtype an output_datatype attribute names; float types only.
DType output_datatype(const InferContext& c) {
  const DType t = dtype_from_onnx(static_cast<int32_t>(c.attr_int("output_datatype")));
  if (t != DType::Float32 && t != DType::Float64 && t != DType::Float16 && t != DType::BFloat16)
    c.unsupported("output_datatype " + onnx_dtype_name(static_cast<int32_t>(c.attr_int("output_datatype"))) +
                  " (fusec computes these in float types)");
  return t;
}

void infer_window(InferContext& c) {
  const DType t = output_datatype(c);
  const auto size = int_scalar(c, 0, "size");
  if (size && *size < 0) c.fail("size must be >= 0, got " + std::to_string(*size));
  c.set_output(0, t, Shape{size ? Dim(*size) : Dim()});
}

/// The DFT's axis (already normalized against x's rank, never the trailing complex dim).
std::optional<int64_t> dft_axis(const InferContext& c, size_t rank) {
  int64_t axis;
  if (c.opset() < 20) {
    axis = c.attr_int("axis");
  } else if (!c.has_input(2)) {
    axis = -2;
  } else {
    const auto a = int_scalar(c, 2, "axis");
    if (!a) return std::nullopt;
    axis = *a;
  }
  const int64_t r = static_cast<int64_t>(rank);
  const auto normalized = dft_signal_axis(axis, r);
  if (!normalized)
    c.fail("axis " + std::to_string(axis) + " is not a signal axis of a rank-" + std::to_string(r) +
           " input (the last dim holds the real and imaginary parts)");
  return normalized;
}

// x [..., n, ..., 1 or 2] -> [..., bins, ..., 2] (or [..., n, ..., 1] for a one-sided inverse).
void infer_dft(InferContext& c) {
  c.require_dtype(0, kFloats);
  const auto& s = c.input_shape(0);
  if (!s) return c.set_output(0, c.input_dtype(0), std::nullopt);
  if (s->size() < 2) c.fail("the input must have a signal axis and a trailing complex dim, got " + shape_str(*s));
  const Dim& last = s->back();
  if (last.is_static() && last.value != 1 && last.value != 2)
    c.fail("the trailing dim must be 1 (real) or 2 (complex), got " + std::to_string(last.value));
  const bool inverse = c.attr_int("inverse") != 0, onesided = c.attr_int("onesided") != 0;
  const auto length = int_scalar(c, 1, "dft_length");
  if (length && *length < 1) c.fail("dft_length must be >= 1, got " + std::to_string(*length));
  const auto axis = dft_axis(c, s->size());
  if (!axis) return c.set_output(0, c.input_dtype(0), Shape(s->size(), Dim()));
  Shape out = *s;
  const Dim& n = (*s)[static_cast<size_t>(*axis)];
  Dim len = c.has_input(1) ? (length ? Dim(*length) : Dim()) : n;
  if (!c.has_input(1) && inverse && onesided)
    len = n.is_static() ? Dim(dims::mul(2, n.value - 1, c, "the inverse's length")) : Dim();
  if (inverse && onesided) {
    out[static_cast<size_t>(*axis)] = len;
    out.back() = Dim(1);
  } else {
    out[static_cast<size_t>(*axis)] = onesided ? (len.is_static() ? Dim(len.value / 2 + 1) : Dim()) : len;
    out.back() = Dim(2);
  }
  c.set_output(0, c.input_dtype(0), out);
}

// signal [batch, length, 1 or 2], frame_step, window [frame_length], frame_length ->
// [batch, frames, bins, 2].
void infer_stft(InferContext& c) {
  c.require_dtype(0, kFloats);
  const auto& s = c.input_shape(0);
  if (s && (s->size() != 3 || (s->back().is_static() && s->back().value != 1 && s->back().value != 2)))
    c.fail("the signal must be [batch, length, 1 or 2], got " + shape_str(*s));
  const auto step = int_scalar(c, 1, "frame_step");
  if (step && *step < 1) c.fail("frame_step must be >= 1, got " + std::to_string(*step));
  if (c.has_input(2) && c.input_dtype(2) != c.input_dtype(0)) c.fail("the window's type is not the signal's");
  std::optional<int64_t> frame = int_scalar(c, 3, "frame_length");
  const auto& ws = c.has_input(2) ? c.input_shape(2) : std::optional<Shape>();
  if (ws && (ws->size() != 1)) c.fail("the window must be 1-D, got " + shape_str(*ws));
  if (!c.has_input(3) && ws && (*ws)[0].is_static()) frame = (*ws)[0].value;
  if (!c.has_input(3) && !c.has_input(2) && s && (*s)[1].is_static()) frame = (*s)[1].value;
  if (frame && ws && (*ws)[0].is_static() && (*ws)[0].value != *frame)
    c.fail("the window has " + std::to_string((*ws)[0].value) + " values but frame_length is " +
           std::to_string(*frame));
  if (frame && *frame < 1) c.fail("frame_length must be >= 1, got " + std::to_string(*frame));
  Dim frames, bins;
  if (frame) bins = Dim(c.attr_int("onesided") != 0 ? *frame / 2 + 1 : *frame);
  if (frame && step && s && (*s)[1].is_static()) {
    if ((*s)[1].value < *frame)
      c.fail("the signal (" + std::to_string((*s)[1].value) + " samples) is shorter than a frame (" +
             std::to_string(*frame) + ")");
    frames = Dim(1 + ((*s)[1].value - *frame) / *step);
  }
  c.set_output(0, c.input_dtype(0), Shape{s ? (*s)[0] : Dim(), frames, bins, Dim(2)});
}

// num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz ->
// [dft_length / 2 + 1, num_mel_bins].
void infer_mel(InferContext& c) {
  const DType t = output_datatype(c);
  const auto mels = int_scalar(c, 0, "num_mel_bins");
  const auto length = int_scalar(c, 1, "dft_length");
  int_scalar(c, 2, "sample_rate");
  c.require_float(3);
  c.require_float(4);
  if (mels && *mels < 1) c.fail("num_mel_bins must be >= 1, got " + std::to_string(*mels));
  if (length && *length < 1) c.fail("dft_length must be >= 1, got " + std::to_string(*length));
  c.set_output(0, t, Shape{length ? Dim(*length / 2 + 1) : Dim(), mels ? Dim(*mels) : Dim()});
}

/// A naive DFT's multiply-adds: n per output value along the transformed axis.
Cost cost_dft(const CostContext& c) {
  const auto& d = c.in_dims[0];
  const double n = d.size() >= 2 ? static_cast<double>(d[d.size() - 2]) : 1;
  return {8 * n * c.out_numel(0) / 2, c.all_in_bytes(), c.all_out_bytes()};
}

Cost cost_generated(const CostContext& c) { return {4 * c.out_numel(0), c.all_in_bytes(), c.all_out_bytes()}; }

}  // namespace

void register_signal_schemas(OpRegistry& r) {
  for (const char* w : {"HannWindow", "HammingWindow", "BlackmanWindow"})
    r.add(w)
        .since(17)
        .io(1, 1)
        .attr("output_datatype", AttrKind::Int, AttrValue{int64_t{1}})
        .attr("periodic", AttrKind::Int, AttrValue{int64_t{1}})
        .set_infer(infer_window)
        .set_cost(cost_generated);
  r.add("DFT")
      .since(17, 19)
      .io(1, 2)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{1}})
      .attr("inverse", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("onesided", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(infer_dft)
      .set_cost(cost_dft);
  r.add("DFT")
      .since(20)
      .io(1, 3)
      .attr("inverse", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("onesided", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(infer_dft)
      .set_cost(cost_dft);
  r.add("STFT")
      .since(17)
      .io(2, 4)
      .attr("onesided", AttrKind::Int, AttrValue{int64_t{1}})
      .set_infer(infer_stft)
      .set_cost(cost_dft);
  r.add("MelWeightMatrix")
      .since(17)
      .io(5, 5)
      .attr("output_datatype", AttrKind::Int, AttrValue{int64_t{1}})
      .set_infer(infer_mel)
      .set_cost(cost_generated);
}

}  // namespace fusec

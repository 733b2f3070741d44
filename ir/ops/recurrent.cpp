// RNN, GRU, LSTM (opset 7, 14 with `layout`, 22).
//
// X [seq, batch, input] (layout 1: [batch, seq, input]) through `directions` cells of `hidden`
// units gives Y [seq, directions, batch, hidden] (layout 1: [batch, seq, directions, hidden]) and
// the last states Y_h (and LSTM's Y_c) [directions, batch, hidden] (layout 1: [batch, directions,
// hidden]).
#include "ir/dim_math.h"
#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"
#include "ir/ops/recurrent.h"

namespace fusec {

namespace {

using recurrent::Cell;

// Input positions: X, W, R, B, sequence_lens, initial_h, then LSTM's initial_c and P.
constexpr size_t kX = 0, kW = 1, kR = 2, kB = 3, kLens = 4, kH0 = 5, kC0 = 6, kP = 7;

/// Checks a static dim of an input against what the node says it must be.
void expect_dim(const InferContext& c, size_t input, size_t axis, int64_t want, const char* name, const char* what) {
  if (!c.has_input(input) || want < 0) return;
  const auto& s = c.input_shape(input);
  if (!s) return;
  if (s->size() <= axis) c.fail(std::string(name) + " has rank " + std::to_string(s->size()));
  const Dim& d = (*s)[axis];
  if (d.is_static() && d.value != want)
    c.fail(std::string(name) + "'s dim " + std::to_string(axis) + " is " + std::to_string(d.value) + ", but " + what +
           " says " + std::to_string(want));
}

void infer_recurrent(InferContext& c) {
  const recurrent::Config cfg = recurrent::configure(c, c.opset());
  const DType t = c.input_dtype(kX);
  c.require_dtype(kX, {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16});
  for (size_t i : {kW, kR, kB, kH0, kC0, kP})
    if (c.has_input(i) && i < c.num_inputs() && c.input_dtype(i) != t)
      c.fail("input " + std::to_string(i) + " has type " + dtype_name(c.input_dtype(i)) + ", X has " + dtype_name(t));
  if (c.has_input(kLens)) c.require_dtype(kLens, {DType::Int32});
  for (size_t i : {kX, kW, kR})
    if (c.input_shape(i) && c.input_shape(i)->size() != 3)
      c.fail("X, W and R are 3-D; input " + std::to_string(i) + " has rank " +
             std::to_string(c.input_shape(i)->size()));

  int64_t hidden = cfg.hidden;
  if (hidden < 0 && c.input_shape(kR) && (*c.input_shape(kR))[2].is_static()) hidden = (*c.input_shape(kR))[2].value;
  // hidden_size comes from the file: its products are checked, never wrapped.
  const int64_t d = cfg.directions, rows = hidden < 0 ? -1 : dims::mul(cfg.gates, hidden, c, "hidden_size x gates");
  expect_dim(c, kW, 0, d, "W", "direction");
  expect_dim(c, kW, 1, rows, "W", "hidden_size x gates");
  expect_dim(c, kR, 0, d, "R", "direction");
  expect_dim(c, kR, 1, rows, "R", "hidden_size x gates");
  expect_dim(c, kR, 2, hidden, "R", "hidden_size");
  expect_dim(c, kB, 0, d, "B", "direction");
  expect_dim(c, kB, 1, rows < 0 ? -1 : dims::mul(2, rows, c, "2 x hidden_size x gates"), "B",
             "2 x hidden_size x gates");
  if (cfg.cell == Cell::Lstm && c.num_inputs() > kP) {
    expect_dim(c, kP, 0, d, "P", "direction");
    expect_dim(c, kP, 1, hidden < 0 ? -1 : dims::mul(3, hidden, c, "3 x hidden_size"), "P", "3 x hidden_size");
  }
  if (c.input_shape(kX) && c.input_shape(kW)) {
    const Dim& in = (*c.input_shape(kX))[2];
    expect_dim(c, kW, 2, in.is_static() ? in.value : -1, "W", "X's input size");
  }

  Dim seq, batch, hid = hidden < 0 ? Dim() : Dim(hidden), dirs(d);
  if (const auto& xs = c.input_shape(kX)) {
    seq = (*xs)[cfg.batch_major ? 1 : 0];
    batch = (*xs)[cfg.batch_major ? 0 : 1];
  }
  if (batch.is_static()) {
    expect_dim(c, kLens, 0, batch.value, "sequence_lens", "X's batch");
    for (size_t i : {kH0, kC0}) {
      if (i >= c.num_inputs()) continue;
      const char* name = i == kH0 ? "initial_h" : "initial_c";
      expect_dim(c, i, cfg.batch_major ? 1 : 0, d, name, "direction");
      expect_dim(c, i, cfg.batch_major ? 0 : 1, batch.value, name, "X's batch");
      expect_dim(c, i, 2, hidden, name, "hidden_size");
    }
  }
  const Shape y = cfg.batch_major ? Shape{batch, seq, dirs, hid} : Shape{seq, dirs, batch, hid};
  const Shape state = cfg.batch_major ? Shape{batch, dirs, hid} : Shape{dirs, batch, hid};
  for (size_t i = 0; i < c.num_outputs(); ++i) c.set_output(i, t, i == 0 ? y : state);
}

/// Per step and direction: the input and recurrent products (2 flops a multiply-add) and a few
/// elementwise operations per gate unit.
Cost cost_recurrent(const CostContext& c) {
  Cost cost{0, c.all_in_bytes(), c.all_out_bytes()};
  if (c.in_dims.size() < 3 || c.in_dims[kX].size() != 3 || c.in_dims[kR].size() != 3 || c.in_dims[kW].size() != 3)
    return cost;
  const double steps_by_batch = static_cast<double>(c.in_dims[kX][0]) * static_cast<double>(c.in_dims[kX][1]);
  const double dirs = static_cast<double>(c.in_dims[kW][0]), rows = static_cast<double>(c.in_dims[kW][1]);
  const double in = static_cast<double>(c.in_dims[kW][2]), hidden = static_cast<double>(c.in_dims[kR][2]);
  cost.flops = steps_by_batch * dirs * (2 * rows * (in + hidden) + 8 * rows);
  return cost;
}

OpSchema& common(OpSchema& s, bool lstm, bool gru) {
  s.attr("activation_alpha", AttrKind::Floats)
      .attr("activation_beta", AttrKind::Floats)
      .attr("activations", AttrKind::Strings)
      .attr("clip", AttrKind::Float)
      .attr("direction", AttrKind::String, AttrValue{std::string("forward")})
      .attr("hidden_size", AttrKind::Int)
      .set_infer(infer_recurrent)
      .set_cost(cost_recurrent);
  if (lstm) s.attr("input_forget", AttrKind::Int, AttrValue{int64_t{0}});
  if (gru) s.attr("linear_before_reset", AttrKind::Int, AttrValue{int64_t{0}});
  return s;
}

}  // namespace

void register_recurrent_schemas(OpRegistry& r) {
  for (const char* op : {"RNN", "GRU", "LSTM"}) {
    const bool lstm = std::string(op) == "LSTM", gru = std::string(op) == "GRU";
    const int in_hi = lstm ? 8 : 6, out_hi = lstm ? 3 : 2;
    common(r.add(op).since(7, 13).io(3, in_hi, 0, out_hi), lstm, gru);
    common(r.add(op).since(14).io(3, in_hi, 0, out_hi), lstm, gru).attr("layout", AttrKind::Int, AttrValue{int64_t{0}});
  }
}

}  // namespace fusec

// Data movement ops (Transpose, Concat, Split, Slice, Gather and Scatter families, Expand, Tile,
// Pad, DepthToSpace, SpaceToDepth, Trilu, CumSum, CumProd) and Resize/Upsample on CUDA against the CPU
// reference. Pure movement is exact: bitwise at fp32 and for native half, integer and bool data;
// under --precision fp16/bf16 only the upload rounding separates the two, hence 1e-2.
#include <cmath>
#include <limits>

#include "backend/cpu/kernels/common.h"
#include "gpu_test_util.h"
#include "passes/infer_shapes.h"

using namespace fusec;
using namespace fusec::test;

namespace {

using I64s = std::vector<int64_t>;

Tensor ints(I64s v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::from_int64(v, {n});
}
Tensor floats(std::vector<float> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::from_float(v, {n});
}

OpCase op(std::string type, std::vector<Tensor> inputs, std::set<size_t> constant = {},
          std::vector<NamedAttribute> attrs = {}, int64_t opset = 17, size_t outputs = 1) {
  OpCase c;
  c.op = std::move(type);
  c.inputs = std::move(inputs);
  c.constant = std::move(constant);
  c.attrs = std::move(attrs);
  c.opset = opset;
  c.num_outputs = outputs;
  return c;
}

Tensor data(I64s dims, uint64_t seed = 1, DType t = DType::Float32) {
  const bool wide = is_integer(t);
  return random_tensor(t, std::move(dims), seed, wide ? -100 : -1, wide ? 100 : 1);
}

/// A movement op must be exact for every element type and close under the half precisions.
/// `data_inputs` are the inputs that carry the tensor's dtype (the others are indices/shapes).
void expect_movement(const OpCase& c, std::vector<size_t> data_inputs = {0}) {
  expect_gpu_matches_cpu(c, Precision::FP32, 0.0);
  expect_gpu_matches_cpu(c, Precision::FP16, 1e-2);
  expect_gpu_matches_cpu(c, Precision::BF16, 1e-2);
  for (DType t :
       {DType::Float16, DType::BFloat16, DType::Float64, DType::Int64, DType::Int32, DType::Int8, DType::Bool}) {
    OpCase d = c;
    for (size_t i : data_inputs) d.inputs[i] = data(c.inputs[i].dims(), 100 + i, t);
    SCOPED_TRACE(std::string("native ") + dtype_name(t));
    expect_gpu_matches_cpu(d, Precision::FP32, 0.0);
  }
}

/// Where the node under test ran (compiles the case the way the shared harness does).
bool runs_on_gpu(const OpCase& c) {
  GraphBuilder b(c.opset);
  std::vector<Value*> ins;
  std::vector<Tensor> feeds;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Tensor& t = c.inputs[i];
    if (!t.defined()) {
      ins.push_back(nullptr);
      continue;
    }
    const std::string name = "in" + std::to_string(i);
    if (c.constant.count(i)) {
      ins.push_back(b.initializer(name, t.clone()));
    } else {
      ins.push_back(b.input(name, t.dtype(), shape_of(t.dims())));
      feeds.push_back(t);
    }
  }
  for (Value* v : b.node_n(c.op, ins, c.num_outputs, c.attrs, "node_under_test", c.domain)) b.output(v);
  auto g = b.build();
  infer_shapes(*g);
  auto exe = cuda::CudaBackend().compile_cuda(*g);
  exe->run(feeds);
  for (const auto& pl : exe->placement())
    if (pl.node == "node_under_test") return pl.on_gpu;
  ADD_FAILURE() << "node_under_test not placed";
  return false;
}

}  // namespace

// ---------------------------------------------------------------- Transpose

TEST(GpuTranspose, AttentionHeadsKeepTheInnermostDim) {
  FUSEC_REQUIRE_GPU();
  // [B,S,H,D] -> [B,H,S,D]: rows of D move whole (16-byte vectors when D allows).
  expect_movement(op("Transpose", {data({2, 7, 3, 64})}, {}, {attr("perm", I64s{0, 2, 1, 3})}));
  expect_movement(op("Transpose", {data({2, 5, 4, 33})}, {}, {attr("perm", I64s{0, 2, 1, 3})}));
}

TEST(GpuTranspose, LayoutChangesUseTheTiledKernel) {
  FUSEC_REQUIRE_GPU();
  expect_movement(op("Transpose", {data({2, 33, 9, 17})}, {}, {attr("perm", I64s{0, 2, 3, 1})}));  // NCHW -> NHWC
  expect_movement(op("Transpose", {data({2, 9, 17, 33})}, {}, {attr("perm", I64s{0, 3, 1, 2})}));  // NHWC -> NCHW
  expect_movement(op("Transpose", {data({1000, 33})}, {}, {}));                                    // default perm
  expect_movement(op("Transpose", {data({4097, 7})}, {}, {}));                                     // too narrow to tile
  expect_movement(op("Transpose", {data({3, 1, 70, 1, 41})}, {}, {attr("perm", I64s{4, 1, 2, 3, 0})}));
}

TEST(GpuTranspose, RanksOneToSix) {
  FUSEC_REQUIRE_GPU();
  expect_movement(op("Transpose", {data({4097})}, {}, {}));
  expect_movement(op("Transpose", {data({7, 5, 3})}, {}, {attr("perm", I64s{1, 2, 0})}));
  expect_movement(op("Transpose", {data({2, 3, 1, 4, 2, 5})}, {}, {attr("perm", I64s{5, 3, 0, 4, 1, 2})}));
  expect_movement(op("Transpose", {data({1, 64, 1, 48})}, {}, {attr("perm", I64s{3, 1, 0, 2})}));
}

// ---------------------------------------------------------------- Concat, Split

TEST(GpuConcat, AnyAxisOddSizes) {
  FUSEC_REQUIRE_GPU();
  expect_movement(
      op("Concat", {data({2, 3, 5}, 1), data({2, 7, 5}, 2), data({2, 1, 5}, 3)}, {}, {attr("axis", int64_t{1})}),
      {0, 1, 2});
  expect_movement(op("Concat", {data({3, 33}, 1), data({4, 33}, 2)}, {}, {attr("axis", int64_t{0})}), {0, 1});
  expect_movement(op("Concat", {data({2, 4, 64}, 1), data({2, 4, 64}, 2)}, {}, {attr("axis", int64_t{-1})}), {0, 1});
  expect_movement(op("Concat", {data({4097}, 1), data({7}, 2)}, {}, {attr("axis", int64_t{0})}), {0, 1});
}

TEST(GpuConcat, ManyInputsAndAConstant) {
  FUSEC_REQUIRE_GPU();
  std::vector<Tensor> in;
  for (int i = 0; i < 40; ++i) in.push_back(data({3, 1 + i % 4, 8}, 10 + i));
  OpCase c = op("Concat", in, {5, 17}, {attr("axis", int64_t{1})});
  for (Precision p : {Precision::FP32, Precision::FP16})
    expect_gpu_matches_cpu(c, p, p == Precision::FP32 ? 0.0 : 1e-2);
}

TEST(GpuSplit, SizesFromEveryOpsetForm) {
  FUSEC_REQUIRE_GPU();
  // Opset 13: split as a constant input; 11: attribute; 18: num_outputs (uneven: 3, 3, 1).
  expect_movement(op("Split", {data({5, 12, 3}), ints({2, 7, 3})}, {1}, {attr("axis", int64_t{1})}, 13, 3));
  expect_movement(op("Split", {data({6, 33})}, {}, {attr("axis", int64_t{0}), attr("split", I64s{1, 5})}, 11, 2));
  expect_movement(op("Split", {data({4, 7})}, {}, {attr("axis", int64_t{-1}), attr("num_outputs", int64_t{3})}, 18, 3));
  expect_movement(op("Split", {data({2, 64, 8})}, {}, {attr("axis", int64_t{1})}, 17, 4));  // equal parts
}

// ---------------------------------------------------------------- Slice

TEST(GpuSlice, StepsClampingAndNegativeAxes) {
  FUSEC_REQUIRE_GPU();
  const int64_t big = std::numeric_limits<int64_t>::max(), small = std::numeric_limits<int64_t>::min();
  auto slice = [](I64s dims, I64s s, I64s e, I64s a, I64s st) {
    return op("Slice", {data(dims), ints(s), ints(e), ints(a), ints(st)}, {1, 2, 3, 4});
  };
  expect_movement(slice({7, 33, 5}, {1, 2}, {6, 30}, {0, 1}, {1, 3}));
  expect_movement(slice({7, 33, 5}, {-1, 0}, {small, big}, {0, -1}, {-1, 2}));  // reverse, clamped ends
  expect_movement(slice({4, 1000}, {-3, 5}, {big, -5}, {0, 1}, {1, 1}));        // row copies
  expect_movement(slice({2, 8, 64}, {0}, {32}, {-1}, {1}));                     // vectorized inner slice
  expect_movement(slice({9, 9}, {8, 20}, {small, 3}, {1, 0}, {-3, 1}));
  expect_movement(slice({5, 6}, {4}, {2}, {0}, {1}));                                      // empty result
  expect_movement(op("Slice", {data({5, 6, 7}), ints({1, -4}), ints({4, 100})}, {1, 2}));  // no axes/steps
}

TEST(GpuSlice, OpsetNineAttributes) {
  FUSEC_REQUIRE_GPU();
  expect_movement(op("Slice", {data({6, 10, 4})}, {},
                     {attr("starts", I64s{1, -8}), attr("ends", I64s{5, 9}), attr("axes", I64s{0, 1})}, 9));
}

TEST(GpuSlice, StartsFromAGraphInput) {
  FUSEC_REQUIRE_GPU();
  // The executor binds shape operands from the inputs' values before planning, so this still
  // runs on the GPU; either way it must match.
  OpCase c = op("Slice", {data({6, 10}), ints({1}), ints({4}), ints({1})}, {2, 3});
  expect_gpu_matches_cpu(c, Precision::FP32, 0.0, /*require_gpu_kernel=*/false);
}

TEST(GpuMovement, ViewsBeyondEightMergedDimsFallBack) {
  FUSEC_REQUIRE_GPU();
  // Tile of a rank-5 tensor views the output as 10 unmergeable dims: refused, run by the CPU.
  OpCase tile = op("Tile", {data({2, 3, 2, 3, 2}), ints({2, 2, 2, 2, 2})}, {1});
  expect_gpu_matches_cpu(tile, Precision::FP32, 0.0, false);
  EXPECT_FALSE(runs_on_gpu(tile));
  // Rank 9 with every dim moved.
  OpCase tr = op("Transpose", {data({2, 3, 2, 3, 2, 3, 2, 3, 2})}, {}, {attr("perm", I64s{8, 7, 6, 5, 4, 3, 2, 1, 0})});
  expect_gpu_matches_cpu(tr, Precision::FP32, 0.0, false);
  EXPECT_FALSE(runs_on_gpu(tr));
}

// ---------------------------------------------------------------- Gather family

TEST(GpuGather, EmbeddingRowsAndNegativeIndices) {
  FUSEC_REQUIRE_GPU();
  // An embedding lookup: [vocab, hidden] rows by int64 ids, negatives counting from the end.
  expect_movement(op("Gather", {data({1000, 64}), random_tensor(DType::Int64, {4, 7}, 5, -1000, 1000)}, {0}));
  expect_movement(
      op("Gather", {data({3, 33, 5}), random_tensor(DType::Int32, {6}, 6, -33, 33)}, {}, {attr("axis", int64_t{1})}));
  expect_movement(
      op("Gather", {data({3, 4, 7}), random_tensor(DType::Int64, {2, 2}, 7, -7, 7)}, {}, {attr("axis", int64_t{-1})}));
  expect_movement(op("Gather", {data({5, 3}), Tensor::from_int64({-2}, {})}, {1}));  // scalar index drops the axis
}

TEST(GpuGatherElements, EveryAxis) {
  FUSEC_REQUIRE_GPU();
  expect_movement(op("GatherElements", {data({4, 5, 6}), random_tensor(DType::Int64, {3, 5, 2}, 8, -4, 4)}, {},
                     {attr("axis", int64_t{0})}));
  expect_movement(op("GatherElements", {data({4, 33}), random_tensor(DType::Int32, {4, 9}, 9, -33, 33)}, {},
                     {attr("axis", int64_t{1})}));
  expect_movement(op("GatherElements", {data({3, 4, 7}), random_tensor(DType::Int64, {3, 4, 11}, 10, -7, 7)}, {},
                     {attr("axis", int64_t{-1})}));
}

TEST(GpuGatherND, BatchDimsAndPartialIndices) {
  FUSEC_REQUIRE_GPU();
  expect_movement(op("GatherND", {data({5, 6, 64}), random_tensor(DType::Int64, {3, 2}, 11, 0, 5)}));     // k=2 of 3
  expect_movement(op("GatherND", {data({5, 6, 7}), random_tensor(DType::Int64, {2, 4, 3}, 12, -5, 5)}));  // k=3
  expect_movement(op("GatherND", {data({3, 6, 8}), random_tensor(DType::Int64, {3, 4, 1}, 13, -6, 6)}, {},
                     {attr("batch_dims", int64_t{1})}, 13));
}

// ---------------------------------------------------------------- Scatter family

namespace {

/// Indices for ScatterElements along `axis` of data dims `x`, of dims `q` (q[axis] == x[axis]):
/// each line along the axis a rotation of 0..x[axis]-1 (no two updates of a line meet, as ONNX asks
/// of reduction "none"), every third one negative.
Tensor rotated_lines(const I64s& x, const I64s& q, int64_t axis, DType t) {
  int64_t n = 1;
  for (int64_t d : q) n *= d;
  I64s v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, along = 0, shift = 0;
    for (int64_t d = static_cast<int64_t>(q.size()) - 1; d >= 0; --d) {
      const int64_t c = rem % q[d];
      rem /= q[d];
      if (d == axis)
        along = c;
      else
        shift += c * (d + 2);
    }
    const int64_t at = (along + shift) % x[axis];
    v[static_cast<size_t>(i)] = i % 3 == 0 ? at - x[axis] : at;
  }
  if (t == DType::Int64) return Tensor::from_int64(v, q);
  Tensor idx(DType::Int32, q);
  for (int64_t i = 0; i < n; ++i) idx.data<int32_t>()[i] = static_cast<int32_t>(v[static_cast<size_t>(i)]);
  return idx;
}

NamedAttribute reduction(const char* r) { return attr("reduction", std::string(r)); }

}  // namespace

TEST(GpuScatterND, SlicesTuplesAndNegativeIndices) {
  FUSEC_REQUIRE_GPU();
  // MViT's slice_scatter as the dynamo export writes it: rows 1..6 of a 4-D tensor along axis 0
  // (indices [n, 1]), whole slices of 2 x 3 x 40.
  expect_movement(
      op("ScatterND", {data({9, 2, 3, 40}), Tensor::from_int64({1, 2, 3, 4, 5, 6}, {6, 1}), data({6, 2, 3, 40}, 2)}),
      {0, 2});
  // Whole tuples (k = rank): single elements, negative ones counting from the end.
  expect_movement(op("ScatterND", {data({5, 6, 7}), Tensor::from_int64({0, 0, 0, -1, 2, 3, 4, -6, 6, 2, 5, -7}, {4, 3}),
                                   data({4}, 3)}),
                  {0, 2});
  // k = 2 of 3, a [2, 3] grid of pairs, odd slices of 7.
  expect_movement(
      op("ScatterND",
         {data({5, 6, 7}), Tensor::from_int64({0, 1, 1, 2, 2, 3, 3, 4, 4, 5, -1, 0}, {2, 3, 2}), data({2, 3, 7}, 4)}),
      {0, 2});
}

TEST(GpuScatterND, AddSumsRepeatedIndices) {
  FUSEC_REQUIRE_GPU();
  // reduction "add" (opset 16): rows 1 and 5 named more than once each add every update.
  OpCase c = op("ScatterND", {data({6, 16}), Tensor::from_int64({1, 3, 1, 5, -5, 5}, {6, 1}), data({6, 16}, 2)}, {},
                {reduction("add")}, 16);
  expect_gpu_matches_cpu(c, Precision::FP32, 1e-6);  // the atomics add in another order: float rounding
  for (DType t : {DType::Int64, DType::Int32}) {
    SCOPED_TRACE(dtype_name(t));
    OpCase d = c;
    d.inputs[0] = data({6, 16}, 5, t);
    d.inputs[2] = data({6, 16}, 6, t);
    expect_gpu_matches_cpu(d, Precision::FP32, 0.0);
  }
}

TEST(GpuScatterElements, EveryAxisNegativeAndInt32Indices) {
  FUSEC_REQUIRE_GPU();
  const I64s x = {4, 5, 6};
  for (int64_t axis : {0, 1, 2}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    I64s q = {3, 4, 5};
    q[static_cast<size_t>(axis)] = x[static_cast<size_t>(axis)];
    for (DType it : {DType::Int64, DType::Int32}) {
      expect_movement(op("ScatterElements", {data(x), rotated_lines(x, q, axis, it), data(q, 7)}, {},
                         {attr("axis", axis - (it == DType::Int32 ? 3 : 0))}),
                      {0, 2});
    }
  }
  // The deprecated Scatter (opset 9-10) is ScatterElements without a reduction.
  expect_movement(op("Scatter", {data({4, 33}), rotated_lines({4, 33}, {2, 33}, 1, DType::Int64), data({2, 33}, 8)}, {},
                     {attr("axis", int64_t{1})}, 10),
                  {0, 2});
  // reduction "add": updates meeting at one element are all added.
  OpCase c = op("ScatterElements", {data({3, 8}), random_tensor(DType::Int64, {3, 20}, 9, -8, 8), data({3, 20}, 10)},
                {}, {attr("axis", int64_t{1}), reduction("add")}, 16);
  expect_gpu_matches_cpu(c, Precision::FP32, 1e-6);
}

TEST(GpuScatter, EveryReductionOnEveryNumericType) {
  FUSEC_REQUIRE_GPU();
  // Indices that meet: ScatterND names rows 1 and 4 three times each, ScatterElements sends 24
  // updates a row into 7 columns. Updates near one keep products of a few of them in range.
  const Tensor nd_idx = Tensor::from_int64({1, 4, 1, -2, 0, 1, 4, 6}, {8, 1});
  const Tensor el_idx = random_tensor(DType::Int64, {3, 24}, 11, -7, 7);
  for (const char* red : {"add", "mul", "max", "min"}) {
    SCOPED_TRACE(red);
    const OpCase nd = op("ScatterND", {data({7, 33}), nd_idx, random_tensor(DType::Float32, {8, 33}, 12, 0.5, 1.5)}, {},
                         {reduction(red)}, 18);
    const OpCase el =
        op("ScatterElements", {data({3, 7}), el_idx, random_tensor(DType::Float32, {3, 24}, 13, 0.5, 1.5)}, {},
           {attr("axis", int64_t{1}), reduction(red)}, 18);
    for (const OpCase* c : {&nd, &el}) {
      SCOPED_TRACE(c->op);
      // float32 atomics combine in another order than the reference: float rounding.
      expect_gpu_matches_cpu(*c, Precision::FP32, 1e-6, true, std::string(", ") + red);
      // Under fp16/bf16 the float32 values are stored in the half type and combined in float32 in
      // the workspace: the uploads' rounding, then one rounding of the result.
      expect_gpu_matches_cpu(*c, Precision::FP16, 1e-2);
      expect_gpu_matches_cpu(*c, Precision::BF16, 2e-2);
      for (DType t : {DType::Float16, DType::BFloat16, DType::Float64, DType::Int64, DType::Int32}) {
        SCOPED_TRACE(std::string("native ") + dtype_name(t));
        OpCase d = *c;
        const bool wide = is_integer(t);
        d.inputs[0] = random_tensor(t, c->inputs[0].dims(), 14, wide ? -9 : -1, wide ? 9 : 1);
        d.inputs[2] = random_tensor(t, c->inputs[2].dims(), 15, wide ? -3 : 0.5, wide ? 3 : 1.5);
        // Half types: the reference also combines in float32 and rounds once, so only the order of
        // float32 operations differs; float64 atomics likewise; integers are exact.
        const double tol = wide ? 0.0 : t == DType::Float64 ? 1e-12 : 1e-2;
        expect_gpu_matches_cpu(d, Precision::FP32, tol);
      }
    }
  }
  // NaN: max and min keep a NaN already there and pass a NaN update over, as std::max/std::min do
  // in the reference.
  for (const char* red : {"max", "min"}) {
    SCOPED_TRACE(red);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    OpCase c = op("ScatterElements",
                  {floats({nan, 1.f, 2.f, 3.f}), Tensor::from_int64({0, 1, 1, 2}, {4}), floats({5.f, nan, 4.f, -1.f})},
                  {}, {attr("axis", int64_t{0}), reduction(red)}, 18);
    expect_gpu_matches_cpu(c, Precision::FP32, 0.0);
  }
}

// ---------------------------------------------------------------- TopK

/// Values i/8 - 4 in a shuffled order with some repeated: exact in every float type, so ties are
/// the same ties after an fp16 upload, and the index order among them is tested.
Tensor ranks(I64s dims, uint64_t seed, DType t = DType::Float32) {
  Tensor r = random_tensor(DType::Int64, dims, seed, 0, 48);
  Tensor f(DType::Float64, dims);
  for (int64_t i = 0; i < r.numel(); ++i) f.data<double>()[i] = static_cast<double>(r.data<int64_t>()[i]) / 8 - 4;
  if (t == DType::Float64) return f;
  Tensor out(t, dims);
  cpu::convert_tensor(f, out);
  return out;
}

TEST(GpuTopK, LargestAndSmallestOnEveryAxisWithTies) {
  FUSEC_REQUIRE_GPU();
  // A router's top-2 of 8 experts over 37 tokens; a middle axis (inner > 1); k = 1 and k = n.
  struct Shape {
    I64s dims;
    int64_t axis, k;
  };
  for (const Shape& sh :
       {Shape{{37, 8}, -1, 2}, Shape{{3, 20, 5}, 1, 4}, Shape{{2, 3, 7}, 2, 1}, Shape{{4, 9}, 1, 9}}) {
    for (int64_t largest : {1, 0}) {
      SCOPED_TRACE("axis " + std::to_string(sh.axis) + ", k " + std::to_string(sh.k) +
                   (largest ? ", largest" : ", smallest"));
      const std::vector<NamedAttribute> attrs = {attr("axis", sh.axis), attr("largest", largest)};
      OpCase c = op("TopK", {ranks(sh.dims, 20), ints({sh.k})}, {1}, attrs, 11, 2);
      expect_gpu_matches_cpu(c, Precision::FP32, 0.0, true, "TopK");
      expect_gpu_matches_cpu(c, Precision::FP16, 0.0);
      expect_gpu_matches_cpu(c, Precision::BF16, 0.0);
      for (DType t : {DType::Float16, DType::BFloat16, DType::Float64, DType::Int64, DType::Int32}) {
        SCOPED_TRACE(std::string("native ") + dtype_name(t));
        OpCase d = c;
        d.inputs[0] = is_integer(t) ? random_tensor(t, sh.dims, 21, -5, 5) : ranks(sh.dims, 21, t);
        expect_gpu_matches_cpu(d, Precision::FP32, 0.0);
      }
    }
  }
  // NaN ranks above every number (first when largest, last when smallest), as in the reference.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t largest : {1, 0}) {
    OpCase c = op("TopK", {floats({1.f, nan, 3.f, -2.f, nan, 3.f}), ints({4})}, {1},
                  {attr("axis", int64_t{0}), attr("largest", largest)}, 11, 2);
    expect_gpu_matches_cpu(c, Precision::FP32, 0.0);
  }
  // k passes past kTopKMaxPasses elements a thread: the CPU reference runs it, and says so.
  EXPECT_FALSE(runs_on_gpu(op("TopK", {data({1, 300000}), ints({1000})}, {1}, {}, 11, 2)));
}

TEST(GpuTopK, LongRowsTakeABlockARow) {
  FUSEC_REQUIRE_GPU();
  // A vocabulary-sized row (1024 threads), a row of 300 (256 threads) fully sorted on a middle axis,
  // a few thousand with many ties (48 distinct values), and rows past the grid's 65535 blocks.
  struct Shape {
    I64s dims;
    int64_t axis, k;
  };
  for (const Shape& sh :
       {Shape{{1, 20000}, -1, 50}, Shape{{2, 300, 3}, 1, 300}, Shape{{3, 5000}, 1, 7}, Shape{{65600, 256}, 1, 2}}) {
    for (int64_t largest : {1, 0}) {
      SCOPED_TRACE("dims[axis] " + std::to_string(sh.dims[sh.axis < 0 ? sh.dims.size() - 1 : sh.axis]) + ", k " +
                   std::to_string(sh.k) + (largest ? ", largest" : ", smallest"));
      const std::vector<NamedAttribute> attrs = {attr("axis", sh.axis), attr("largest", largest)};
      OpCase c = op("TopK", {ranks(sh.dims, 22), ints({sh.k})}, {1}, attrs, 11, 2);
      expect_gpu_matches_cpu(c, Precision::FP32, 0.0, true, "a block a row");
      expect_gpu_matches_cpu(c, Precision::BF16, 0.0, true, "a block a row");
      OpCase d = c;
      d.inputs[0] = random_tensor(DType::Int64, sh.dims, 23, -1000, 1000);
      expect_gpu_matches_cpu(d, Precision::FP32, 0.0, true, "a block a row");
    }
  }
  // NaNs in a long row rank above every number, ties among them by index.
  Tensor x = ranks({1, 3000}, 24);
  for (int64_t i : {5, 17, 2999, 1000}) x.data<float>()[i] = std::numeric_limits<float>::quiet_NaN();
  for (int64_t largest : {1, 0}) {
    OpCase c = op("TopK", {x, ints({9})}, {1}, {attr("axis", int64_t{1}), attr("largest", largest)}, 11, 2);
    expect_gpu_matches_cpu(c, Precision::FP32, 0.0, true, "a block a row");
  }
}

// ---------------------------------------------------------------- Col2Im

TEST(GpuCol2Im, OneTwoAndThreeDimsWithStridesPadsAndDilations) {
  FUSEC_REQUIRE_GPU();
  // Each case: image, block, strides, dilations, pads (begin..., end...), channels. The output
  // pixels gather the columns in the reference's order, so float32 is exact.
  struct Case {
    I64s image, block, strides, dilations, pads;
    int64_t channels;
  };
  const std::vector<Case> cases = {
      {{10}, {3}, {2}, {1}, {1, 0}, 3},                                     // 1-D, stride 2, padding at the start
      {{9, 7}, {3, 2}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 2},                    // nn.Fold's overlapping blocks
      {{8, 8}, {2, 2}, {2, 2}, {1, 1}, {0, 0, 0, 0}, 5},                    // MobileViT's unfolding, no overlap
      {{11, 6}, {3, 3}, {2, 1}, {2, 1}, {1, 2, 2, 0}, 3},                   // strides, dilation and uneven pads
      {{5, 6, 4}, {2, 3, 2}, {1, 2, 1}, {2, 1, 1}, {1, 0, 0, 0, 1, 1}, 2},  // 3-D
  };
  for (const Case& k : cases) {
    const int64_t n = static_cast<int64_t>(k.image.size());
    int64_t per_block = 1, positions = 1;
    for (int64_t d = 0; d < n; ++d) {
      const size_t i = static_cast<size_t>(d);
      per_block *= k.block[i];
      positions *= (k.image[i] + k.pads[i] + k.pads[i + n] - k.dilations[i] * (k.block[i] - 1) - 1) / k.strides[i] + 1;
    }
    SCOPED_TRACE(std::to_string(n) + "-D, " + std::to_string(positions) + " block positions");
    const std::vector<NamedAttribute> attrs = {attr("strides", k.strides), attr("dilations", k.dilations),
                                               attr("pads", k.pads)};
    OpCase c =
        op("Col2Im", {data({2, k.channels * per_block, positions}), ints(k.image), ints(k.block)}, {1, 2}, attrs, 18);
    expect_gpu_matches_cpu(c, Precision::FP32, 0.0, true, "Col2Im");
    expect_gpu_matches_cpu(c, Precision::FP16);
    expect_gpu_matches_cpu(c, Precision::BF16);
    OpCase d = c;
    d.inputs[0] = data({2, k.channels * per_block, positions}, 3, DType::Float64);
    expect_gpu_matches_cpu(d, Precision::FP32, 0.0, true, "Col2Im");
  }
}

// ---------------------------------------------------------------- Expand, Tile

TEST(GpuExpand, Broadcasting) {
  FUSEC_REQUIRE_GPU();
  expect_movement(op("Expand", {data({3, 1, 5}), ints({2, 3, 4, 5})}, {1}));
  expect_movement(op("Expand", {data({1}), ints({7, 33})}, {1}));
  expect_movement(op("Expand", {data({4097, 1}), ints({1, 3})}, {1}));
  expect_movement(op("Expand", {data({2, 1, 64}), ints({2, 9, 64})}, {1}));
}

TEST(GpuTile, Repeats) {
  FUSEC_REQUIRE_GPU();
  expect_movement(op("Tile", {data({2, 3, 5}), ints({2, 1, 3})}, {1}));
  expect_movement(op("Tile", {data({7}), ints({4})}, {1}));
  expect_movement(op("Tile", {data({1, 2, 64}), ints({3, 2, 1})}, {1}));
}

// ---------------------------------------------------------------- Pad

TEST(GpuPad, EveryMode) {
  FUSEC_REQUIRE_GPU();
  for (const char* mode : {"constant", "edge", "reflect", "wrap"}) {
    SCOPED_TRACE(mode);
    expect_movement(
        op("Pad", {data({2, 3, 5, 7}), ints({0, 1, 2, 3, 0, 2, 1, 3})}, {1}, {attr("mode", std::string(mode))}, 13));
    expect_movement(op("Pad", {data({33}), ints({4, 5})}, {1}, {attr("mode", std::string(mode))}, 13));
  }
  // Negative pads crop.
  expect_movement(op("Pad", {data({4, 9}), ints({-1, 2, 0, -3})}, {1}, {}, 13));
}

TEST(GpuPad, ConstantValueAxesAndOldOpsets) {
  FUSEC_REQUIRE_GPU();
  OpCase c = op("Pad", {data({3, 4}), ints({1, 2, 2, 1}), Tensor::from_float({2.5f}, {})}, {1, 2}, {}, 13);
  for (Precision p : {Precision::FP32, Precision::FP16, Precision::BF16})
    expect_gpu_matches_cpu(c, p, p == Precision::FP32 ? 0.0 : 1e-2);
  // constant_value as a graph input: read on the device.
  c.constant = {1};
  expect_gpu_matches_cpu(c, Precision::FP32, 0.0);
  expect_gpu_matches_cpu(c, Precision::FP16, 1e-2);
  // Integer data with an integer constant.
  expect_gpu_matches_cpu(
      op("Pad", {data({5, 6}, 3, DType::Int64), ints({1, 0, 0, 2}), Tensor::from_int64({-7}, {})}, {1, 2}, {}, 13),
      Precision::FP32, 0.0);
  // Opset 18 axes.
  expect_movement(op("Pad", {data({3, 4, 5}), ints({1, 2, 3, 1}), Tensor(), ints({0, -1})}, {1, 3},
                     {attr("mode", std::string("reflect"))}, 18));
  // Opset 2 attributes.
  expect_gpu_matches_cpu(op("Pad", {data({3, 4})}, {}, {attr("pads", I64s{0, 1, 2, 0}), attr("value", 1.5f)}, 10),
                         Precision::FP32, 0.0);
}

TEST(GpuPad, PadsFromAGraphInput) {
  FUSEC_REQUIRE_GPU();
  expect_gpu_matches_cpu(op("Pad", {data({3, 4}), ints({1, 1, 1, 1})}, {}, {}, 13), Precision::FP32, 0.0, false);
}

// ---------------------------------------------------------------- DepthToSpace, SpaceToDepth

TEST(GpuDepthToSpace, DcrAndCrd) {
  FUSEC_REQUIRE_GPU();
  expect_movement(op("DepthToSpace", {data({2, 8, 3, 5})}, {}, {attr("blocksize", int64_t{2})}));
  expect_movement(
      op("DepthToSpace", {data({2, 8, 3, 5})}, {}, {attr("blocksize", int64_t{2}), attr("mode", std::string("CRD"))}));
  expect_movement(op("DepthToSpace", {data({1, 18, 4, 4})}, {}, {attr("blocksize", int64_t{3})}, 9));
  expect_movement(op("SpaceToDepth", {data({2, 3, 6, 4})}, {}, {attr("blocksize", int64_t{2})}));
  expect_movement(op("SpaceToDepth", {data({1, 5, 9, 12})}, {}, {attr("blocksize", int64_t{3})}));
}

// ---------------------------------------------------------------- Trilu, CumSum, CumProd

TEST(GpuTrilu, UpperLowerAndK) {
  FUSEC_REQUIRE_GPU();
  for (int64_t upper : {0, 1})
    for (int64_t k : {int64_t{0}, int64_t{-2}, int64_t{3}, int64_t{100}, std::numeric_limits<int64_t>::min()}) {
      SCOPED_TRACE("upper " + std::to_string(upper) + " k " + std::to_string(k));
      expect_movement(op("Trilu", {data({5, 7}), Tensor::from_int64({k}, {})}, {1}, {attr("upper", upper)}, 14));
    }
  expect_movement(op("Trilu", {data({3, 9, 4})}, {}, {}, 14));
  // k as a graph input is read on the device.
  expect_gpu_matches_cpu(
      op("Trilu", {data({2, 6, 6}), Tensor::from_int64({-1}, {})}, {}, {attr("upper", int64_t{1})}, 14),
      Precision::FP32, 0.0);
}

TEST(GpuCumSum, AxesDirectionsAndTypes) {
  FUSEC_REQUIRE_GPU();
  for (int64_t excl : {0, 1})
    for (int64_t rev : {0, 1}) {
      SCOPED_TRACE("exclusive " + std::to_string(excl) + " reverse " + std::to_string(rev));
      std::vector<NamedAttribute> a = {attr("exclusive", excl), attr("reverse", rev)};
      // Innermost axis (warp scan) and an outer axis (per-lane walk). The scan adds in a
      // different order than the CPU's sequential loop: a few ulps of the largest prefix.
      OpCase inner = op("CumSum", {data({3, 1000}), Tensor::from_int64({-1}, {})}, {1}, a);
      OpCase outer = op("CumSum", {data({33, 4, 7}), Tensor::from_int64({0}, {})}, {1}, a);
      for (const OpCase& c : {inner, outer}) {
        expect_gpu_matches_cpu(c, Precision::FP32, 1e-5);
        expect_gpu_matches_cpu(c, Precision::FP16, 1e-2);
        expect_gpu_matches_cpu(c, Precision::BF16, 1e-2);
        for (DType t : {DType::Int32, DType::Int64, DType::Float64}) {
          OpCase d = c;
          d.inputs[0] = data(c.inputs[0].dims(), 3, t);
          expect_gpu_matches_cpu(d, Precision::FP32, t == DType::Float64 ? 1e-12 : 0.0);
        }
      }
    }
}

// CumProd runs on CumSum's kernels with a product. Values near 1, so that a 1000-long row's
// products neither overflow nor vanish; at fp16 and bf16 the inputs are rounded first and a
// product of n of them carries about sqrt(n) roundings, so those rows are 70 long (three of the
// warp scan's steps) and bf16's bound is 5e-2. Integers on short axes: their products wrap the
// same way in any order.
TEST(GpuCumProd, AxesDirectionsAndTypes) {
  FUSEC_REQUIRE_GPU();
  for (int64_t excl : {0, 1})
    for (int64_t rev : {0, 1}) {
      SCOPED_TRACE("exclusive " + std::to_string(excl) + " reverse " + std::to_string(rev));
      std::vector<NamedAttribute> a = {attr("exclusive", excl), attr("reverse", rev)};
      auto cumprod = [&](Tensor x, int64_t axis) {
        return op("CumProd", {std::move(x), Tensor::from_int64({axis}, {})}, {1}, a, 26);
      };
      const OpCase row = cumprod(random_tensor(DType::Float32, {3, 1000}, 7, 0.9, 1.1), -1);
      const OpCase short_row = cumprod(random_tensor(DType::Float32, {3, 70}, 8, 0.9, 1.1), -1);
      const OpCase outer = cumprod(random_tensor(DType::Float32, {33, 4, 7}, 9, -1.2, 1.2), 0);
      for (const OpCase& c : {row, short_row, outer}) {
        expect_gpu_matches_cpu(c, Precision::FP32, 1e-5, true, "CumProd");
        OpCase d = c;
        d.inputs[0] = random_tensor(DType::Float64, c.inputs[0].dims(), 10, 0.9, 1.1);
        expect_gpu_matches_cpu(d, Precision::FP32, 1e-12);
      }
      for (const OpCase& c : {short_row, outer}) {
        expect_gpu_matches_cpu(c, Precision::FP16, 1e-2);
        expect_gpu_matches_cpu(c, Precision::BF16, 5e-2);
      }
      for (DType t : {DType::Int32, DType::Int64}) {
        expect_gpu_matches_cpu(cumprod(random_tensor(t, {5, 9, 3}, 11, -3, 4), 1), Precision::FP32, 0.0);
        expect_gpu_matches_cpu(cumprod(random_tensor(t, {4, 70}, 12, -3, 4), -1), Precision::FP32, 0.0);
      }
    }
}

// ---------------------------------------------------------------- Resize, Upsample

namespace {

std::vector<NamedAttribute> resize_attrs(const std::string& mode, const std::string& ctm,
                                         const std::string& nearest = "round_prefer_floor") {
  return {attr("mode", mode), attr("coordinate_transformation_mode", ctm), attr("nearest_mode", nearest)};
}

OpCase resize_scales(I64s dims, std::vector<float> scales, std::vector<NamedAttribute> a, int64_t opset = 13) {
  return op("Resize", {data(dims), Tensor(), floats(scales)}, {2}, std::move(a), opset);
}

OpCase resize_sizes(I64s dims, I64s sizes, std::vector<NamedAttribute> a, int64_t opset = 13) {
  return op("Resize", {data(dims), Tensor(), Tensor(), ints(sizes)}, {3}, std::move(a), opset);
}

void expect_resize(const OpCase& c, bool nearest) {
  expect_gpu_matches_cpu(c, Precision::FP32, nearest ? 0.0 : 1e-5);
  expect_gpu_matches_cpu(c, Precision::FP16, 1e-2);
  expect_gpu_matches_cpu(c, Precision::BF16, 1e-2);
}

}  // namespace

TEST(GpuResize, NearestModes) {
  FUSEC_REQUIRE_GPU();
  for (const char* ctm : {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"})
    for (const char* nm : {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}) {
      SCOPED_TRACE(std::string(ctm) + " " + nm);
      expect_resize(resize_scales({2, 3, 5, 7}, {1, 1, 2, 2}, resize_attrs("nearest", ctm, nm)), true);
      expect_resize(resize_sizes({1, 2, 9, 10}, {1, 2, 4, 7}, resize_attrs("nearest", ctm, nm)), true);
      expect_resize(resize_scales({2, 3, 6, 8}, {1, 1, 1.5f, 2}, resize_attrs("nearest", ctm, nm)),
                    true);  // 4 per thread
    }
  // Pure movement: exact for native integer data too.
  OpCase u8 = resize_scales({1, 3, 4, 5}, {1, 1, 2, 3}, resize_attrs("nearest", "asymmetric", "floor"));
  u8.inputs[0] = data({1, 3, 4, 5}, 4, DType::UInt8);
  expect_gpu_matches_cpu(u8, Precision::FP32, 0.0);
  // tf_half_pixel_for_nn only exists before opset 13.
  OpCase tf = op("Resize", {data({1, 2, 5, 5}), floats({}), floats({1, 1, 1.6f, 0.6f})}, {1, 2},
                 resize_attrs("nearest", "tf_half_pixel_for_nn"), 11);
  expect_resize(tf, true);
}

TEST(GpuResize, LinearAndCubic) {
  FUSEC_REQUIRE_GPU();
  for (const char* ctm : {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"}) {
    SCOPED_TRACE(ctm);
    expect_resize(resize_scales({2, 3, 5, 7}, {1, 1, 2, 2}, resize_attrs("linear", ctm)), false);
    expect_resize(resize_sizes({1, 2, 9, 33}, {1, 2, 4, 17}, resize_attrs("linear", ctm)), false);
    expect_resize(resize_scales({2, 3, 6, 6}, {1, 1, 1.5f, 0.75f}, resize_attrs("cubic", ctm)), false);
  }
  auto cubic = resize_attrs("cubic", "half_pixel");
  cubic.push_back(attr("cubic_coeff_a", -0.5f));
  cubic.push_back(attr("exclude_outside", int64_t{1}));
  expect_resize(resize_scales({1, 2, 7, 5}, {1, 1, 2.5f, 1.4f}, cubic), false);
  // 3-D volume (trilinear) and a 1-D resample of the innermost axis alone.
  expect_resize(resize_scales({1, 2, 4, 5, 6}, {1, 1, 2, 0.6f, 1.5f}, resize_attrs("linear", "half_pixel")), false);
  expect_resize(resize_sizes({3, 4097}, {3, 1000}, resize_attrs("linear", "align_corners")), false);
}

TEST(GpuResize, CropAndResizeAndOpset18) {
  FUSEC_REQUIRE_GPU();
  auto a = resize_attrs("linear", "tf_crop_and_resize");
  a.push_back(attr("extrapolation_value", 0.25f));
  OpCase crop =
      op("Resize", {data({1, 2, 6, 8}), floats({0, 0, -0.2f, 0.1f, 1, 1, 0.9f, 1.3f}), Tensor(), ints({1, 2, 5, 7})},
         {1, 3}, a, 13);
  expect_resize(crop, false);
  crop.attrs[0] = attr("mode", std::string("nearest"));
  expect_resize(crop, true);
  crop.inputs[3] = ints({1, 2, 5, 12});  // the 4-per-thread nearest path, extrapolating too
  expect_resize(crop, true);
  // Opset 18: axes, keep_aspect_ratio_policy, half_pixel_symmetric.
  auto b = resize_attrs("linear", "half_pixel_symmetric");
  b.push_back(attr("axes", I64s{2, 3}));
  b.push_back(attr("keep_aspect_ratio_policy", std::string("not_larger")));
  expect_resize(op("Resize", {data({1, 3, 8, 6}), Tensor(), Tensor(), ints({5, 5})}, {3}, b, 18), false);
  // Opset 10 (scales only, legacy nearest rounding) and Upsample 9 / 7.
  expect_resize(
      op("Resize", {data({1, 2, 4, 4}), floats({1, 1, 2, 0.5f})}, {1}, {attr("mode", std::string("nearest"))}, 10),
      true);
  expect_resize(
      op("Upsample", {data({1, 2, 3, 4}), floats({1, 1, 2, 2})}, {1}, {attr("mode", std::string("linear"))}, 9), false);
  expect_resize(op("Upsample", {data({1, 2, 3, 4})}, {},
                   {attr("mode", std::string("nearest")), attr("scales", std::vector<float>{1, 1, 3, 2})}, 7),
                true);
}

TEST(GpuResize, AntialiasFallsBack) {
  FUSEC_REQUIRE_GPU();
  auto a = resize_attrs("linear", "half_pixel");
  a.push_back(attr("antialias", int64_t{1}));
  OpCase c = resize_scales({1, 2, 8, 8}, {1, 1, 0.5f, 0.5f}, a, 18);
  expect_gpu_matches_cpu(c, Precision::FP32, 1e-5, false);
  EXPECT_FALSE(runs_on_gpu(c));
}

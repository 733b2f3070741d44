// Reduction kernels (reduce.cu) against the CPU reference: every Reduce* op at fp32 (1e-5), fp16
// and bf16 (1e-2) over row reductions (widths 1 to 40000, warp and block rows, split rows), column
// reductions (split and not), a middle axis, non-contiguous axis sets, reduce-all, negative axes,
// keepdims on/off, axes as attribute (older opsets) and as a constant input, noop_with_empty_axes,
// empty reductions, integer inputs, NaN propagation, and ArgMax/ArgMin (ties with
// select_last_index both ways, every axis, keepdims, int64 input). A non-constant axes input must
// still give the right answer (CPU fallback).
#include <cmath>

#include "gpu_test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

const Precision kAll[] = {Precision::FP32, Precision::FP16, Precision::BF16};

/// Random values on a grid exact in float16 and bfloat16 (1/64 steps, |v| <= 2).
Tensor data(std::vector<int64_t> dims, uint64_t seed, double lo = -2, double hi = 2) {
  Tensor t = random_tensor(DType::Float32, dims, seed, lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::round(t.data<float>()[i] * 64.0f) / 64.0f;
  return t;
}

struct Kind {
  const char* op;
  double lo, hi;  // input range the op is well-conditioned on
  int64_t attr_opset, input_opset;
};

const Kind kKinds[] = {
    {"ReduceSum", -2, 2, 11, 13},       {"ReduceMean", -2, 2, 13, 18},     {"ReduceMax", -2, 2, 13, 18},
    {"ReduceMin", -2, 2, 13, 18},       {"ReduceL1", -2, 2, 13, 18},       {"ReduceL2", -2, 2, 13, 18},
    {"ReduceSumSquare", -2, 2, 13, 18}, {"ReduceLogSum", 0.25, 2, 13, 18}, {"ReduceLogSumExp", -2, 2, 13, 18},
};

/// axes as an attribute (attr_opset) or as a constant input (input_opset).
OpCase reduce(const Kind& k, Tensor x, std::vector<int64_t> axes, int64_t keepdims, bool axes_input) {
  OpCase c;
  c.op = k.op;
  c.inputs = {std::move(x)};
  c.attrs = {attr("keepdims", keepdims)};
  if (axes_input) {
    c.opset = k.input_opset;
    if (!axes.empty()) {
      c.inputs.push_back(Tensor::from_int64(axes, {static_cast<int64_t>(axes.size())}));
      c.constant = {1};
    }
  } else {
    c.opset = k.attr_opset;
    if (!axes.empty()) c.attrs.push_back(attr("axes", axes));
  }
  return c;
}

void all_precisions(const OpCase& c) {
  for (Precision p : kAll) {
    SCOPED_TRACE(precision_name(p));
    expect_gpu_matches_cpu(c, p);
  }
}

struct Layout {
  std::vector<int64_t> dims, axes;
};

}  // namespace

TEST(GpuReduce, EveryOpEveryLayout) {
  FUSEC_REQUIRE_GPU();
  const Layout layouts[] = {
      {{300, 768}, {-1}},      // rows, warp per row
      {{16, 1024}, {1}},       // rows
      {{5, 1025}, {-1}},       // rows, unaligned width
      {{3, 40000}, {1}},       // long rows, split
      {{1000, 33}, {0}},       // column reduction
      {{40000, 8}, {0}},       // tall columns, split
      {{4, 127, 9}, {1}},      // middle axis
      {{4, 127, 9}, {-2, 2}},  // trailing axes (rows)
      {{6, 5, 7, 3}, {0, 2}},  // separate groups: general path
      {{2, 3, 4, 5}, {1, 3}},  // general path
      {{2, 4097}, {}},         // no axes: reduce all
      {{7}, {0}},              // one short row
      {{1, 1}, {0, 1}},        // size-1 dims only
      {{3, 1, 5}, {1}},        // reducing a size-1 dim
  };
  uint64_t seed = 1;
  for (const Kind& k : kKinds)
    for (const Layout& l : layouts)
      for (bool axes_input : {false, true}) {
        const int64_t keepdims = (seed & 1) ? 1 : 0;
        SCOPED_TRACE(std::string(k.op) + (axes_input ? " axes input" : " axes attr") + " keepdims " +
                     std::to_string(keepdims) + " layout " + std::to_string(&l - layouts));
        all_precisions(reduce(k, data(l.dims, ++seed, k.lo, k.hi), l.axes, keepdims, axes_input));
      }
}

TEST(GpuReduce, ProdWellConditioned) {
  FUSEC_REQUIRE_GPU();
  const Kind prod{"ReduceProd", 0.5, 1.5, 13, 18};
  uint64_t seed = 500;
  const Layout layouts[] = {{{33, 7}, {1}}, {{16, 5}, {0}}, {{4, 3, 5}, {0, 2}}, {{9}, {}}, {{20, 16}, {-1}}};
  for (const Layout& l : layouts)
    for (bool axes_input : {false, true}) {
      Tensor x = random_tensor(DType::Float32, l.dims, ++seed, 0.5, 1.5);
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::round(x.data<float>()[i] * 16.0f) / 16.0f;
      all_precisions(reduce(prod, x, l.axes, 1, axes_input));
    }
}

TEST(GpuReduce, NoopWithEmptyAxes) {
  FUSEC_REQUIRE_GPU();
  for (const Kind& k : kKinds) {
    OpCase c = reduce(k, data({5, 33}, 600, k.lo, k.hi), {}, 1, true);
    c.attrs.push_back(attr("noop_with_empty_axes", int64_t{1}));
    all_precisions(c);
    // Empty axes without the flag reduce everything.
    all_precisions(reduce(k, data({5, 33}, 601, k.lo, k.hi), {}, 0, true));
  }
}

TEST(GpuReduce, EmptyReductions) {
  FUSEC_REQUIRE_GPU();
  // A reduced dim of size 0: every output is the empty fold (0, NaN, -inf, 1, ...), as on the CPU.
  for (const Kind& k : kKinds)
    for (bool axes_input : {false, true}) {
      SCOPED_TRACE(k.op);
      expect_gpu_matches_cpu(reduce(k, Tensor(DType::Float32, {3, 0}), {1}, 1, axes_input), Precision::FP32);
      expect_gpu_matches_cpu(reduce(k, Tensor(DType::Float32, {0, 4}), {1}, 0, axes_input), Precision::FP32);
    }
  expect_gpu_matches_cpu(reduce({"ReduceProd", 0, 1, 13, 18}, Tensor(DType::Float32, {2, 0, 3}), {1}, 1, false),
                         Precision::FP32);
}

TEST(GpuReduce, NanPropagates) {
  FUSEC_REQUIRE_GPU();
  Tensor x = data({8, 300}, 700);
  x.data<float>()[5] = NAN;
  x.data<float>()[300 * 3 + 299] = NAN;
  for (const Kind& k : kKinds) {
    if (std::string(k.op) == "ReduceLogSum") continue;
    expect_gpu_matches_cpu(reduce(k, x, {1}, 1, false), Precision::FP32);
    expect_gpu_matches_cpu(reduce(k, x, {0}, 1, false), Precision::FP32);
  }
}

TEST(GpuReduce, Integers) {
  FUSEC_REQUIRE_GPU();
  uint64_t seed = 800;
  for (DType t : {DType::Int32, DType::Int64})
    for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"})
      for (const Layout& l :
           {Layout{{37, 1000}, {1}}, Layout{{1000, 37}, {0}}, Layout{{4, 5, 6}, {0, 2}}, Layout{{3, 40000}, {}}}) {
        OpCase c = reduce({op, 0, 0, std::string(op) == "ReduceSum" ? 11 : 13, 18},
                          random_tensor(t, l.dims, ++seed, -100, 100), l.axes, 1, false);
        expect_gpu_matches_cpu(c, Precision::FP32);
      }
  OpCase prod = reduce({"ReduceProd", 0, 0, 13, 18}, random_tensor(DType::Int64, {9, 6}, 900, -3, 4), {1}, 0, false);
  expect_gpu_matches_cpu(prod, Precision::FP32);
}

TEST(GpuReduce, NonConstantAxesFallsBack) {
  FUSEC_REQUIRE_GPU();
  OpCase c = reduce(kKinds[0], data({6, 7}, 950), {1}, 1, true);
  c.constant.clear();  // axes is a graph input now
  expect_gpu_matches_cpu(c, Precision::FP32, -1, false);
}

TEST(GpuReduce, ArgMaxArgMin) {
  FUSEC_REQUIRE_GPU();
  uint64_t seed = 1000;
  // Integer-valued floats: many ties, exact in every precision.
  auto ties = [&](std::vector<int64_t> dims, double hi) {
    Tensor t = random_tensor(DType::Float32, dims, ++seed, 0, hi);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::floor(t.data<float>()[i]);
    return t;
  };
  const Layout layouts[] = {{{300, 768}, {-1}},  {{5, 1025}, {1}},  {{3, 40000}, {1}},
                            {{1000, 33}, {0}},   {{40000, 4}, {0}}, {{4, 127, 9}, {1}},
                            {{4, 127, 9}, {-3}}, {{7}, {0}},        {{3, 1, 5}, {1}}};
  for (const char* op : {"ArgMax", "ArgMin"})
    for (const Layout& l : layouts)
      for (int64_t last : {0, 1})
        for (int64_t keepdims : {0, 1}) {
          OpCase c;
          c.op = op;
          c.opset = 13;
          c.inputs = {ties(l.dims, 5)};
          c.attrs = {attr("axis", l.axes[0]), attr("keepdims", keepdims), attr("select_last_index", last)};
          SCOPED_TRACE(std::string(op) + " last " + std::to_string(last));
          all_precisions(c);
        }
  // Distinct values, opset 11 (no select_last_index), int64 input, NaN as the extreme.
  OpCase c;
  c.op = "ArgMax";
  c.opset = 11;
  c.inputs = {data({64, 100}, ++seed)};
  c.attrs = {attr("axis", int64_t{1})};
  all_precisions(c);
  c.opset = 13;
  c.inputs = {random_tensor(DType::Int64, {50, 60}, ++seed, -5, 5)};
  for (int64_t last : {0, 1}) {
    c.attrs = {attr("axis", int64_t{0}), attr("select_last_index", last)};
    expect_gpu_matches_cpu(c, Precision::FP32);
  }
  Tensor x = data({4, 50}, ++seed);
  x.data<float>()[7] = NAN;
  x.data<float>()[30] = NAN;
  x.data<float>()[120] = NAN;
  for (const char* op : {"ArgMax", "ArgMin"})
    for (int64_t last : {0, 1}) {
      OpCase n;
      n.op = op;
      n.opset = 13;
      n.inputs = {x};
      n.attrs = {attr("axis", int64_t{1}), attr("select_last_index", last)};
      expect_gpu_matches_cpu(n, Precision::FP32);
    }
}

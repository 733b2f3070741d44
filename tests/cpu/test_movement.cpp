// Data movement ops on the CPU reference: small hand-computed cases, the edge cases the ONNX spec
// spells out (negative axes/indices/steps, clamping, uneven splits, pad modes), errors, and the
// shapes inference gives at import when shape-like inputs are unknown.
#include <algorithm>
#include <climits>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "ir/cost.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

/// One operand of a single-node test graph: a graph input (fed at run time), an initializer
/// (known at import), or left out (an undefined Tensor).
struct In {
  Tensor t;
  bool constant = false;
};
In constant(Tensor t) { return {std::move(t), true}; }
In absent() { return {Tensor(), false}; }

std::unique_ptr<Graph> one_node(const std::string& op, const std::vector<In>& ins, std::vector<NamedAttribute> attrs,
                                size_t n_out, int64_t opset, std::vector<Tensor>* feeds) {
  GraphBuilder b(opset);
  std::vector<Value*> vals;
  for (size_t i = 0; i < ins.size(); ++i) {
    const std::string name = "in" + std::to_string(i);
    if (!ins[i].t.defined())
      vals.push_back(nullptr);
    else if (ins[i].constant)
      vals.push_back(b.initializer(name, ins[i].t));
    else {
      vals.push_back(b.input(name, ins[i].t.dtype(), shape_of(ins[i].t.dims())));
      if (feeds) feeds->push_back(ins[i].t);
    }
  }
  for (Value* v : b.node_n(op, vals, n_out, std::move(attrs))) b.output(v);
  return b.build();
}

std::vector<Tensor> run_op(const std::string& op, const std::vector<In>& ins, std::vector<NamedAttribute> attrs = {},
                           size_t n_out = 1, int64_t opset = 17) {
  std::vector<Tensor> feeds;
  auto g = one_node(op, ins, std::move(attrs), n_out, opset, &feeds);
  return run_cpu(*g, feeds);
}

Tensor iota(std::vector<int64_t> dims, float start = 0) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return floats(v, std::move(dims));
}

Tensor int32s(std::vector<int32_t> v, std::vector<int64_t> dims) {
  Tensor t(DType::Int32, std::move(dims));
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

Tensor bools(std::vector<uint8_t> v, std::vector<int64_t> dims) {
  Tensor t(DType::Bool, std::move(dims));
  std::copy(v.begin(), v.end(), t.data<uint8_t>());
  return t;
}

/// Naive transpose, the oracle for the blocked/merged fast paths.
Tensor naive_transpose(const Tensor& x, const std::vector<int64_t>& perm) {
  std::vector<int64_t> od(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) od[i] = x.dim(perm[i]);
  Tensor y(x.dtype(), od);
  std::vector<int64_t> xs(x.rank(), 1);
  for (size_t i = x.rank(); i-- > 1;) xs[i - 1] = xs[i] * x.dim(i);
  std::vector<int64_t> idx(od.size(), 0);
  for (int64_t o = 0; o < y.numel(); ++o) {
    int64_t rem = o, off = 0;
    for (size_t i = od.size(); i-- > 0;) {
      idx[i] = rem % od[i];
      rem /= od[i];
      off += idx[i] * xs[perm[i]];
    }
    y.data<float>()[o] = x.data<float>()[off];
  }
  return y;
}

const Shape& output_shape(const Graph& g) { return *g.outputs[0]->type.shape; }

}  // namespace

// ---------------------------------------------------------------- Transpose

TEST(CpuTranspose, DefaultPermReversesAxes) {
  auto out = run_op("Transpose", {{iota({2, 3})}});
  expect_close(out[0], floats({0, 3, 1, 4, 2, 5}, {3, 2}));
}

TEST(CpuTranspose, MatchesNaiveOnEveryPath) {
  // 2-D tiles, NCHW->NHWC (one axis moved), a batched inner transpose, odd sizes, a rank-5 mix.
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{70, 91}, {1, 0}},     {{2, 5, 9, 13}, {0, 2, 3, 1}},      {{3, 40, 33}, {0, 2, 1}},
      {{4, 3, 2}, {2, 0, 1}}, {{2, 3, 1, 4, 5}, {4, 1, 3, 0, 2}}, {{1, 64, 1, 50}, {3, 2, 1, 0}}};
  for (const auto& [dims, perm] : cases) {
    Tensor x = iota(dims);
    auto out = run_op("Transpose", {{x}}, {attr("perm", perm)});
    expect_close(out[0], naive_transpose(x, perm));
  }
}

TEST(CpuTranspose, RejectsBadPerm) {
  EXPECT_THROW(run_op("Transpose", {{iota({2, 3})}}, {attr("perm", std::vector<int64_t>{0, 0})}), Error);
  EXPECT_THROW(run_op("Transpose", {{iota({2, 3})}}, {attr("perm", std::vector<int64_t>{0, 1, 2})}), Error);
}

// ---------------------------------------------------------------- Concat, Split

TEST(CpuConcat, NegativeAxis) {
  auto out = run_op("Concat", {{iota({2, 2})}, {floats({10, 11}, {2, 1})}}, {attr("axis", int64_t{-1})});
  expect_close(out[0], floats({0, 1, 10, 2, 3, 11}, {2, 3}));
}

TEST(CpuConcat, MismatchedDimsAreAnError) {
  EXPECT_THROW(run_op("Concat", {{iota({2, 2})}, {iota({3, 1})}}, {attr("axis", int64_t{1})}), Error);
}

TEST(CpuSplit, EqualPartsByDefault) {
  auto out = run_op("Split", {{iota({2, 4})}}, {attr("axis", int64_t{1})}, 2);
  expect_close(out[0], floats({0, 1, 4, 5}, {2, 2}));
  expect_close(out[1], floats({2, 3, 6, 7}, {2, 2}));
}

TEST(CpuSplit, SplitAttributeBeforeOpset13AndInputAfter) {
  auto a = run_op("Split", {{iota({5})}}, {attr("split", std::vector<int64_t>{2, 3})}, 2, 11);
  expect_close(a[0], floats({0, 1}, {2}));
  expect_close(a[1], floats({2, 3, 4}, {3}));
  auto b = run_op("Split", {{iota({5})}, {int64s({4, 1}, {2})}}, {}, 2, 13);
  expect_close(b[0], floats({0, 1, 2, 3}, {4}));
  expect_close(b[1], floats({4}, {1}));
}

TEST(CpuSplit, NumOutputsAllowsASmallerLastChunk) {
  auto out = run_op("Split", {{iota({5})}}, {attr("num_outputs", int64_t{3})}, 3, 18);
  expect_close(out[0], floats({0, 1}, {2}));
  expect_close(out[1], floats({2, 3}, {2}));
  expect_close(out[2], floats({4}, {1}));
}

TEST(CpuSplit, IndivisibleEqualSplitIsAnError) {
  EXPECT_THROW(run_op("Split", {{iota({5})}}, {}, 2, 13), Error);
  EXPECT_THROW(run_op("Split", {{iota({5})}, {int64s({1, 1}, {2})}}, {}, 2, 13), Error);
}

// ---------------------------------------------------------------- Slice

TEST(CpuSlice, NegativeStepWithClampedEnds) {
  // starts -1 -> 9; ends INT64_MIN clamps to -1 (one before the first element) for negative steps.
  auto out =
      run_op("Slice", {{iota({10})}, {int64s({-1}, {1})}, {int64s({INT64_MIN}, {1})}, absent(), {int64s({-3}, {1})}});
  expect_close(out[0], floats({9, 6, 3, 0}, {4}));
}

TEST(CpuSlice, OutOfRangeStartsGiveEmptyAndEndsClamp) {
  auto a = run_op("Slice", {{iota({2, 4})}, {int64s({5}, {1})}, {int64s({10}, {1})}, {int64s({1}, {1})}});
  EXPECT_EQ(a[0].dims(), (std::vector<int64_t>{2, 0}));
  auto b = run_op("Slice",
                  {{iota({2, 4})}, {int64s({1}, {1})}, {int64s({1000}, {1})}, {int64s({-1}, {1})}, {int64s({2}, {1})}});
  expect_close(b[0], floats({1, 3, 5, 7}, {2, 2}));
}

TEST(CpuSlice, EmptyDimWithNegativeStep) {
  auto out = run_op(
      "Slice",
      {{iota({0, 3})}, {int64s({-1}, {1})}, {int64s({INT64_MIN}, {1})}, {int64s({0}, {1})}, {int64s({-1}, {1})}});
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{0, 3}));
}

TEST(CpuSlice, Int32OperandsAndTwoAxes) {
  auto out = run_op(
      "Slice",
      {{iota({3, 4})}, {int32s({1, 3}, {2})}, {int32s({3, 0}, {2})}, {int32s({0, 1}, {2})}, {int32s({1, -2}, {2})}});
  expect_close(out[0], floats({7, 5, 11, 9}, {2, 2}));
}

TEST(CpuSlice, Opset1Attributes) {
  auto out = run_op("Slice", {{iota({3, 4})}},
                    {attr("starts", std::vector<int64_t>{1}), attr("ends", std::vector<int64_t>{INT64_MAX}),
                     attr("axes", std::vector<int64_t>{0})},
                    1, 9);
  expect_close(out[0], iota({2, 4}, 4));
}

TEST(CpuSlice, ZeroStepAndRepeatedAxisAreErrors) {
  EXPECT_THROW(run_op("Slice", {{iota({4})}, {int64s({0}, {1})}, {int64s({4}, {1})}, absent(), {int64s({0}, {1})}}),
               Error);
  EXPECT_THROW(run_op("Slice", {{iota({4})}, {int64s({0, 0}, {2})}, {int64s({4, 4}, {2})}, {int64s({0, -1}, {2})}}),
               Error);
}

TEST(CpuSlice, UnknownStartsGivePartialShapeAtImport) {
  auto g =
      one_node("Slice", {{iota({3, 4})}, {int64s({1}, {1})}, constant(int64s({3}, {1})), constant(int64s({1}, {1}))},
               {}, 1, 17, nullptr);
  infer_shapes(*g);
  const Shape& s = output_shape(*g);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0], Dim(3));
  EXPECT_FALSE(s[1].is_static());
}

// ---------------------------------------------------------------- Gather family

TEST(CpuGather, AxisOneWithNegativeIndices) {
  auto out = run_op("Gather", {{iota({2, 3})}, {int64s({-1, 0}, {2})}}, {attr("axis", int64_t{1})});
  expect_close(out[0], floats({2, 0, 5, 3}, {2, 2}));
}

TEST(CpuGather, ScalarIndexDropsTheAxis) {
  auto out = run_op("Gather", {{iota({3, 2})}, {int32s({2}, {})}});
  expect_close(out[0], floats({4, 5}, {2}));
}

TEST(CpuGather, OutOfRangeIndexIsAnError) {
  EXPECT_THROW(run_op("Gather", {{iota({2, 3})}, {int64s({3}, {1})}}, {attr("axis", int64_t{1})}), Error);
  EXPECT_THROW(run_op("Gather", {{iota({2, 3})}, {int64s({-4}, {1})}}, {attr("axis", int64_t{1})}), Error);
}

TEST(CpuGatherElements, SpecExampleAndNegativeIndex) {
  auto out = run_op("GatherElements", {{floats({1, 2, 3, 4}, {2, 2})}, {int64s({0, 0, -1, 0}, {2, 2})}},
                    {attr("axis", int64_t{1})});
  expect_close(out[0], floats({1, 1, 4, 3}, {2, 2}));
  auto ax0 = run_op("GatherElements", {{iota({3, 3}, 1)}, {int64s({1, 2, 0, 2, 0, 0}, {2, 3})}});
  expect_close(ax0[0], floats({4, 8, 3, 7, 2, 3}, {2, 3}));
  EXPECT_THROW(run_op("GatherElements", {{iota({2, 2})}, {int64s({0, 2, 0, 0}, {2, 2})}}, {attr("axis", int64_t{1})}),
               Error);
}

TEST(CpuGatherND, BatchDims) {
  auto out = run_op("GatherND", {{iota({2, 2, 2})}, {int64s({1, 0}, {2, 1})}}, {attr("batch_dims", int64_t{1})});
  expect_close(out[0], floats({2, 3, 4, 5}, {2, 2}));
  auto full = run_op("GatherND", {{iota({2, 2})}, {int64s({0, 0, 1, -1}, {2, 2})}});
  expect_close(full[0], floats({0, 3}, {2}));
  EXPECT_THROW(run_op("GatherND", {{iota({2, 2})}, {int64s({2, 0}, {1, 2})}}), Error);
}

// ---------------------------------------------------------------- Scatter family

TEST(CpuScatterElements, AddAccumulatesDuplicates) {
  auto out = run_op("ScatterElements", {{iota({1, 5}, 1)}, {int64s({1, 1}, {1, 2})}, {floats({1.1f, 2.1f}, {1, 2})}},
                    {attr("axis", int64_t{1}), attr("reduction", std::string("add"))});
  expect_close(out[0], floats({1, 5.2f, 3, 4, 5}, {1, 5}));
}

TEST(CpuScatterElements, NoneMaxAndNegativeIndices) {
  auto none =
      run_op("ScatterElements",
             {{iota({3, 3})}, {int64s({1, 0, -1, 0, 2, 1}, {2, 3})}, {floats({10, 11, 12, 20, 21, 22}, {2, 3})}});
  expect_close(none[0], floats({20, 11, 2, 10, 4, 22, 6, 21, 12}, {3, 3}));
  auto mx = run_op("ScatterElements", {{floats({1, 5, 3}, {3})}, {int64s({0, 1, 1}, {3})}, {floats({4, 2, 7}, {3})}},
                   {attr("reduction", std::string("max"))}, 1, 18);
  expect_close(mx[0], floats({4, 7, 3}, {3}));
  EXPECT_THROW(run_op("ScatterElements", {{iota({3})}, {int64s({3}, {1})}, {floats({1}, {1})}}), Error);
}

TEST(CpuScatterElements, LargeScattersMatchTheSequentialRule) {
  // Big enough to run on several threads, with few distinct indices along the axis (so most
  // updates collide), updates smaller than data off the axis, the axis first, middle and last,
  // and every reduction: the result must be the one ONNX's sequential loop gives (later updates
  // win, reductions in update order; float sums in that order too).
  struct Shape3 {
    std::vector<int64_t> data, upd;
    int64_t axis;
    bool int32 = false;  // int32 indices
  };
  // The last two cover data off the axis, as a detector's RoI pooling does (a run of one row's
  // positions is then contiguous in data).
  const Shape3 shapes[] = {{{6, 64, 90}, {40, 60, 80}, 0},
                           {{7, 9, 700}, {5, 30, 600}, 1},
                           {{31, 31, 40}, {30, 29, 90}, 2},
                           {{5, 30, 40}, {50, 30, 40}, 0},
                           {{7, 9, 70}, {7, 20, 70}, 1, true}};
  std::mt19937 rng(11);
  for (const auto& sh : shapes)
    for (const char* red : {"none", "add", "mul", "max", "min"}) {
      SCOPED_TRACE(std::string(red) + " on axis " + std::to_string(sh.axis));
      const Tensor x = uniform_floats(sh.data, 3);
      const Tensor u = uniform_floats(sh.upd, 4);
      int64_t n = 1;
      for (int64_t d : sh.upd) n *= d;
      std::vector<int64_t> iv(static_cast<size_t>(n));
      const int64_t dim = sh.data[static_cast<size_t>(sh.axis)];
      for (auto& v : iv) v = static_cast<int64_t>(rng() % 3) - (rng() % 2 ? dim : 0);  // -dim..2, few values
      Tensor ind = int64s(iv, sh.upd);
      if (sh.int32) {
        ind = Tensor(DType::Int32, sh.upd);
        for (int64_t k = 0; k < n; ++k) ind.data<int32_t>()[k] = static_cast<int32_t>(iv[static_cast<size_t>(k)]);
      }
      // The oracle: every update in C order.
      Tensor want = x.clone();
      float* w = want.data<float>();
      const float* pu = u.data<float>();
      std::vector<int64_t> c(3, 0);
      for (int64_t k = 0; k < n; ++k) {
        c[2] = k % sh.upd[2];
        c[1] = k / sh.upd[2] % sh.upd[1];
        c[0] = k / (sh.upd[2] * sh.upd[1]);
        std::vector<int64_t> at = c;
        int64_t idx = iv[static_cast<size_t>(k)];
        at[static_cast<size_t>(sh.axis)] = idx < 0 ? idx + dim : idx;
        float& dst = w[(at[0] * sh.data[1] + at[1]) * sh.data[2] + at[2]];
        const std::string r = red;
        const float v = pu[k];
        dst = r == "none"  ? v
              : r == "add" ? dst + v
              : r == "mul" ? dst * v
              : r == "max" ? std::max(dst, v)
                           : std::min(dst, v);
      }
      const auto got = run_op("ScatterElements", {{x}, {ind}, {u}},
                              {attr("axis", sh.axis), attr("reduction", std::string(red))}, 1, 18);
      ASSERT_EQ(got[0].dims(), want.dims());
      EXPECT_EQ(std::memcmp(got[0].raw(), want.raw(), want.nbytes()), 0);
    }
}

TEST(CpuScatter, OldNameBehavesLikeScatterElements) {
  auto out = run_op("Scatter", {{iota({1, 5}, 1)}, {int64s({1, 3}, {1, 2})}, {floats({1.1f, 2.1f}, {1, 2})}},
                    {attr("axis", int64_t{1})}, 1, 10);
  expect_close(out[0], floats({1, 1.1f, 3, 2.1f, 5}, {1, 5}));
}

TEST(CpuScatterND, SlicesAndMultiply) {
  auto out = run_op("ScatterND", {{iota({4, 2})}, {int64s({3, -4}, {2, 1})}, {floats({10, 11, 20, 21}, {2, 2})}});
  expect_close(out[0], floats({20, 21, 2, 3, 4, 5, 10, 11}, {4, 2}));
  auto mul = run_op("ScatterND", {{floats({1, 2, 3, 4}, {4})}, {int64s({1, 1}, {2, 1})}, {floats({3, 5}, {2})}},
                    {attr("reduction", std::string("mul"))});
  expect_close(mul[0], floats({1, 30, 3, 4}, {4}));
  EXPECT_THROW(run_op("ScatterND", {{iota({4})}, {int64s({4}, {1, 1})}, {floats({1}, {1})}}), Error);
}

// ---------------------------------------------------------------- Expand, Tile

TEST(CpuExpand, BidirectionalBroadcast) {
  auto out = run_op("Expand", {{floats({1, 2, 3}, {3, 1})}, {int64s({2, 1, 2}, {3})}});
  expect_close(out[0], floats({1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}, {2, 3, 2}));
  auto keep = run_op("Expand", {{floats({1, 2, 3}, {3, 1})}, {int64s({1}, {1})}});
  expect_close(keep[0], floats({1, 2, 3}, {3, 1}));
  EXPECT_THROW(run_op("Expand", {{iota({3})}, {int64s({2}, {1})}}), Error);
}

TEST(CpuExpand, UnknownShapeKeepsNonUnitDimsAtImport) {
  auto g = one_node("Expand", {{iota({3, 1})}, {int64s({1, 1, 4}, {3})}}, {}, 1, 17, nullptr);
  infer_shapes(*g);
  const Shape& s = output_shape(*g);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[1], Dim(3));
  EXPECT_FALSE(s[2].is_static());
}

TEST(CpuTile, RepeatsEveryAxis) {
  auto out = run_op("Tile", {{floats({1, 2, 3, 4}, {2, 2})}, {int64s({2, 3}, {2})}});
  expect_close(out[0], floats({1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4, 1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}, {4, 6}));
  EXPECT_THROW(run_op("Tile", {{iota({2})}, {int64s({2, 2}, {2})}}), Error);
}

// ---------------------------------------------------------------- Pad

TEST(CpuPad, ConstantWithValueAndNegativePads) {
  auto out = run_op("Pad", {{iota({2, 3})}, {int64s({1, 0, 0, -1}, {4})}, {floats({9}, {})}});
  expect_close(out[0], floats({9, 9, 0, 1, 3, 4}, {3, 2}));
}

TEST(CpuPad, ReflectEdgeWrap) {
  Tensor x = floats({1, 2, 3}, {1, 3});
  auto pads = [] { return int64s({0, 4, 0, 2}, {4}); };
  auto reflect = run_op("Pad", {{x}, {pads()}}, {attr("mode", std::string("reflect"))});
  expect_close(reflect[0], floats({1, 2, 3, 2, 1, 2, 3, 2, 1}, {1, 9}));
  auto edge = run_op("Pad", {{x}, {pads()}}, {attr("mode", std::string("edge"))});
  expect_close(edge[0], floats({1, 1, 1, 1, 1, 2, 3, 3, 3}, {1, 9}));
  auto wrap = run_op("Pad", {{x}, {pads()}}, {attr("mode", std::string("wrap"))}, 1, 19);
  expect_close(wrap[0], floats({3, 1, 2, 3, 1, 2, 3, 1, 2}, {1, 9}));
}

TEST(CpuPad, AxesInputAndIntegerData) {
  auto out =
      run_op("Pad", {{int64s({1, 2, 3, 4}, {2, 2})}, {int64s({1, 1}, {2})}, {int64s({7}, {1})}, {int64s({-1}, {1})}},
             {}, 1, 18);
  expect_close(out[0], int64s({7, 1, 2, 7, 7, 3, 4, 7}, {2, 4}));
}

TEST(CpuPad, Opset2Attributes) {
  auto out =
      run_op("Pad", {{iota({1, 2})}}, {attr("pads", std::vector<int64_t>{0, 1, 0, 1}), attr("value", 5.0f)}, 1, 2);
  expect_close(out[0], floats({5, 0, 1, 5}, {1, 4}));
}

TEST(CpuPad, BadPadsAreErrors) {
  EXPECT_THROW(run_op("Pad", {{iota({2})}, {int64s({1}, {1})}}), Error);
  EXPECT_THROW(run_op("Pad", {{iota({2})}, {int64s({-2, -1}, {2})}}), Error);
  EXPECT_THROW(run_op("Pad", {{iota({2})}, {int64s({1, 1}, {2})}}, {attr("mode", std::string("mirror"))}), Error);
}

// ---------------------------------------------------------------- Col2Im

TEST(CpuCol2Im, OneDimensionSumsTheOverlappingColumns) {
  // image 5, block 3, stride 1: 3 positions; column value (k, l) lands at l + k.
  const Tensor x = floats({1, 2, 3, 10, 20, 30, 100, 200, 300}, {1, 3, 3});  // rows k = 0, 1, 2; columns l
  auto y = run_op("Col2Im", {{x}, constant(int64s({5}, {1})), constant(int64s({3}, {1}))}, {}, 1, 18);
  ASSERT_EQ(y[0].dims(), (std::vector<int64_t>{1, 1, 5}));
  const std::vector<float> want = {1, 2 + 10, 3 + 20 + 100, 30 + 200, 300};
  for (int64_t i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(y[0].data<float>()[i], want[static_cast<size_t>(i)]) << i;
}

TEST(CpuCol2Im, PaddingStridesAndDilationsCountEachPixelsCover) {
  // All-ones columns: each pixel sums how many (block position, offset) pairs reach it, counted here
  // the other way round, from the pixel: offset k reaches it from position (p + pad - k·dil) / stride
  // when that divides and lies in the block grid. Two images, two channels, a 2-D 7 x 6 image.
  const std::vector<int64_t> img = {7, 6}, blk = {3, 2}, dil = {1, 2}, pads = {1, 0, 1, 1}, str = {2, 1};
  std::vector<int64_t> grid(2);
  for (size_t d = 0; d < 2; ++d) grid[d] = (img[d] + pads[d] + pads[d + 2] - dil[d] * (blk[d] - 1) - 1) / str[d] + 1;
  const int64_t positions = grid[0] * grid[1], channels = 2;
  Tensor x(DType::Float32, {2, channels * blk[0] * blk[1], positions});
  std::fill(x.data<float>(), x.data<float>() + x.numel(), 1.0f);
  auto y = run_op("Col2Im", {{x}, constant(int64s(img, {2})), constant(int64s(blk, {2}))},
                  {attr("dilations", dil), attr("pads", pads), attr("strides", str)}, 1, 18);
  ASSERT_EQ(y[0].dims(), (std::vector<int64_t>{2, channels, 7, 6}));
  auto reach = [&](size_t d, int64_t p) {
    int64_t n = 0;
    for (int64_t k = 0; k < blk[d]; ++k) {
      const int64_t at = p + pads[d] - k * dil[d];
      n += at >= 0 && at % str[d] == 0 && at / str[d] < grid[d];
    }
    return n;
  };
  for (int64_t ic = 0; ic < 2 * channels; ++ic)
    for (int64_t h = 0; h < 7; ++h)
      for (int64_t w = 0; w < 6; ++w)
        EXPECT_FLOAT_EQ(y[0].data<float>()[(ic * 7 + h) * 6 + w], static_cast<float>(reach(0, h) * reach(1, w)))
            << ic << " " << h << " " << w;
}

TEST(CpuCol2Im, ShapesThatDoNotFitAreErrors) {
  const auto run = [](std::vector<int64_t> xdims, std::vector<int64_t> img, std::vector<int64_t> blk) {
    Tensor x(DType::Float32, xdims);
    const int64_t n = static_cast<int64_t>(img.size());
    run_op("Col2Im", {{x}, constant(int64s(img, {n})), constant(int64s(blk, {n}))}, {}, 1, 18);
  };
  EXPECT_NO_THROW(run({1, 4, 16}, {5, 5}, {2, 2}));
  EXPECT_THROW(run({1, 5, 16}, {5, 5}, {2, 2}), Error);  // 5 is not a multiple of the block's 4
  EXPECT_THROW(run({1, 4, 15}, {5, 5}, {2, 2}), Error);  // 16 block positions, not 15
  EXPECT_THROW(run({1, 4, 16}, {5, 5}, {2}), Error);     // shapes of two lengths
  EXPECT_THROW(run({1, 36, 1}, {5, 5}, {6, 6}), Error);  // a block larger than the image
  // Shapes given at run time are checked by the kernel itself: a zero stride is an error, not a
  // division by zero.
  Tensor x(DType::Float32, {1, 4, 16});
  EXPECT_THROW(run_op("Col2Im", {{x}, {int64s({5, 5}, {2})}, {int64s({2, 2}, {2})}},
                      {attr("strides", std::vector<int64_t>{0, 1})}, 1, 18),
               Error);
  EXPECT_NO_THROW(run_op("Col2Im", {{x}, {int64s({5, 5}, {2})}, {int64s({2, 2}, {2})}}, {}, 1, 18));
}

// ---------------------------------------------------------------- DepthToSpace, SpaceToDepth

namespace {
Tensor d2s_input() {
  std::vector<float> v;
  for (int c = 0; c < 8; ++c)
    for (int i = 0; i < 6; ++i) v.push_back(static_cast<float>(c * 9 + (i / 3) * 3 + i % 3));
  return floats(v, {1, 8, 2, 3});
}
}  // namespace

TEST(CpuDepthToSpace, DcrAndCrdMatchTheSpec) {
  auto dcr = run_op("DepthToSpace", {{d2s_input()}}, {attr("blocksize", int64_t{2})});
  expect_close(dcr[0],
               floats({0, 18, 1,  19, 2,  20, 36, 54, 37, 55, 38, 56, 3,  21, 4,  22, 5,  23, 39, 57, 40, 58, 41, 59,
                       9, 27, 10, 28, 11, 29, 45, 63, 46, 64, 47, 65, 12, 30, 13, 31, 14, 32, 48, 66, 49, 67, 50, 68},
                      {1, 2, 4, 6}));
  auto crd = run_op("DepthToSpace", {{d2s_input()}}, {attr("blocksize", int64_t{2}), attr("mode", std::string("CRD"))});
  expect_close(crd[0],
               floats({0,  9,  1,  10, 2,  11, 18, 27, 19, 28, 20, 29, 3,  12, 4,  13, 5,  14, 21, 30, 22, 31, 23, 32,
                       36, 45, 37, 46, 38, 47, 54, 63, 55, 64, 56, 65, 39, 48, 40, 49, 41, 50, 57, 66, 58, 67, 59, 68},
                      {1, 2, 4, 6}));
  EXPECT_THROW(run_op("DepthToSpace", {{iota({1, 6, 2, 2})}}, {attr("blocksize", int64_t{2})}), Error);
}

TEST(CpuSpaceToDepth, InvertsDepthToSpaceDcr) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {2, 12, 3, 5});
  Value* s = b.node("DepthToSpace", {x}, {attr("blocksize", int64_t{2})});
  b.output(b.node("SpaceToDepth", {s}, {attr("blocksize", int64_t{2})}));
  auto g = b.build();
  Tensor in = iota({2, 12, 3, 5});
  expect_close(run_cpu(*g, {in})[0], in);
  EXPECT_THROW(run_op("SpaceToDepth", {{iota({1, 1, 3, 4})}}, {attr("blocksize", int64_t{2})}), Error);
}

// ---------------------------------------------------------------- TopK

TEST(CpuTopK, LargestAlongLastAxis) {
  auto out = run_op("TopK", {{iota({2, 4})}, {int64s({3}, {1})}}, {}, 2);
  expect_close(out[0], floats({3, 2, 1, 7, 6, 5}, {2, 3}));
  expect_close(out[1], int64s({3, 2, 1, 3, 2, 1}, {2, 3}));
}

TEST(CpuTopK, TiesKeepTheLowerIndexFirst) {
  auto big = run_op("TopK", {{floats({1, 3, 3, 2, 3}, {5})}, {int64s({2}, {1})}}, {}, 2);
  expect_close(big[1], int64s({1, 2}, {2}));
  auto small = run_op("TopK", {{floats({2, 1, 3, 1}, {4})}, {int64s({3}, {1})}}, {attr("largest", int64_t{0})}, 2);
  expect_close(small[0], floats({1, 1, 2}, {3}));
  expect_close(small[1], int64s({1, 3, 0}, {3}));
}

TEST(CpuTopK, AxisZeroAndOpset1Attribute) {
  auto out = run_op("TopK", {{floats({1, 9, 5, 2}, {2, 2})}}, {attr("k", int64_t{1}), attr("axis", int64_t{0})}, 2, 9);
  expect_close(out[0], floats({5, 9}, {1, 2}));
  expect_close(out[1], int64s({1, 0}, {1, 2}));
  EXPECT_THROW(run_op("TopK", {{iota({3})}, {int64s({4}, {1})}}, {}, 2), Error);
}

// ---------------------------------------------------------------- Compress, ReverseSequence

TEST(CpuCompress, WithAndWithoutAxis) {
  Tensor x = floats({1, 2, 3, 4, 5, 6}, {3, 2});
  auto a = run_op("Compress", {{x}, {bools({0, 1, 1}, {3})}}, {attr("axis", int64_t{0})});
  expect_close(a[0], floats({3, 4, 5, 6}, {2, 2}));
  auto n = run_op("Compress", {{x}, {bools({1, 0}, {2})}}, {attr("axis", int64_t{-1})});
  expect_close(n[0], floats({1, 3, 5}, {3, 1}));
  auto flat = run_op("Compress", {{x}, {bools({0, 1, 0, 0, 1}, {5})}});
  expect_close(flat[0], floats({2, 5}, {2}));
  EXPECT_THROW(run_op("Compress", {{x}, {bools({0, 0, 0, 1}, {4})}}, {attr("axis", int64_t{0})}), Error);
}

TEST(CpuReverseSequence, TimeAndBatchAxes) {
  // [time=4, batch=4]; batch b reverses its first lens[b] steps.
  auto t = run_op("ReverseSequence", {{iota({4, 4})}, {int64s({4, 3, 2, 1}, {4})}});
  expect_close(t[0], floats({12, 9, 6, 3, 8, 5, 2, 7, 4, 1, 10, 11, 0, 13, 14, 15}, {4, 4}));
  auto b = run_op("ReverseSequence", {{iota({2, 3})}, {int64s({2, 3}, {2})}},
                  {attr("batch_axis", int64_t{0}), attr("time_axis", int64_t{1})});
  expect_close(b[0], floats({1, 0, 2, 5, 4, 3}, {2, 3}));
  EXPECT_THROW(run_op("ReverseSequence", {{iota({2, 3})}, {int64s({5, 1, 1}, {3})}}), Error);
}

// ---------------------------------------------------------------- costs

TEST(MovementCost, MovesBytesWithoutFlops) {
  auto g = one_node("Transpose", {{iota({2, 3})}}, {}, 1, 17, nullptr);
  infer_shapes(*g);
  auto c = node_cost(*g, *g->nodes()[0]);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->flops, 0);
  EXPECT_EQ(c->bytes_read, 24);
  EXPECT_EQ(c->bytes_written, 24);
}

TEST(MovementCost, GatherReadsOnlyTheGatheredRows) {
  // A 1000x16 table, 4 rows gathered: reads the 4 indices and 4 rows, not the table.
  auto g = one_node("Gather", {constant(iota({1000, 16})), {int64s({1, 2, 3, 4}, {4})}}, {}, 1, 17, nullptr);
  infer_shapes(*g);
  auto c = node_cost(*g, *g->nodes()[0]);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->bytes_read, 4 * 8 + 4 * 16 * 4);
  EXPECT_EQ(c->bytes_written, 4 * 16 * 4);
}

TEST(MovementCost, ScatterReductionCountsOneOpPerUpdate) {
  auto g = one_node("ScatterElements", {{iota({5})}, {int64s({1, 1, 2}, {3})}, {floats({1, 2, 3}, {3})}},
                    {attr("reduction", std::string("add"))}, 1, 17, nullptr);
  infer_shapes(*g);
  EXPECT_EQ(node_cost(*g, *g->nodes()[0])->flops, 3);
}

TEST(MovementInference, SymbolicDimsPassThrough) {
  GraphBuilder b(13);
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 6});
  Value* k = b.input("k", DType::Int64, {1});
  auto parts = b.node_n("Split", {x}, 2, {attr("axis", int64_t{1})});
  auto top = b.node_n("TopK", {parts[0], k}, 2);
  Value* t = b.node("Transpose", {top[0]});
  b.output(parts[1]);
  b.output(t);
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_EQ(*g->outputs[0]->type.shape, (Shape{Dim::sym("N"), 3}));
  const Shape& ts = *g->outputs[1]->type.shape;
  ASSERT_EQ(ts.size(), 2u);
  EXPECT_FALSE(ts[0].is_static());  // k unknown at import
  EXPECT_EQ(ts[1], Dim::sym("N"));
}

// Checked dimension arithmetic (ir/dim_math.h) and every shape function that uses it: a product,
// sum or window that passes int64 is a BadInput naming the node, never a wrapped shape.
#include <gtest/gtest.h>

#include <climits>

#include "ir/dim_math.h"
#include "ir/error.h"
#include "ir/graph_builder.h"
#include "ir/memory_limit.h"
#include "passes/infer_shapes.h"

using namespace fusec;

namespace {

constexpr int64_t k62 = int64_t{1} << 62;

/// The BadInput message of f(), or "" if it did not throw.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    return e.what();
  }
  return "";
}

/// A NodeAttrs to report through, on a node of the given op.
struct Where {
  Node node;
  OpSchema schema;
  Where() {
    node.name = "n";
    node.op_type = "Op";
    schema.op_type = "Op";
  }
  NodeAttrs attrs() const { return NodeAttrs(node, schema); }
};

/// Infers a one-node graph with input x (shape `x_shape`) and initializers, returns the error.
std::string infer_error(const std::string& op, Shape x_shape, std::vector<Tensor> inits,
                        std::vector<NamedAttribute> attrs, int64_t opset = 17, size_t extra_x = 0) {
  GraphBuilder b(opset);
  std::vector<Value*> ins{b.input("x", DType::Float32, std::move(x_shape))};
  for (size_t i = 0; i < extra_x; ++i) ins.push_back(ins[0]);
  for (size_t i = 0; i < inits.size(); ++i) {
    if (!inits[i].defined()) {
      ins.push_back(nullptr);
      continue;
    }
    ins.push_back(b.initializer("c" + std::to_string(i), inits[i]));
  }
  b.output(b.node(op, ins, std::move(attrs), "the_node"));
  auto g = b.build();
  return error_of([&] { infer_shapes(*g); });
}

void expect_overflow_named(const std::string& msg, const std::string& op) {
  EXPECT_NE(msg.find("overflows int64"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(node 'the_node', op " + op + ")"), std::string::npos) << msg;
}

}  // namespace

TEST(DimMath, CheckedOperationsReportTheNode) {
  Where w;
  EXPECT_EQ(dims::mul(3, 4, w.attrs(), "x"), 12);
  EXPECT_EQ(dims::add(INT64_MAX - 1, 1, w.attrs(), "x"), INT64_MAX);
  EXPECT_EQ(dims::window(5, 2, w.attrs(), "x"), 9);
  EXPECT_EQ(dims::from_double(7.9, w.attrs(), "x"), 7);
  EXPECT_EQ(dims::product({k62 / 2, 0, 2}, w.attrs(), "x"), 0);
  const std::string m = error_of([&] { dims::mul(4, k62, w.attrs(), "output dim 0"); });
  EXPECT_EQ(m, "output dim 0: 4 x 4611686018427387904 overflows int64 (node 'n', op Op)");
  EXPECT_NE(error_of([&] { dims::add(INT64_MAX, 1, w.attrs(), "x"); }).find("overflows"), std::string::npos);
  EXPECT_NE(error_of([&] { dims::sub(INT64_MIN, 1, w.attrs(), "x"); }).find("overflows"), std::string::npos);
  // (5 - 1) * 2^62 wraps to 0 and the window to 1 without the check.
  EXPECT_NE(error_of([&] { dims::window(5, k62, w.attrs(), "x"); }).find("overflows"), std::string::npos);
  // Even with a zero, the other dims' product must fit (kernels compute strides from them).
  EXPECT_NE(error_of([&] { dims::product({k62, k62, 0}, w.attrs(), "x"); }).find("overflows"), std::string::npos);
  for (double bad : {1e30, -1.0, std::nan(""), static_cast<double>(INFINITY), 9223372036854775808.0})
    EXPECT_NE(error_of([&] { dims::from_double(bad, w.attrs(), "x"); }).find("not a valid dimension"),
              std::string::npos);
  EXPECT_NE(error_of([&] { dims::rank(dims::kMaxRank + 1, w.attrs(), "x"); }).find("not a supported rank"),
            std::string::npos);
}

TEST(DimMath, NumelAndBytes) {
  EXPECT_EQ(checked_numel({k62, 0}), 0);
  EXPECT_NE(error_of([] { checked_numel({k62, k62, 0}); }).find("more elements"), std::string::npos);
  EXPECT_EQ(checked_nbytes({3, 5}, DType::Float32), 60);
  EXPECT_NE(error_of([] { checked_nbytes({k62}, DType::Float32); }).find("more bytes"), std::string::npos);
}

TEST(DimMath, EveryShapeFunctionRefusesOverflow) {
  auto i64 = [](std::vector<int64_t> v) { return Tensor::from_int64(v, {static_cast<int64_t>(v.size())}); };
  expect_overflow_named(infer_error("Tile", Shape{4}, {i64({k62})}, {}), "Tile");
  expect_overflow_named(infer_error("Pad", Shape{4}, {i64({INT64_MAX, 0})}, {}), "Pad");
  expect_overflow_named(infer_error("Reshape", Shape{1}, {i64({int64_t{1} << 32, int64_t{1} << 32})}, {}), "Reshape");
  expect_overflow_named(infer_error("Concat", Shape{k62}, {}, {attr("axis", int64_t{0})}, 17, 1), "Concat");
  expect_overflow_named(infer_error("Flatten", Shape{k62, 4}, {}, {attr("axis", int64_t{2})}), "Flatten");
  expect_overflow_named(infer_error("DepthToSpace", Shape{1, 4, 2, 2}, {}, {attr("blocksize", int64_t{1} << 32)}),
                        "DepthToSpace");
  expect_overflow_named(infer_error("SpaceToDepth", Shape{1, 4, 2, 2}, {}, {attr("blocksize", int64_t{1} << 32)}),
                        "SpaceToDepth");
  expect_overflow_named(infer_error("SpaceToDepth", Shape{k62, 4, 2, 2}, {}, {attr("blocksize", int64_t{1})}) +
                            infer_error("DepthToSpace", Shape{1, 4, k62, 2}, {}, {attr("blocksize", int64_t{2})}),
                        "DepthToSpace");
  {
    GraphBuilder b(17);
    Value* x = b.input("x", DType::Float32, Shape{4});
    for (Value* v : b.node_n("Split", {x, b.initializer("s", i64({INT64_MAX, 2}))}, 2, {}, "the_node")) b.output(v);
    auto g = b.build();
    expect_overflow_named(error_of([&] { infer_shapes(*g); }), "Split");
  }
  // Conv: pads that pass int64, and a dilation whose window wraps to 1.
  Tensor w1 = Tensor(DType::Float32, {1, 1, 1, 1}), w5 = Tensor(DType::Float32, {1, 1, 5, 1});
  expect_overflow_named(
      infer_error("Conv", Shape{1, 1, 4, 4}, {w1}, {attr("pads", std::vector<int64_t>{0, 0, INT64_MAX, 0})}), "Conv");
  expect_overflow_named(infer_error("Conv", Shape{1, 1, 4, 4}, {w5}, {attr("dilations", std::vector<int64_t>{k62, 1})}),
                        "Conv");
  expect_overflow_named(
      infer_error("Conv", Shape{1, 1, 4, 4}, {Tensor(DType::Float32, {1, 4, 1, 1})}, {attr("group", k62)}), "Conv");
  expect_overflow_named(
      infer_error("MaxPool", Shape{1, 1, 4, 4}, {},
                  {attr("kernel_shape", std::vector<int64_t>{3, 3}), attr("dilations", std::vector<int64_t>{k62, 1})}),
      "MaxPool");
  expect_overflow_named(
      infer_error("ConvTranspose", Shape{1, 1, 4, 4}, {w1}, {attr("strides", std::vector<int64_t>{k62, 1})}),
      "ConvTranspose");
  // Resize: scale x dim past int64, with the rest of the shape static and partly symbolic.
  Tensor big_scale = Tensor::from_float({1, 1, 1e30f, 1}, {4});
  for (Shape s : {Shape{1, 1, 2, 2}, Shape{1, Dim::sym("C"), 2, 2}}) {
    const std::string m = infer_error("Resize", s, {Tensor(), big_scale}, {});
    EXPECT_NE(m.find("not a valid dimension"), std::string::npos) << m;
    EXPECT_NE(m.find("(node 'the_node', op Resize)"), std::string::npos) << m;
  }
  // A rank taken from a shape input's length is bounded.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, Shape{2});
  Value* shape = b.input("s", DType::Int64, Shape{int64_t{1} << 40});
  b.output(b.node("Reshape", {x, shape}, {}, "the_node"));
  auto g = b.build();
  EXPECT_NE(error_of([&] { infer_shapes(*g); }).find("not a supported rank"), std::string::npos);
}

TEST(MemoryLimit, BudgetAndSizes) {
  MemoryBudget budget("test", 1000);
  budget.reserve(600, "first");
  EXPECT_FALSE(budget.try_reserve(500));
  const std::string m = error_of([&] { budget.reserve(500, "initializer 'W'"); });
  EXPECT_NE(m.find("initializer 'W' needs 500 B"), std::string::npos) << m;
  EXPECT_NE(m.find("--max-memory"), std::string::npos) << m;
  budget.release(600);
  EXPECT_TRUE(budget.try_reserve(1000));
  EXPECT_EQ(parse_byte_size("1073741824", "--max-memory"), size_t{1} << 30);
  EXPECT_EQ(parse_byte_size("512M", "--max-memory"), size_t{512} << 20);
  EXPECT_EQ(parse_byte_size("1.5GiB", "--max-memory"), size_t{3} << 29);
  EXPECT_EQ(parse_byte_size("8gb", "--max-memory"), size_t{8} << 30);
  for (const char* bad : {"", "G", "12Q", "-1", "1.2.3G", "0"})
    EXPECT_NE(error_of([&] { parse_byte_size(bad, "--max-memory"); }).find("not a size"), std::string::npos) << bad;
}

TEST(MemoryLimit, TensorAllocationIsCheckedAndReleased) {
  MemoryBudget& host = host_memory();
  const size_t old_limit = host.limit(), before = host.used();
  host.set_limit(before + (1 << 20));
  {
    Tensor t(DType::Float32, {1024});  // 4 KiB: fits
    EXPECT_GE(host.used(), before + 4096);
    const std::string m = error_of([] { Tensor big(DType::Float32, {1 << 20}); });  // 4 MiB: does not
    EXPECT_NE(m.find("needs 4.00 MiB"), std::string::npos) << m;
  }
  EXPECT_EQ(host.used(), before);
  host.set_limit(old_limit);
}

// fuse_squeeze_excite: torchvision's squeeze-and-excite blocks, as both exporters write them, become
// one ai.fusec SqueezeExcite with the same numbers on the CPU reference; guarded cases are left
// alone with a near-miss.
#include "passes/fuse_squeeze_excite.h"
#include "passes/pattern.h"

#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

constexpr int64_t N = 3, C = 20, CR = 6, H = 5, W = 7;

struct Block {
  std::string squeeze = "GlobalAveragePool";  // or "ReduceMean" (opset 18: axes an input), "ReduceMean13"
  std::string act = "Relu";                   // Relu, SiLU (x·Sigmoid(x)) or "" (none)
  std::string gate = "Sigmoid";               // Sigmoid, HardSigmoid or "" (none)
  bool scale_first = false;                   // Mul(gate, X)
  bool biases = true;
  int rank = 4;  // 3: a Conv1d block [N, C, L]
  bool pooled_read_elsewhere = false;
  bool gate_kernel_3 = false;  // the second layer a 3x3 conv (padded): not an SE layer
  bool grouped = false;        // the first layer grouped
};

/// x -> Conv 3x3 (so X is a computed activation) -> the block -> Relu.
std::unique_ptr<Graph> model(const Block& o) {
  GraphBuilder b(o.squeeze == "ReduceMean13" ? 13 : 18);
  const std::vector<int64_t> spatial = o.rank == 3 ? std::vector<int64_t>{H * W} : std::vector<int64_t>{H, W};
  std::vector<Dim> in_dims = {Dim(N), Dim(C)};
  for (int64_t s : spatial) in_dims.push_back(Dim(s));
  Value* in = b.input("x", DType::Float32, in_dims);
  auto wdims = [&](int64_t out, int64_t cin, int64_t k) {
    std::vector<int64_t> d = {out, cin};
    for (size_t i = 0; i < spatial.size(); ++i) d.push_back(k);
    return d;
  };
  auto pads = [&](int64_t p) { return attr("pads", std::vector<int64_t>(2 * spatial.size(), p)); };
  Value* x = b.node("Conv", {in, b.initializer("c.w", uniform_floats(wdims(C, C, 3), 1))}, {pads(1)}, "body");
  Value* p;
  if (o.squeeze == "GlobalAveragePool") {
    p = b.node("GlobalAveragePool", {x}, {}, "pool");
  } else {
    std::vector<int64_t> axes;
    for (size_t i = 0; i < spatial.size(); ++i) axes.push_back(-1 - static_cast<int64_t>(i));
    if (o.squeeze == "ReduceMean13")
      p = b.node("ReduceMean", {x}, {attr("axes", axes), attr("keepdims", int64_t{1})}, "pool");
    else
      p = b.node("ReduceMean", {x, b.initializer("axes", int64s(axes, {static_cast<int64_t>(axes.size())}))},
                 {attr("keepdims", int64_t{1})}, "pool");
  }
  if (o.pooled_read_elsewhere) b.output(p);
  std::vector<Value*> l1 = {p, b.initializer("fc1.w", uniform_floats(wdims(CR, o.grouped ? C / 2 : C, 1), 2))};
  if (o.biases) l1.push_back(b.initializer("fc1.b", uniform_floats({CR}, 3)));
  std::vector<NamedAttribute> a1;
  if (o.grouped) a1.push_back(attr("group", int64_t{2}));
  Value* h = b.node("Conv", l1, a1, "fc1");
  if (o.act == "Relu") {
    h = b.node("Relu", {h}, {}, "fc1.act");
  } else if (o.act == "SiLU") {
    Value* s = b.node("Sigmoid", {h}, {}, "fc1.sig");
    h = b.node("Mul", {h, s}, {}, "fc1.silu");
  }
  std::vector<Value*> l2 = {h, b.initializer("fc2.w", uniform_floats(wdims(C, CR, o.gate_kernel_3 ? 3 : 1), 4))};
  if (o.biases) l2.push_back(b.initializer("fc2.b", uniform_floats({C}, 5)));
  std::vector<NamedAttribute> a2;
  if (o.gate_kernel_3) a2.push_back(pads(1));
  Value* s = b.node("Conv", l2, a2, "fc2");
  if (o.gate == "HardSigmoid")
    s = b.node("HardSigmoid", {s}, {attr("alpha", 1.0f / 6), attr("beta", 0.5f)}, "fc2.gate");
  else if (o.gate == "Sigmoid")
    s = b.node("Sigmoid", {s}, {}, "fc2.gate");
  Value* y = b.node("Mul", o.scale_first ? std::vector<Value*>{s, x} : std::vector<Value*>{x, s}, {}, "excite");
  b.output(b.node("Relu", {y}, {}, "after"));
  return b.build();
}

/// The whole pipeline, as `fusec optimize` runs it: the layers become FusedConvs first.
struct Optimized {
  std::unique_ptr<Graph> original, optimized;
  OptimizeResult result;
};

Optimized optimize(const Block& o, bool portable = false) {
  auto g = model(o);
  infer_shapes(*g);
  Optimized r;
  r.original = g->clone();
  PipelineOptions p;
  p.pass.portable = portable;
  r.result = optimize_graph(*g, p);
  r.optimized = std::move(g);
  return r;
}

bool near_miss_says(const OptimizeResult& r, const std::string& text) {
  for (const auto& m : r.near_misses)
    if (m.pass == "fuse_squeeze_excite" && m.reason.find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(FuseSqueezeExcite, TorchvisionBlocksBecomeOneNodeWithTheSameNumbers) {
  struct Case {
    const char* squeeze;
    const char* act;
    const char* gate;
    bool scale_first, biases;
    int rank;
  };
  // MobileNetV3 (ReLU, HardSigmoid), EfficientNet (SiLU, Sigmoid), RegNetY (ReLU, Sigmoid), in
  // both exporters' squeezes; the gate on either side of the Mul; no biases; a 1-D block.
  const Case cases[] = {{"GlobalAveragePool", "Relu", "HardSigmoid", false, true, 4},
                        {"ReduceMean", "SiLU", "Sigmoid", true, true, 4},
                        {"ReduceMean13", "Relu", "Sigmoid", false, true, 4},
                        {"GlobalAveragePool", "", "Sigmoid", false, false, 4},
                        {"ReduceMean", "Relu", "Sigmoid", false, true, 3}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.squeeze) + " " + c.act + " " + c.gate + " rank " + std::to_string(c.rank));
    Block o;
    o.squeeze = c.squeeze;
    o.act = c.act;
    o.gate = c.gate;
    o.scale_first = c.scale_first;
    o.biases = c.biases;
    o.rank = c.rank;
    Optimized r = optimize(o);
    ASSERT_EQ(count(*r.optimized, "SqueezeExcite", "ai.fusec"), 1);
    for (const char* gone : {"GlobalAveragePool", "ReduceMean", "Mul", "Sigmoid", "HardSigmoid"})
      EXPECT_EQ(count(*r.optimized, gone), 0) << gone;
    const Node* se = find_op(*r.optimized, "SqueezeExcite");
    EXPECT_EQ(se->name, "fc1");
    EXPECT_EQ(se->input(0)->producer->name, "body");
    EXPECT_EQ(se->attr_string("activation", "?"), c.act);
    EXPECT_EQ(se->attr_string("gate", "?"), c.gate);
    EXPECT_EQ(se->inputs.size(), c.biases ? 5u : 3u);
    if (std::string(c.gate) == "HardSigmoid")
      EXPECT_EQ(se->attr_floats("gate_params", {}), (std::vector<float>{1.0f / 6, 0.5f}));
    expect_same_numbers(*r.original, *r.optimized, 11);
  }
}

TEST(FuseSqueezeExcite, GuardedCasesAreNearMisses) {
  Block elsewhere;
  elsewhere.pooled_read_elsewhere = true;
  Optimized a = optimize(elsewhere);
  EXPECT_EQ(count(*a.optimized, "SqueezeExcite", "ai.fusec"), 0);
  EXPECT_TRUE(near_miss_says(a.result, "read outside the block"));
  expect_same_numbers(*a.original, *a.optimized, 12);

  Block grouped;
  grouped.grouped = true;
  Optimized b = optimize(grouped);
  EXPECT_EQ(count(*b.optimized, "SqueezeExcite", "ai.fusec"), 0);
  EXPECT_TRUE(near_miss_says(b.result, "grouped"));

  Block wide;
  wide.gate_kernel_3 = true;
  Optimized c = optimize(wide);
  EXPECT_EQ(count(*c.optimized, "SqueezeExcite", "ai.fusec"), 0);
  EXPECT_TRUE(near_miss_says(c.result, "not a 1x1 conv"));
}

// The pass alone reads plain Convs as layers without activations (fuse_conv_activation has not
// run); under --portable they stay, with a near-miss.
TEST(FuseSqueezeExcite, PlainConvLayersFuseAloneAndPortableLeavesThem) {
  Block o;
  o.act = "";
  o.gate = "";
  Outcome r = run_one_pass<FuseSqueezeExcitePass>(model(o));
  EXPECT_TRUE(r.changed);
  const Node* se = find_op(*r.optimized, "SqueezeExcite");
  ASSERT_NE(se, nullptr);
  EXPECT_EQ(se->attr_string("activation", "?"), "");
  EXPECT_EQ(se->attr_string("gate", "?"), "");
  expect_same_numbers(*r.original, *r.optimized, 13);

  PassOptions p;
  p.portable = true;
  Outcome portable = run_one_pass<FuseSqueezeExcitePass>(model(o), p);
  EXPECT_FALSE(portable.changed);
  EXPECT_EQ(count(*portable.optimized, "GlobalAveragePool"), 1);
  expect_near_miss(portable, "fuse_squeeze_excite", "--portable");

  // A separate Sigmoid gate is not a layer's activation until fuse_conv_activation runs.
  Outcome sig = run_one_pass<FuseSqueezeExcitePass>(model(Block{}));
  EXPECT_FALSE(sig.changed);
}

// The elementwise code generator without a GPU: every standalone op and a dozen FusedElementwise
// programs are turned into CUDA C and compiled by NVRTC for sm_90 (CI has the toolkit, not a
// device, so this is where a generated-code compile error shows up first), plus the launch
// planner's dim coalescing, argument classes and fast divisors.
#include <gtest/gtest.h>

#include <set>

#include "backend/cuda/ops/elementwise/elementwise_codegen.h"
#include "backend/cuda/core/nvrtc_module.h"
#include "ir/graph.h"
#include "ir/graph_builder.h"
#include "ir/op_schema.h"

namespace fusec::cuda {
namespace {

struct GenCase {
  std::string op, domain;
  int64_t opset = 17;
  std::vector<NamedAttribute> attrs;
  std::vector<std::pair<DType, std::vector<int64_t>>> ins;  // storage dtype (== onnx dtype here), dims
  DType out = DType::Undefined;
  std::vector<int64_t> out_dims;
};

EwValue value(DType t, std::vector<int64_t> d) {
  EwValue v;
  v.present = true;
  v.dtype = v.onnx_dtype = t;
  v.dims = std::move(d);
  return v;
}

/// Source for the case, or "" with *why.
std::string generate(const GenCase& c, std::string* why, EwLaunchPlan* plan_out = nullptr) {
  Node n;
  n.name = "n_" + c.op;
  n.op_type = c.op;
  n.domain = c.domain;
  n.attrs = c.attrs;
  const OpSchema* schema = OpRegistry::global().find(c.domain, c.op, c.opset);
  if (!schema) {
    *why = "no schema";
    return "";
  }
  NodeAttrs attrs(n, *schema);
  std::vector<EwValue> ins;
  for (const auto& [t, d] : c.ins) ins.push_back(value(t, d));
  EwValue out = value(c.out, c.out_dims);
  auto f = describe_elementwise(attrs, c.opset, ins, out, why);
  if (!f) return "";
  auto plan = plan_elementwise_launch(*f, out.dtype, out.dims, why);
  if (!plan) return "";
  if (plan_out) *plan_out = *plan;
  return generate_elementwise_source(*f, *plan, out.dtype).code;
}

/// Compiles each distinct source once.
class Compiler {
 public:
  void check(const GenCase& c) {
    std::string why;
    std::string src = generate(c, &why);
    ASSERT_FALSE(src.empty()) << c.op << ": refused: " << why;
    if (!seen_.insert(src).second) return;
    std::string log;
    std::string cubin = compile_to_cubin(src, 90, &log);
    EXPECT_FALSE(cubin.empty()) << c.op << " failed to compile:\n" << log << "\n" << src;
  }

 private:
  std::set<std::string> seen_;
};

const std::vector<int64_t> kFull = {4, 33};

GenCase unary(const std::string& op, DType t, std::vector<NamedAttribute> attrs = {}, int64_t opset = 17) {
  return {op, "", opset, std::move(attrs), {{t, kFull}}, t, kFull};
}
GenCase binary(const std::string& op, DType t, DType out, std::vector<int64_t> b = {33}, int64_t opset = 17) {
  return {op, "", opset, {}, {{t, kFull}, {t, b}}, out, kFull};
}

const DType kFloats[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64};
const DType kInts[] = {DType::Int8, DType::UInt8, DType::Int32, DType::Int64};

TEST(CudaElementwiseCodegen, NvrtcIsAvailable) { EXPECT_FALSE(nvrtc_version().empty()); }

TEST(CudaElementwiseCodegen, FloatUnaryOpsCompile) {
  Compiler cc;
  const char* ops[] = {"Abs",    "Neg",       "Sign",       "Reciprocal", "Sqrt",  "Exp",   "Log",  "Floor",
                       "Ceil",   "Round",     "Erf",        "Sin",        "Cos",   "Tan",   "Asin", "Acos",
                       "Atan",   "Sinh",      "Cosh",       "Asinh",      "Acosh", "Atanh", "Relu", "Sigmoid",
                       "Tanh",   "Softplus",  "Softsign",   "HardSwish",  "Elu",   "Selu",  "Celu", "ThresholdedRelu",
                       "Shrink", "LeakyRelu", "HardSigmoid"};
  // Every op at float32 and float16; bfloat16/float64 differ only in the load/store and the
  // math overloads, checked on a few ops (keeps this test to a few seconds on CI's two cores).
  for (DType t : {DType::Float32, DType::Float16})
    for (const char* op : ops) cc.check(unary(op, t));
  for (DType t : {DType::BFloat16, DType::Float64})
    for (const char* op : {"Sigmoid", "Softplus", "Erf", "Round", "Shrink", "Celu"}) cc.check(unary(op, t));
  for (DType t : kFloats) {
    cc.check(unary("Mish", t, {}, 18));
    cc.check(unary("Gelu", t, {attr("approximate", std::string("none"))}, 20));
    cc.check(unary("Gelu", t, {attr("approximate", std::string("tanh"))}, 20));
    GenCase g = unary("Gelu", t, {attr("approximate", std::string("tanh"))}, 1);
    g.domain = "ai.fusec";
    cc.check(g);
    GenCase isnan = unary("IsNaN", t);
    isnan.out = DType::Bool;
    cc.check(isnan);
    GenCase isinf = unary("IsInf", t, {attr("detect_negative", int64_t{0})});
    isinf.out = DType::Bool;
    cc.check(isinf);
    cc.check(unary("Clip", t, {attr("min", -0.5f), attr("max", 0.5f)}, 6));
    GenCase clip{"Clip", "", 13, {}, {{t, kFull}, {t, {}}, {t, {1}}}, t, kFull};
    cc.check(clip);
  }
}

TEST(CudaElementwiseCodegen, IntegerOpsCompile) {
  Compiler cc;
  for (DType t : kInts) {
    for (const char* op : {"Abs", "Sign", "Relu", "Erf", "Shrink"}) cc.check(unary(op, t));
    if (t != DType::UInt8) cc.check(unary("Neg", t));
    for (const char* op : {"Add", "Sub", "Mul", "Div"}) cc.check(binary(op, t, t));
    GenCase mod = binary("Mod", t, t);
    cc.check(mod);
    mod.attrs = {attr("fmod", int64_t{1})};
    cc.check(mod);
    for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"})
      cc.check(binary(op, t, DType::Bool));
    cc.check({"Sum", "", 13, {}, {{t, kFull}, {t, {33}}, {t, {4, 1}}}, t, kFull});
    cc.check({"Max", "", 13, {}, {{t, kFull}, {t, {1}}}, t, kFull});
    cc.check({"Min", "", 13, {}, {{t, kFull}}, t, kFull});
    GenCase clip{"Clip", "", 13, {}, {{t, kFull}, {t, {}}}, t, kFull};
    cc.check(clip);
    cc.check({"PRelu", "", 16, {}, {{t, kFull}, {t, {33}}}, t, kFull});
  }
  for (DType b : {DType::Int32, DType::Int64})
    for (DType e : {DType::Int32, DType::Int64, DType::Float32, DType::Float16, DType::Float64, DType::Int8})
      cc.check({"Pow", "", 15, {}, {{b, kFull}, {e, {33}}}, b, kFull});
  for (DType b : kFloats)
    for (DType e : {DType::Int32, DType::Int64, DType::Float32, DType::Float16, DType::Float64})
      cc.check({"Pow", "", 15, {}, {{b, kFull}, {e, {}}}, b, kFull});
  cc.check({"BitShift",
            "",
            11,
            {attr("direction", std::string("LEFT"))},
            {{DType::UInt8, kFull}, {DType::UInt8, {33}}},
            DType::UInt8,
            kFull});
  cc.check({"BitShift",
            "",
            11,
            {attr("direction", std::string("RIGHT"))},
            {{DType::UInt8, kFull}, {DType::UInt8, {}}},
            DType::UInt8,
            kFull});
  for (DType t : {DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64}) {
    for (const char* op : {"BitwiseAnd", "BitwiseOr", "BitwiseXor"})
      cc.check({op, "", 18, {}, {{t, kFull}, {t, {33}}}, t, kFull});
    cc.check({"BitwiseNot", "", 18, {}, {{t, kFull}}, t, kFull});
  }
  for (DType t : {DType::Int8, DType::Int16, DType::Int32, DType::Int64})
    for (const char* dir : {"LEFT", "RIGHT"})
      cc.check({"BitShift", "", 28, {attr("direction", std::string(dir))}, {{t, kFull}, {t, {33}}}, t, kFull});
}

TEST(CudaElementwiseCodegen, FloatBinaryVariadicLogicCompile) {
  Compiler cc;
  for (DType t : kFloats) {
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow"}) cc.check(binary(op, t, t));
    cc.check({"Mod", "", 13, {attr("fmod", int64_t{1})}, {{t, kFull}, {t, {33}}}, t, kFull});
    cc.check({"Mod", "", 28, {}, {{t, kFull}, {t, {33}}}, t, kFull});
    for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"})
      cc.check(binary(op, t, DType::Bool));
    for (const char* op : {"Sum", "Mean", "Max", "Min"})
      cc.check({op, "", 13, {}, {{t, kFull}, {t, {33}}, {t, {4, 1}}, {t, {}}, {t, kFull}}, t, kFull});
    cc.check({"PRelu", "", 16, {}, {{t, kFull}, {t, {1}}}, t, kFull});
    cc.check({"Where", "", 16, {}, {{DType::Bool, kFull}, {t, {33}}, {t, {4, 1}}}, t, kFull});
  }
  for (const char* op : {"And", "Or", "Xor"}) cc.check(binary(op, DType::Bool, DType::Bool));
  cc.check(unary("Not", DType::Bool));
  cc.check(binary("Equal", DType::Bool, DType::Bool));
  for (DType t : kInts) cc.check({"Where", "", 16, {}, {{DType::Bool, {4, 1}}, {t, kFull}, {t, {}}}, t, kFull});
  cc.check({"Where", "", 16, {}, {{DType::Bool, kFull}, {DType::Bool, kFull}, {DType::Bool, {}}}, DType::Bool, kFull});
  // Legacy (opset < 7) broadcast with an axis.
  cc.check({"Add",
            "",
            6,
            {attr("broadcast", int64_t{1}), attr("axis", int64_t{0})},
            {{DType::Float32, {4, 33}}, {DType::Float32, {4}}},
            DType::Float32,
            {4, 33}});
}

TEST(CudaElementwiseCodegen, CastBetweenAllTypesCompiles) {
  Compiler cc;
  const DType all[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::Int8,
                       DType::UInt8,   DType::Int16,   DType::Int32,    DType::Int64,   DType::Bool};
  for (DType s : all)
    for (DType d : all) {
      cc.check({"Cast", "", 19, {attr("to", int64_t{static_cast<int32_t>(d)})}, {{s, kFull}}, d, kFull});
    }
  cc.check({"CastLike", "", 19, {}, {{DType::Float32, kFull}, {DType::Int64, {}}}, DType::Int64, kFull});
}

const char* kPrograms[] = {
    "r0 = add i0 i1; r1 = mul r0 0.707106769; r2 = erf r1; r3 = add r2 1; r4 = mul r0 0.5; r5 = mul r4 r3",
    "r0 = add i0 i1; r1 = relu r0",
    "r0 = mul i0 i1; r1 = add r0 i2; r2 = sigmoid r1; r3 = mul r1 r2",
    "r0 = sub i0 i1; r1 = div r0 i2; r2 = clip r1 -6 6",
    "r0 = gelu i0; r1 = gelu_tanh i0; r2 = sub r0 r1",
    "r0 = leaky_relu i0 0.1; r1 = hard_sigmoid r0 0.2 0.5; r2 = hard_swish r1",
    "r0 = exp i0; r1 = log r0; r2 = sqrt r1; r3 = reciprocal r2; r4 = neg r3; r5 = abs r4",
    "r0 = pow i0 2; r1 = max r0 i1; r2 = min r1 nan; r3 = softplus r2",
    "r0 = floor i0; r1 = ceil i0; r2 = add r0 r1; r3 = tanh r2",
    "r0 = max i0 -inf; r1 = min r0 inf; r2 = mul r1 1e-05",
    "r0 = add i0 i1; r1 = add r0 i2; r2 = add r1 i3; r3 = div r2 4",
    "r0 = mul i0 i0; r1 = mul r0 i0; r2 = mul r1 0.044715; r3 = add i0 r2; r4 = mul r3 0.797884583; "
    "r5 = tanh r4; r6 = add r5 1; r7 = mul i0 0.5; r8 = mul r7 r6",
};

int inputs_of(const std::string& program) {
  int n = 0;
  for (int i = 0; i < 8; ++i)
    if (program.find("i" + std::to_string(i)) != std::string::npos) n = i + 1;
  return n;
}

TEST(CudaElementwiseCodegen, FusedProgramsCompile) {
  Compiler cc;
  const std::vector<std::vector<int64_t>> shapes[] = {
      {{8, 768}, {768}, {8, 1}, {}},  // row bias, column, scalar
      {{2, 3, 4, 5}, {3, 1, 5}, {1}, {2, 3, 4, 5}},
      {{1000}, {1000}, {1000}, {1000}},  // linear
  };
  const DType types[] = {DType::Float32, DType::Float16, DType::BFloat16};
  for (const char* prog : kPrograms) {
    const int n = inputs_of(prog);
    for (size_t v = 0; v < 3; ++v) {
      const DType t = types[v];
      const auto& sh = shapes[v];
      GenCase c{"FusedElementwise", "ai.fusec", 1, {attr("program", std::string(prog))}, {}, t, sh[0]};
      for (int i = 0; i < n; ++i) c.ins.push_back({t, sh[static_cast<size_t>(i)]});
      cc.check(c);
    }
  }
}

TEST(CudaElementwiseCodegen, RefusesWhatItCannotRun) {
  std::string why;
  // Celu with alpha 0 is an error on the CPU: leave it there.
  EXPECT_EQ(generate(unary("Celu", DType::Float32, {attr("alpha", 0.0f)}, 12), &why), "");
  EXPECT_NE(why.find("alpha"), std::string::npos);
  // Nine dims that no merge can reduce.
  std::vector<int64_t> a(9, 2), b(9, 2);
  for (size_t i = 0; i < 9; i += 2) b[i] = 1;
  why.clear();
  EXPECT_EQ(generate({"Add", "", 13, {}, {{DType::Float32, a}, {DType::Float32, b}}, DType::Float32, a}, &why), "");
  EXPECT_NE(why.find("rank"), std::string::npos);
}

TEST(CudaElementwiseCodegen, PlanCoalescesAndClassifies) {
  std::string why;
  EwLaunchPlan p;
  // Same dims and a scalar: linear, 4 floats per 16-byte access.
  ASSERT_NE(generate(binary("Add", DType::Float32, DType::Float32, {1}), &why, &p), "") << why;
  EXPECT_TRUE(p.linear);
  EXPECT_EQ(p.vec, 4);
  ASSERT_EQ(p.kinds.size(), 2u);
  EXPECT_EQ(p.kinds[0], EwArgKind::Full);
  EXPECT_EQ(p.kinds[1], EwArgKind::Scalar);
  // Half: 8 per access; bool output with float inputs: limited by the inputs.
  ASSERT_NE(generate(binary("Add", DType::Float16, DType::Float16, {4, 33}), &why, &p), "");
  EXPECT_EQ(p.vec, 8);
  ASSERT_NE(generate(binary("Less", DType::Float32, DType::Bool, {4, 33}), &why, &p), "");
  EXPECT_EQ(p.vec, 4);
  // [2,3,4,5] + [3,4,5]... after dropping 1s and merging: [2, 60] with strides (0, 1).
  ASSERT_NE(generate({"Add",
                      "",
                      13,
                      {},
                      {{DType::Float32, {2, 3, 4, 5}}, {DType::Float32, {1, 3, 4, 5}}},
                      DType::Float32,
                      {2, 3, 4, 5}},
                     &why, &p),
            "");
  EXPECT_FALSE(p.linear);
  EXPECT_EQ(p.rank, 2);
  EXPECT_EQ(p.vec, 4);
  ASSERT_EQ(p.params_scalar.size(), 3u * 2 + 2);
  EXPECT_EQ(p.params_scalar[0], 2);
  EXPECT_EQ(p.params_scalar[1], 60);
  EXPECT_EQ(p.params_scalar[6], 0);
  EXPECT_EQ(p.params_scalar[7], 1);
  // The fast kernel counts the inner dim in vectors: 60 / 4 = 15, stride 1 * 4.
  EXPECT_EQ(p.params[1], 15);
  EXPECT_EQ(p.params[7], 4);
  // Middle-dim broadcast [4,1,5] onto [4,3,5]: rank 3, inner 5 -> no vectors.
  ASSERT_NE(
      generate(
          {"Mul", "", 13, {}, {{DType::Float32, {4, 3, 5}}, {DType::Float32, {4, 1, 5}}}, DType::Float32, {4, 3, 5}},
          &why, &p),
      "");
  EXPECT_EQ(p.rank, 3);
  EXPECT_EQ(p.vec, 1);
  // Column broadcast [8,1] onto [8,768]: inner stride 0, vectorized, one value per vector.
  ASSERT_NE(
      generate({"Mul", "", 13, {}, {{DType::Float16, {8, 768}}, {DType::Float16, {8, 1}}}, DType::Float16, {8, 768}},
               &why, &p),
      "");
  EXPECT_EQ(p.rank, 2);
  EXPECT_EQ(p.vec, 8);
  // An empty output (a zero dim) plans without dividing by it.
  ASSERT_NE(
      generate({"Add", "", 13, {}, {{DType::Float32, {3, 0, 5}}, {DType::Float32, {5}}}, DType::Float32, {3, 0, 5}},
               &why, &p),
      "");
  EXPECT_EQ(p.numel, 0);
  // Mismatched dims are refused, not miscomputed.
  EXPECT_EQ(generate({"Add", "", 13, {}, {{DType::Float32, {4, 33}}, {DType::Float32, {5}}}, DType::Float32, {4, 33}},
                     &why, &p),
            "");
}

TEST(CudaElementwiseCodegen, FastDividerIsExact) {
  const uint32_t divisors[] = {
      1, 2, 3, 5, 7, 10, 33, 60, 64, 100, 768, 1000, 4097, 65535, 65536, 1000003, (1u << 30) + 1, (1u << 31) - 1};
  uint64_t state = 12345;
  for (uint32_t d : divisors) {
    FastDivider f = fast_divider(d);
    auto check = [&](uint32_t n) {
      const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(n) * f.magic) >> 32);
      const uint32_t q = (hi + n) >> f.shift;
      ASSERT_EQ(q, n / d) << "n=" << n << " d=" << d;
    };
    for (uint32_t n = 0; n < 5000; ++n) check(n);
    for (int i = 0; i < 20000; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      check(static_cast<uint32_t>(state >> 33));  // below 2^31
    }
    check((1u << 31) - 1);
    for (uint32_t m = 1; m < 100; ++m)
      if (static_cast<uint64_t>(m) * d < (1u << 31)) {
        check(m * d);
        check(m * d - 1);
      }
  }
}

}  // namespace
}  // namespace fusec::cuda

// ai.fusec FusedElementwise: the program parser, inference, cost, and the CPU interpreter against
// the standard kernels it stands for (bit for bit: same formulas, same rounding).
#include <cmath>
#include <cstring>
#include <random>

#include "ir/cost.h"
#include "ir/half.h"
#include "ir/ops/elementwise_program.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Tensor random_tensor(DType t, std::vector<int64_t> dims, uint64_t seed, float lo = -3, float hi = 3) {
  Tensor x(t, std::move(dims));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < x.numel(); ++i) {
    float v = u(rng);
    if (t == DType::Float32)
      x.data<float>()[i] = v;
    else if (t == DType::Float16)
      x.data<uint16_t>()[i] = float_to_half(v);
    else
      x.data<uint16_t>()[i] = float_to_bf16(v);
  }
  return x;
}

/// Runs one FusedElementwise node named 'f' over `inputs`.
Tensor run_fused(const std::string& program, const std::vector<Tensor>& inputs) {
  GraphBuilder b(20);
  std::vector<Value*> ins;
  for (size_t i = 0; i < inputs.size(); ++i)
    ins.push_back(b.input("x" + std::to_string(i), inputs[i].dtype(), shape_of(inputs[i].dims())));
  b.output(b.node_n("FusedElementwise", ins, 1, {attr("program", program)}, "f", "ai.fusec")[0]);
  auto g = b.build();
  return run_cpu(*g, inputs)[0];
}

/// Same dtype, dims and bits (NaN matches any NaN).
void expect_same(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.dims(), want.dims());
  for (int64_t i = 0; i < want.numel(); ++i) {
    double g = got.as_double(i), w = want.as_double(i);
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << "element " << i;
      continue;
    }
    EXPECT_EQ(g, w) << "element " << i;
    if (g != w) return;
  }
}

std::string parse_error(const std::string& text, int inputs) {
  std::string e;
  EXPECT_FALSE(parse_elementwise_program(text, inputs, &e).has_value()) << text;
  return e;
}

}  // namespace

TEST(FusedElementwiseProgram, ParsesAndPrintsBack) {
  std::string e;
  auto p = parse_elementwise_program("r0 = add i0 i1;r1=mul r0 0.5\n r2 = clip r1 -1e-05 inf ;", 2, &e);
  ASSERT_TRUE(p) << e;
  ASSERT_EQ(p->code.size(), 3u);
  EXPECT_EQ(p->code[2].op, EwOp::Clip);
  EXPECT_EQ(p->code[2].args[0].kind, EwOperand::Kind::Register);
  EXPECT_EQ(p->code[2].args[1].value, -1e-5f);
  EXPECT_TRUE(std::isinf(p->code[2].args[2].value));
  EXPECT_EQ(p->to_string(), "r0 = add i0 i1; r1 = mul r0 0.5; r2 = clip r1 -1e-05 inf");
  auto q = parse_elementwise_program(p->to_string(), 2, &e);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->to_string(), p->to_string());
  // Every opcode's name parses to itself; literals round-trip every float.
  for (const auto& o : ew_ops()) EXPECT_EQ(ew_op_from_name(o.name), o.op);
  for (float v : {0.1f, 1.0f / 3, 3.4028235e38f, -1.17549435e-38f, 1e-45f, 0.70710678f}) {
    EXPECT_EQ(std::strtof(format_ew_literal(v).c_str(), nullptr), v) << format_ew_literal(v);
  }
  EXPECT_EQ(format_ew_literal(0.5f), "0.5");
}

TEST(FusedElementwiseProgram, RejectsBadPrograms) {
  EXPECT_NE(parse_error("", 1).find("no instructions"), std::string::npos);
  EXPECT_NE(parse_error("r0 = foo i0", 1).find("unknown opcode 'foo'"), std::string::npos);
  EXPECT_NE(parse_error("r0 = add i0", 1).find("takes 2 operand(s), got 1"), std::string::npos);
  EXPECT_NE(parse_error("r0 = relu i0 i0", 1).find("takes 1 operand(s), got 2"), std::string::npos);
  EXPECT_NE(parse_error("r1 = relu i0", 1).find("must define r0"), std::string::npos);
  EXPECT_NE(parse_error("r0 = relu i0; r1 = add r1 i0", 1).find("reads 'r1' before it is defined"), std::string::npos);
  EXPECT_NE(parse_error("r0 = add i0 i2", 2).find("the node has 2 input(s)"), std::string::npos);
  EXPECT_NE(parse_error("r0 = relu i0", 2).find("input i1 is never read"), std::string::npos);
  EXPECT_NE(parse_error("r0 = mul i0 x", 1).find("operand 'x'"), std::string::npos);
  EXPECT_NE(parse_error("r0 = mul i0 1e39", 1).find("operand '1e39'"), std::string::npos);
  EXPECT_NE(parse_error("r0 = mul i0 0.5.1", 1).find("operand '0.5.1'"), std::string::npos);
  EXPECT_NE(parse_error("r0 = mul i0 r00", 1).find("operand 'r00'"), std::string::npos);
  EXPECT_NE(parse_error("r0 relu i0", 1).find("expected 'r0 = opcode"), std::string::npos);
  EXPECT_NE(parse_error("r0 = relu i0", 0).find("at least one input"), std::string::npos);
  std::string long_prog = "r0 = relu i0";
  for (size_t k = 1; k <= kEwMaxInstructions; ++k)
    long_prog += "; r" + std::to_string(k) + " = relu r" + std::to_string(k - 1);
  EXPECT_NE(parse_error(long_prog, 1).find("more than 1024 instructions"), std::string::npos);
}

TEST(FusedElementwiseSchema, ErrorsNameTheNode) {
  Tensor x = random_tensor(DType::Float32, {4}, 1);
  auto expect_error = [&](const std::string& program, const std::vector<Tensor>& in, const std::string& what) {
    try {
      run_fused(program, in);
      ADD_FAILURE() << "no error for " << program;
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find(what), std::string::npos) << m;
      EXPECT_NE(m.find("node 'f'"), std::string::npos) << m;
      EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    }
  };
  expect_error("r0 = frob i0", {x}, "unknown opcode 'frob'");
  expect_error("r0 = relu i0", {x, x}, "input i1 is never read");
  expect_error("r0 = add i0 i1", {x, random_tensor(DType::Float16, {4}, 2)}, "different types");
  expect_error("r0 = relu i0", {Tensor::from_int64({1, 2}, {2})}, "float32, float16 or bfloat16");
  expect_error("r0 = add i0 i1", {x, random_tensor(DType::Float32, {3}, 2)}, "");
}

TEST(FusedElementwiseSchema, InfersBroadcastShapeAndCost) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float16, {Dim::sym("N"), 1, 8});
  Value* y = b.input("y", DType::Float16, {3, 1});
  Value* out =
      b.node_n("FusedElementwise", {x, y}, 1,
               {attr("program", std::string("r0 = add i0 i1; r1 = relu r0; r2 = mul r1 2"))}, "f", "ai.fusec")[0];
  b.output(out);
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_EQ(out->type.dtype, DType::Float16);
  ASSERT_TRUE(out->type.shape);
  EXPECT_EQ(shape_str(*out->type.shape), "Nx3x8");
  // Cost at static shapes: 3 instructions per output element, inputs read once, output written once.
  auto g2 = g->clone();
  g2->inputs[0]->type.shape = Shape{2, 1, 8};
  infer_shapes(*g2);
  auto c = node_cost(*g2, *g2->nodes()[0]);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->flops, 3.0 * 2 * 3 * 8);
  EXPECT_EQ(c->bytes_read, 2.0 * (2 * 8 + 3));
  EXPECT_EQ(c->bytes_written, 2.0 * 2 * 3 * 8);
}

// Each opcode alone equals the standard op it stands for, bit for bit, on ordinary and special values.
TEST(CpuFusedElementwise, EachOpcodeMatchesItsStandardOp) {
  Tensor a = random_tensor(DType::Float32, {4, 130}, 7, -4, 4);
  Tensor b = random_tensor(DType::Float32, {4, 130}, 8, -4, 4);
  const float specials[] = {0.0f, -0.0f, NAN, 1.0f, -1.0f, 0.5f, -2.5f, 1e-30f, 80.0f, -80.0f};
  for (size_t i = 0; i < std::size(specials); ++i) {
    a.data<float>()[i] = specials[i];
    b.data<float>()[i + 3] = specials[i];
  }
  struct Case {
    std::string opcode, op;
    int arity;
    std::vector<NamedAttribute> attrs;
    std::string params;  // extra literal operands
  };
  const std::vector<Case> cases = {
      {"add", "Add", 2, {}, ""},
      {"sub", "Sub", 2, {}, ""},
      {"mul", "Mul", 2, {}, ""},
      {"div", "Div", 2, {}, ""},
      {"pow", "Pow", 2, {}, ""},
      {"max", "Max", 2, {}, ""},
      {"min", "Min", 2, {}, ""},
      {"neg", "Neg", 1, {}, ""},
      {"abs", "Abs", 1, {}, ""},
      {"exp", "Exp", 1, {}, ""},
      {"log", "Log", 1, {}, ""},
      {"sqrt", "Sqrt", 1, {}, ""},
      {"reciprocal", "Reciprocal", 1, {}, ""},
      {"erf", "Erf", 1, {}, ""},
      {"tanh", "Tanh", 1, {}, ""},
      {"sigmoid", "Sigmoid", 1, {}, ""},
      {"relu", "Relu", 1, {}, ""},
      {"softplus", "Softplus", 1, {}, ""},
      {"floor", "Floor", 1, {}, ""},
      {"ceil", "Ceil", 1, {}, ""},
      {"hard_swish", "HardSwish", 1, {}, ""},
      {"gelu", "Gelu", 1, {}, ""},
      {"gelu_tanh", "Gelu", 1, {attr("approximate", std::string("tanh"))}, ""},
      {"leaky_relu", "LeakyRelu", 1, {attr("alpha", 0.1f)}, " 0.100000001"},
      {"hard_sigmoid", "HardSigmoid", 1, {attr("alpha", 0.3f), attr("beta", 0.4f)}, " 0.300000012 0.400000006"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.opcode);
    std::vector<Tensor> in = {a};
    if (c.arity == 2) in.push_back(b);
    GraphBuilder gb(20);
    std::vector<Value*> vs;
    for (size_t i = 0; i < in.size(); ++i)
      vs.push_back(gb.input("x" + std::to_string(i), DType::Float32, shape_of(in[i].dims())));
    gb.output(gb.node(c.op, vs, c.attrs));
    auto g = gb.build();
    Tensor want = run_cpu(*g, in)[0];
    std::string prog = "r0 = " + c.opcode + " i0" + (c.arity == 2 ? " i1" : "") + c.params;
    expect_same(run_fused(prog, in), want);
  }
  // Clip with constant bounds, and with none (the kernel's float range).
  for (bool bounds : {true, false}) {
    GraphBuilder gb(20);
    Value* x = gb.input("x0", DType::Float32, {4, 130});
    std::vector<Value*> ins = {x};
    if (bounds) {
      ins.push_back(gb.initializer("lo", floats({-0.5f}, {})));
      ins.push_back(gb.initializer("hi", floats({0.7f}, {})));
    }
    gb.output(gb.node("Clip", ins));
    auto g = gb.build();
    Tensor want = run_cpu(*g, {a})[0];
    expect_same(
        run_fused(bounds ? "r0 = clip i0 -0.5 0.699999988" : "r0 = clip i0 -3.40282347e+38 3.40282347e+38", {a}), want);
  }
}

// Broadcasting over many shapes (size-1 axes, rank-0 inputs, small and large inner axes, blocks
// that cross rows) equals the unfused Add/Mul/Sub/Max graph bit for bit.
TEST(CpuFusedElementwise, BroadcastsLikeTheUnfusedGraph) {
  const std::vector<std::vector<std::vector<int64_t>>> shapes = {
      {{5, 3, 7}, {5, 1, 7}, {1, 3, 1}, {}},
      {{4, 1}, {1, 5}, {5}, {1}},
      {{300, 3}, {3}, {300, 1}, {1, 1}},
      {{64, 1000}, {1000}, {64, 1}, {}},
      {{2, 3, 4, 5}, {2, 3, 4, 5}, {2, 3, 4, 5}, {2, 3, 4, 5}},
      {{1}, {}, {1, 1}, {1}},
      {{0, 3}, {3}, {1}, {}},
  };
  uint64_t seed = 100;
  for (const auto& s : shapes) {
    SCOPED_TRACE(dims_str(s[0]) + " " + dims_str(s[1]) + " " + dims_str(s[2]) + " " + dims_str(s[3]));
    std::vector<Tensor> in;
    for (const auto& d : s) in.push_back(random_tensor(DType::Float32, d, seed++));
    GraphBuilder gb(17);
    std::vector<Value*> v;
    for (size_t i = 0; i < in.size(); ++i)
      v.push_back(gb.input("x" + std::to_string(i), DType::Float32, shape_of(in[i].dims())));
    Value* r = gb.node("Add", {v[0], v[1]});
    r = gb.node("Mul", {r, v[2]});
    r = gb.node("Sub", {r, v[3]});
    r = gb.node("Max", {r, gb.initializer("q", floats({0.25f}, {}))});
    r = gb.node("Mul", {r, v[0]});
    gb.output(r);
    auto g = gb.build();
    Tensor want = run_cpu(*g, in)[0];
    expect_same(run_fused("r0 = add i0 i1; r1 = mul r0 i2; r2 = sub r1 i3; r3 = max r2 0.25; r4 = mul r3 i0", in),
                want);
  }
}

// Half types: inputs widen to float32, and every instruction rounds to the storage type, so the
// fused result equals the unfused fp16/bf16 graph exactly.
TEST(CpuFusedElementwise, HalfTypesRoundLikeTheUnfusedGraph) {
  for (DType t : {DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(t));
    Tensor x = random_tensor(t, {33, 17}, 1), y = random_tensor(t, {17}, 2);
    Tensor c(t, {});
    float cf = 0.1f;
    if (t == DType::Float16) {
      c.data<uint16_t>()[0] = float_to_half(cf);
      cf = half_to_float(c.data<uint16_t>()[0]);
    } else {
      c.data<uint16_t>()[0] = float_to_bf16(cf);
      cf = bf16_to_float(c.data<uint16_t>()[0]);
    }
    GraphBuilder gb(17);
    Value* vx = gb.input("x0", t, {33, 17});
    Value* vy = gb.input("x1", t, {17});
    Value* r = gb.node("Mul", {vx, vy});
    r = gb.node("Add", {r, gb.initializer("c", c)});
    r = gb.node("Tanh", {r});
    r = gb.node("Div", {r, vx});
    gb.output(r);
    auto g = gb.build();
    Tensor want = run_cpu(*g, {x, y})[0];
    expect_same(
        run_fused("r0 = mul i0 i1; r1 = add r0 " + format_ew_literal(cf) + "; r2 = tanh r1; r3 = div r2 i0", {x, y}),
        want);
  }
}

// Registers are reused once dead; a long program with a diamond and an operand read many
// instructions later still computes the right thing.
TEST(CpuFusedElementwise, LongProgramsReuseRegisters) {
  Tensor x = random_tensor(DType::Float32, {1000}, 3, -1, 1);
  std::string prog = "r0 = mul i0 0";
  for (int k = 1; k < 50; ++k) prog += "; r" + std::to_string(k) + " = add r" + std::to_string(k - 1) + " 1";
  prog += "; r50 = sub r49 r0; r51 = mul r50 r50";  // (49 - 0)^2 everywhere, r0 read 50 steps later
  Tensor y = run_fused(prog, {x});
  for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.data<float>()[i], 49.0f * 49.0f) << i;
}

// CPU kernel of ai.fusec FusedElementwise: an interpreter for its program. The broadcast output
// index space is cut into blocks of kBlock elements; per block, each input's elements are
// gathered into a float buffer (broadcasting and float16/bfloat16 -> float32 on the way) and
// each instruction runs as one tight loop over the block, so dispatch costs once per
// instruction per block, not per element. Blocks run in parallel.
//
// Half types: every instruction's result is rounded to the storage type, as the unfused graph's
// kernels (float32 compute, one rounding per op) would have done, so the reference reproduces
// the graph it replaced bit for bit. Float32 programs are evaluated exactly as the standard
// kernels evaluate each op.
#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels/common.h"
#include "backend/formulas.h"
#include "ir/ops/elementwise_program.h"

namespace fusec::cpu {

namespace {

namespace fm = formulas;

constexpr int64_t kBlock = 256;

/// The output index space with size-1 axes dropped and mergeable neighbours merged, plus each
/// input's element stride per remaining axis (0 where it is broadcast).
struct Layout {
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> strides;  // [input][axis]
};

Layout make_layout(const std::vector<int64_t>& out, const std::vector<const Tensor*>& ins) {
  const size_t rank = out.size(), n = ins.size();
  std::vector<std::vector<int64_t>> full(n, std::vector<int64_t>(rank, 0));
  for (size_t k = 0; k < n; ++k) {
    const auto& d = ins[k]->dims();
    int64_t s = 1;
    for (size_t i = 0; i < d.size(); ++i) {
      size_t ax = d.size() - 1 - i, oax = rank - 1 - i;
      full[k][oax] = d[ax] == 1 ? 0 : s;
      s *= d[ax];
    }
  }
  Layout l;
  l.strides.assign(n, {});
  for (size_t ax = 0; ax < rank; ++ax) {
    if (out[ax] == 1) continue;
    bool merge = !l.dims.empty();
    for (size_t k = 0; k < n && merge; ++k) merge = l.strides[k].back() == full[k][ax] * out[ax];
    if (merge) {
      l.dims.back() *= out[ax];
      for (size_t k = 0; k < n; ++k) l.strides[k].back() = full[k][ax];
    } else {
      l.dims.push_back(out[ax]);
      for (size_t k = 0; k < n; ++k) l.strides[k].push_back(full[k][ax]);
    }
  }
  if (l.dims.empty()) {  // a single element
    l.dims.push_back(1);
    for (auto& s : l.strides) s.push_back(0);
  }
  return l;
}

/// dst[j] = float(src[base + j * stride]) for j < n.
void load_run(const Tensor& t, int64_t base, int64_t stride, int64_t n, float* dst) {
  switch (t.dtype()) {
    case DType::Float32: {
      const float* p = t.data<float>() + base;
      if (stride == 1)
        std::copy(p, p + n, dst);
      else
        for (int64_t j = 0; j < n; ++j) dst[j] = p[j * stride];
      return;
    }
    case DType::Float16: {
      const uint16_t* p = t.data<uint16_t>() + base;
      for (int64_t j = 0; j < n; ++j) dst[j] = half_to_float(p[j * stride]);
      return;
    }
    case DType::BFloat16: {
      const uint16_t* p = t.data<uint16_t>() + base;
      for (int64_t j = 0; j < n; ++j) dst[j] = bf16_to_float(p[j * stride]);
      return;
    }
    default:
      internal_error("FusedElementwise: unexpected input type");
  }
}

void round_to(DType t, float* d, int64_t n) {
  if (t == DType::Float16)
    for (int64_t j = 0; j < n; ++j) d[j] = half_to_float(float_to_half(d[j]));
  else if (t == DType::BFloat16)
    for (int64_t j = 0; j < n; ++j) d[j] = bf16_to_float(float_to_bf16(d[j]));
}

void store_run(const float* src, int64_t n, Tensor& out, int64_t at) {
  switch (out.dtype()) {
    case DType::Float32:
      std::copy(src, src + n, out.data<float>() + at);
      return;
    case DType::Float16: {
      uint16_t* q = out.data<uint16_t>() + at;
      for (int64_t j = 0; j < n; ++j) q[j] = float_to_half(src[j]);
      return;
    }
    case DType::BFloat16: {
      uint16_t* q = out.data<uint16_t>() + at;
      for (int64_t j = 0; j < n; ++j) q[j] = float_to_bf16(src[j]);
      return;
    }
    default:
      internal_error("FusedElementwise: unexpected output type");
  }
}

template <typename F>
void map1(float* d, const float* a, int64_t n, F f) {
  for (int64_t j = 0; j < n; ++j) d[j] = f(a[j]);
}
template <typename F>
void map2(float* d, const float* a, const float* b, int64_t n, F f) {
  for (int64_t j = 0; j < n; ++j) d[j] = f(a[j], b[j]);
}
template <typename F>
void map3(float* d, const float* a, const float* b, const float* c, int64_t n, F f) {
  for (int64_t j = 0; j < n; ++j) d[j] = f(a[j], b[j], c[j]);
}

/// d = op(a, b, c) over one block. The formulas are the standard kernels' (elementwise.cpp,
/// activation.cpp): backend/formulas.h's, which the generated CUDA kernels also run.
void run_instr(EwOp op, float* d, const float* a, const float* b, const float* c, int64_t n) {
  switch (op) {
    case EwOp::Add:
      return map2(d, a, b, n, [](float x, float y) { return x + y; });
    case EwOp::Sub:
      return map2(d, a, b, n, [](float x, float y) { return x - y; });
    case EwOp::Mul:
      return map2(d, a, b, n, [](float x, float y) { return x * y; });
    case EwOp::Div:
      return map2(d, a, b, n, [](float x, float y) { return x / y; });
    case EwOp::Pow:
      return map2(d, a, b, n, [](float x, float y) { return std::pow(x, y); });
    case EwOp::Max:
      return map2(d, a, b, n, [](float x, float y) { return fm::max_nan(x, y); });
    case EwOp::Min:
      return map2(d, a, b, n, [](float x, float y) { return fm::min_nan(x, y); });
    case EwOp::Neg:
      return map1(d, a, n, [](float x) { return -x; });
    case EwOp::Abs:
      return map1(d, a, n, [](float x) { return x < 0 ? -x : x; });
    case EwOp::Exp:
      return map1(d, a, n, [](float x) { return std::exp(x); });
    case EwOp::Log:
      return map1(d, a, n, [](float x) { return std::log(x); });
    case EwOp::Sqrt:
      return map1(d, a, n, [](float x) { return std::sqrt(x); });
    case EwOp::Reciprocal:
      return map1(d, a, n, [](float x) { return 1.0f / x; });
    case EwOp::Erf:
      return map1(d, a, n, [](float x) { return std::erf(x); });
    case EwOp::Tanh:
      return map1(d, a, n, [](float x) { return std::tanh(x); });
    case EwOp::Sigmoid:
      return map1(d, a, n, [](float x) { return fm::sigmoid(x); });
    case EwOp::Relu:
      return map1(d, a, n, [](float x) { return fm::relu(x); });
    case EwOp::Softplus:
      return map1(d, a, n, [](float x) { return fm::softplus(x); });
    case EwOp::Floor:
      return map1(d, a, n, [](float x) { return std::floor(x); });
    case EwOp::Ceil:
      return map1(d, a, n, [](float x) { return std::ceil(x); });
    case EwOp::HardSwish:
      return map1(d, a, n, [](float x) { return fm::hard_swish(x); });
    case EwOp::Gelu:
      return map1(d, a, n, [](float x) { return fm::gelu_erf_via_f64(x); });
    case EwOp::GeluTanh:
      return map1(d, a, n, [](float x) { return fm::gelu_tanh_via_f64(x); });
    case EwOp::LeakyRelu:
      return map2(d, a, b, n, [](float x, float al) { return fm::leaky_relu(x, al); });
    case EwOp::HardSigmoid:
      return map3(d, a, b, c, n, [](float x, float al, float be) { return fm::hard_sigmoid(x, al, be); });
    case EwOp::Clip:
      return map3(d, a, b, c, n, [](float x, float lo, float hi) { return fm::clamp(x, lo, hi); });
  }
}

/// Where each operand and result lives in the per-thread scratch: slots of kBlock floats.
/// Inputs and literals get a slot each; registers share slots once their last reader has run.
struct Plan {
  int num_slots = 0;
  std::vector<int> input_slot;                         // [input]
  std::vector<std::pair<int, float>> literal_slots;    // (slot, value), filled once per thread
  std::vector<std::array<int, kEwMaxArity>> arg_slot;  // [instr][arg]
  std::vector<int> dest_slot;                          // [instr]
};

Plan make_plan(const ElementwiseProgram& p) {
  Plan plan;
  const size_t n = p.code.size();
  for (int i = 0; i < p.num_inputs; ++i) plan.input_slot.push_back(plan.num_slots++);
  std::vector<size_t> last_read(n, 0);
  for (size_t k = 0; k < n; ++k)
    for (int a = 0; a < ew_op_info(p.code[k].op).arity; ++a)
      if (p.code[k].args[a].kind == EwOperand::Kind::Register)
        last_read[static_cast<size_t>(p.code[k].args[a].index)] = k;
  last_read[n - 1] = n;  // the output lives to the end
  std::vector<int> free_slots, reg_slot(n, -1);
  plan.arg_slot.resize(n);
  for (size_t k = 0; k < n; ++k) {
    const EwInstr& ins = p.code[k];
    for (int a = 0; a < ew_op_info(ins.op).arity; ++a) {
      const EwOperand& o = ins.args[a];
      int s = 0;
      if (o.kind == EwOperand::Kind::Input)
        s = plan.input_slot[static_cast<size_t>(o.index)];
      else if (o.kind == EwOperand::Kind::Register)
        s = reg_slot[static_cast<size_t>(o.index)];
      else {
        s = plan.num_slots++;
        plan.literal_slots.push_back({s, o.value});
      }
      plan.arg_slot[k][static_cast<size_t>(a)] = s;
    }
    // Registers whose last reader is this instruction free their slot after it (an instruction
    // may write over its own operand: every loop reads element j before writing it).
    for (int a = 0; a < ew_op_info(ins.op).arity; ++a)
      if (ins.args[a].kind == EwOperand::Kind::Register && last_read[static_cast<size_t>(ins.args[a].index)] == k) {
        int s = reg_slot[static_cast<size_t>(ins.args[a].index)];
        if (std::find(free_slots.begin(), free_slots.end(), s) == free_slots.end()) free_slots.push_back(s);
      }
    int d;
    if (!free_slots.empty()) {
      d = free_slots.back();
      free_slots.pop_back();
    } else {
      d = plan.num_slots++;
    }
    reg_slot[k] = d;
    plan.dest_slot.push_back(d);
  }
  return plan;
}

void fused_elementwise(KernelContext& ctx) {
  const int n_in = static_cast<int>(ctx.num_inputs());
  std::vector<const Tensor*> ins;
  for (int i = 0; i < n_in; ++i) ins.push_back(&ctx.input(static_cast<size_t>(i)));
  Tensor& out = ctx.output(0);
  const DType t = out.dtype();
  if (t != DType::Float32 && t != DType::Float16 && t != DType::BFloat16)
    ctx.unsupported(std::string("unsupported data type ") + dtype_name(t));
  for (const Tensor* x : ins)
    if (x->dtype() != t)
      ctx.fail(std::string("input type ") + dtype_name(x->dtype()) + " differs from " + dtype_name(t));
  const ElementwiseProgram prog = elementwise_program_of(ctx, n_in);
  const int64_t total = out.numel();
  if (total == 0) return;

  const Layout l = make_layout(out.dims(), ins);
  const Plan plan = make_plan(prog);
  const size_t rank = l.dims.size();
  const int64_t inner = l.dims.back();
  const bool round = t != DType::Float32;
  const int64_t blocks = (total + kBlock - 1) / kBlock;

  parallel_for(blocks, std::max<int64_t>(1, 16384 / kBlock), [&](int64_t b0, int64_t b1) {
    std::vector<float> scratch(static_cast<size_t>(plan.num_slots) * kBlock);
    auto slot = [&](int s) { return scratch.data() + static_cast<size_t>(s) * kBlock; };
    for (const auto& [s, v] : plan.literal_slots) std::fill(slot(s), slot(s) + kBlock, v);
    std::vector<int64_t> idx(rank, 0), off(ins.size(), 0);
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t p0 = b * kBlock, n = std::min(kBlock, total - p0);
      // Gather: walk the block's rows of the innermost axis.
      int64_t row = p0 / inner, col = p0 % inner;
      for (size_t i = rank - 1; i-- > 0;) {
        idx[i] = row % l.dims[i];
        row /= l.dims[i];
      }
      for (size_t k = 0; k < ins.size(); ++k) {
        off[k] = 0;
        for (size_t i = 0; i + 1 < rank; ++i) off[k] += idx[i] * l.strides[k][i];
      }
      for (int64_t filled = 0; filled < n;) {
        const int64_t seg = std::min(inner - col, n - filled);
        for (size_t k = 0; k < ins.size(); ++k) {
          const int64_t st = l.strides[k][rank - 1];
          float* dst = slot(plan.input_slot[k]) + filled;
          if (st == 0) {
            float v;
            load_run(*ins[k], off[k], 0, 1, &v);
            std::fill(dst, dst + seg, v);
          } else {
            load_run(*ins[k], off[k] + col * st, st, seg, dst);
          }
        }
        filled += seg;
        col = 0;
        for (size_t i = rank - 1; i-- > 0;) {  // next row: odometer over the outer axes
          ++idx[i];
          for (size_t k = 0; k < ins.size(); ++k) off[k] += l.strides[k][i];
          if (idx[i] < l.dims[i]) break;
          for (size_t k = 0; k < ins.size(); ++k) off[k] -= l.strides[k][i] * l.dims[i];
          idx[i] = 0;
        }
      }
      // Evaluate.
      for (size_t k = 0; k < prog.code.size(); ++k) {
        const auto& as = plan.arg_slot[k];
        const int arity = ew_op_info(prog.code[k].op).arity;
        float* d = slot(plan.dest_slot[k]);
        run_instr(prog.code[k].op, d, slot(as[0]), arity > 1 ? slot(as[1]) : nullptr, arity > 2 ? slot(as[2]) : nullptr,
                  n);
        if (round) round_to(t, d, n);
      }
      store_run(slot(plan.dest_slot.back()), n, out, p0);
    }
  });
}

}  // namespace

void register_fused_elementwise_kernels(KernelRegistry& r) {
  r.add("FusedElementwise", fused_elementwise, "ai.fusec", Writes::Every);
}

}  // namespace fusec::cpu

#include "backend/cuda/ops/elementwise/elementwise_codegen.h"

#include <cfloat>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "ir/ops/elementwise_program.h"
#include "ir/ops/legacy_broadcast.h"

namespace fusec::cuda {

namespace {

// Every generated source starts with backend/formulas.h, verbatim (CMakeLists.txt embeds it):
// the activations and the GELU forms are the functions the CPU kernels call, as fm::name.
const char* kFormulasText =
#include "formulas_text.inc"
    ;

// Then the device helpers of generated code. No #include: NVRTC's math builtins are enough, and
// half/bfloat16 conversions are one PTX instruction or a few integer operations, so the source
// does not depend on where cuda_fp16.h lives and compiles quickly. Integer and conversion
// semantics are the CPU reference's (backend/cpu/kernels/elementwise.cpp).
const char* kPrelude = R"FX(
namespace fm = fusec::formulas;
#define FX static __device__ __forceinline__
template <typename T, int N> struct alignas(sizeof(T) * N) FxVec { T v[N]; };

FX float fx_h2f(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
FX unsigned short fx_f2h(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
FX float fx_b2f(unsigned short b) { return __uint_as_float(((unsigned)b) << 16); }
// Round to nearest even; NaN stays a (quiet) NaN, as ir/half.h.
FX unsigned short fx_f2b(float f) {
  unsigned x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (unsigned short)(x >> 16);
}
// double -> float rounded to odd, so a second rounding to half/bfloat16 equals rounding the double.
FX float fx_d2f_odd(double d) {
  float f = (float)d;
  if (d != d || isinf(f) || (double)f == d) return f;
  if (__float_as_uint(f) & 1u) return f;
  return nextafterf(f, (double)f < d ? __int_as_float(0x7f800000) : __int_as_float(0xff800000));
}

FX float fx_pow(float x, float y) { return powf(x, y); }
FX double fx_pow(double x, double y) { return pow(x, y); }
// Integer base, float exponent: the CPU truncates std::pow's result; a whole-number power must not
// land one unit low because the device's pow is a few ulp below the exact integer.
FX double fx_pow_exact(double x, double y) {
  double d = pow(x, y);
  return (y == rint(y) && fabs(d) < 9007199254740992.0) ? rint(d) : d;
}
FX float fx_fmod(float x, float y) { return fmodf(x, y); }
FX double fx_fmod(double x, double y) { return fmod(x, y); }

// Integer arithmetic wraps (two's complement) like the CPU reference: done in unsigned types.
template <typename T> struct FxU { typedef unsigned int type; };
template <> struct FxU<long long> { typedef unsigned long long type; };
template <typename T> FX T fx_iadd(T a, T b) { typedef typename FxU<T>::type U; return (T)((U)a + (U)b); }
template <typename T> FX T fx_isub(T a, T b) { typedef typename FxU<T>::type U; return (T)((U)a - (U)b); }
template <typename T> FX T fx_imul(T a, T b) { typedef typename FxU<T>::type U; return (T)((U)a * (U)b); }
// Truncating division; x / -1 wraps (INT_MIN / -1 = INT_MIN). A zero divisor gives 0 here; where
// the divisor is not a constant, the _r forms (kErrorPrelude) also report it, and the run fails
// with the CPU reference's "integer division by zero".
template <typename T> FX T fx_idiv(T x, T y) {
  if (y == 0) return 0;
  if ((T)-1 < (T)0 && y == (T)-1) return fx_isub((T)0, x);
  return (T)(x / y);
}
template <typename T> FX T fx_imod(T x, T y, bool fmod_sign) {
  if (y == 0) return 0;
  if ((T)-1 < (T)0 && y == (T)-1) return 0;
  T r = (T)(x % y);
  if ((T)-1 < (T)0 && !fmod_sign && r != 0 && ((r < 0) != (y < 0))) r = (T)(r + y);
  return r;
}
// BitShift (opset 28): a signed right shift is arithmetic; a shift outside [0, bits) leaves only
// the sign fill. The left shift goes through 64-bit unsigned, so bits past the sign bit just drop.
template <typename T> FX T fx_shift(T x, T y, bool left) {
  const bool is_signed = (T)-1 < (T)0;
  if ((is_signed && y < (T)0) || (long long)y >= (long long)(8 * sizeof(T)))
    return (!left && is_signed && x < (T)0) ? (T)-1 : (T)0;
  if (left) return (T)((unsigned long long)x << (int)y);
  return (T)(x >> (int)y);
}
template <typename T> FX T fx_mod_float(T x, T y, bool fmod_sign) {
  T r = fx_fmod(x, y);
  if (!fmod_sign && r != 0 && ((r < 0) != (y < 0))) r += y;
  if (!fmod_sign && r == 0) r = copysign((T)0, y);
  return r;
}
// Exact integer power by squaring (wrapping); negative exponents truncate 1/x^n toward zero.
template <typename B, typename E> FX B fx_ipow(B x, E y) {
  if ((E)-1 < (E)0 && y < 0) {
    if (x == 1) return 1;
    if (x == -1) return (y % 2) ? (B)-1 : (B)1;
    return 0;
  }
  B result = 1;
  unsigned long long e = (unsigned long long)y;
  while (e) {
    if (e & 1) result = fx_imul(result, x);
    x = fx_imul(x, x);
    e >>= 1;
  }
  return result;
}
// Float -> integer that clamps instead of invoking UB (NaN -> 0), as the CPU's Cast and Pow.
template <typename O> FX O fx_to_int(double v, double lo, double hi, O omin, O omax) {
  if (v != v) return 0;
  if (v <= lo) return omin;
  if (v >= hi) return omax;
  return (O)v;
}

)FX";

// Added to the sources of kernels that can find bad data (integer Div and Mod by a divisor that is
// not a constant): the device error record of backend/cuda/core/device_error.h, repeated as text (keep
// FxErr like DeviceErrorRecord, FxErrSite like DeviceErrorSite and fx_report like
// report_device_error). Other kernels' sources stay as they were, and so do their cache entries.
const char* kErrorPrelude = R"FX(
struct FxErr { unsigned long long key; long long value, bound; int code, step, lock, pad; };
struct FxErrSite { FxErr* record; int step; };
static __device__ __forceinline__ unsigned long long fx_clock_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
static __device__ __noinline__ void fx_report(FxErrSite s, int code, long long pos, long long value, long long bound) {
  FxErr* r = s.record;
  if (!r) return;
  const unsigned long long key = ((unsigned long long)s.step << 40) | ((unsigned long long)pos & ((1ull << 40) - 1));
  volatile FxErr* v = r;
  if (v->code != 0 && v->key <= key) return;
  unsigned lane;  // one lane of those arriving together competes (their keys are equal here), for a second at most
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  if (lane != (unsigned)(__ffs(__activemask()) - 1)) return;
  const unsigned long long start = fx_clock_ns();
  while (fx_clock_ns() - start < 1000000000ull) {
    if (atomicCAS(&r->lock, 0, 1) == 0) {
      __threadfence();
      if (v->code == 0 || key < v->key) { v->key = key; v->value = value; v->bound = bound; v->step = s.step; v->code = code; }
      __threadfence();
      atomicExch(&r->lock, 0);
      return;
    }
    if (v->code != 0 && v->key <= key) return;
    __nanosleep(100);
  }
}
// Code 3: kIntDivByZero.
template <typename T> FX T fx_idiv_r(T x, T y, FxErrSite s) {
  if (y == 0) { fx_report(s, 3, 0, 0, 0); return 0; }
  return fx_idiv(x, y);
}
template <typename T> FX T fx_imod_r(T x, T y, bool fmod_sign, FxErrSite s) {
  if (y == 0) { fx_report(s, 3, 0, 0, 0); return 0; }
  return fx_imod(x, y, fmod_sign);
}
)FX";

bool is_float_storage(DType t) {
  return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16 || t == DType::Float64;
}

/// C type the body computes with for a value stored as `t`.
std::string value_ctype(DType t) {
  if (t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32) return "float";
  return ew_storage_ctype(t);
}

std::string load_expr(DType t, const std::string& e) {
  if (t == DType::Float16) return "fx_h2f(" + e + ")";
  if (t == DType::BFloat16) return "fx_b2f(" + e + ")";
  return e;
}

std::string store_expr(DType t, const std::string& e) {
  switch (t) {
    case DType::Float16:
      return "fx_f2h((float)(" + e + "))";
    case DType::BFloat16:
      return "fx_f2b((float)(" + e + "))";
    default:
      return "(" + std::string(ew_storage_ctype(t)) + ")(" + e + ")";
  }
}

/// Exact float literal (inf and NaN included), of C type float.
std::string flit(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  char buf[48];
  std::snprintf(buf, sizeof buf, "__int_as_float(0x%08x)", bits);
  return buf;
}

std::string dlit(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  char buf[64];
  std::snprintf(buf, sizeof buf, "__longlong_as_double(0x%016" PRIx64 "LL)", bits);
  return buf;
}

/// A float attribute as a value of the compute type T (static_cast<T>(attr), as the CPU).
std::string tlit(const std::string& T, float v) { return T == "double" ? "(double)" + flit(v) : flit(v); }

struct IntRange {
  const char* lo;
  const char* hi;
  const char* omin;
  const char* omax;
};

IntRange int_range(DType t) {
  switch (t) {
    case DType::Int8:
      return {"-128.0", "127.0", "(signed char)-128", "(signed char)127"};
    case DType::UInt8:
      return {"0.0", "255.0", "(unsigned char)0", "(unsigned char)255"};
    case DType::Int16:
      return {"-32768.0", "32767.0", "(short)-32768", "(short)32767"};
    case DType::Int32:
      return {"-2147483648.0", "2147483647.0", "(-2147483647 - 1)", "2147483647"};
    default:
      return {"-9223372036854775808.0", "9223372036854775807.0", "(-9223372036854775807LL - 1)",
              "9223372036854775807LL"};
  }
}

std::string lowest_of(DType t) {
  switch (t) {
    case DType::Float64:
      return dlit(-DBL_MAX);
    case DType::Float32:
    case DType::Float16:
    case DType::BFloat16:
      return flit(-FLT_MAX);
    default:
      return int_range(t).omin;
  }
}
std::string highest_of(DType t) {
  switch (t) {
    case DType::Float64:
      return dlit(DBL_MAX);
    case DType::Float32:
    case DType::Float16:
    case DType::BFloat16:
      return flit(FLT_MAX);
    default:
      return int_range(t).omax;
  }
}

/// Collects the kernel arguments and the body for one node.
class Builder {
 public:
  Builder(const std::vector<EwValue>& ins, const EwValue& out, const std::string& label) : ins_(ins), out_(out) {
    f_.label = label;
  }

  /// Adds node input i as the next argument; returns its name in the body ("x0").
  std::string arg(size_t i, bool raw = false, std::optional<std::vector<int64_t>> dims = std::nullopt) {
    const size_t k = f_.inputs.size();
    f_.inputs.push_back(i);
    f_.dims.push_back(dims ? *dims : ins_[i].dims);
    f_.dtypes.push_back(ins_[i].dtype);
    f_.raw.push_back(raw);
    return "x" + std::to_string(k);
  }

  /// y = expr, of the value type of the output's storage.
  EwFunction result(const std::string& expr, std::string pre = "") {
    f_.y_type = value_ctype(out_.dtype);
    f_.body = pre + "y = " + expr + ";";
    return f_;
  }
  /// y of an explicit C type.
  EwFunction result_typed(const std::string& type, const std::string& body, bool is_storage) {
    f_.y_type = type;
    f_.y_is_storage = is_storage;
    f_.body = body;
    return f_;
  }
  EwFunction& fn() { return f_; }

 private:
  const std::vector<EwValue>& ins_;
  const EwValue& out_;
  EwFunction f_;
};

std::optional<EwFunction> refuse(std::string* why, const std::string& reason) {
  if (why) *why = reason;
  return std::nullopt;
}

bool is_integral_storage(DType t) { return is_integer(t) || t == DType::Bool; }

// FusedElementwise: one float32 statement per instruction; intermediates stay in registers as
// float32 (the CPU rounds fp16/bf16 programs after every instruction; this is within tolerance).
std::string fused_body(const ElementwiseProgram& p) {
  auto operand = [](const EwOperand& a) -> std::string {
    switch (a.kind) {
      // Appending (not "x" + to_string) avoids a GCC 12 -Wrestrict false positive.
      case EwOperand::Kind::Input:
        return std::string("x").append(std::to_string(a.index));
      case EwOperand::Kind::Register:
        return std::string("r").append(std::to_string(a.index));
      case EwOperand::Kind::Literal:
        return flit(a.value);
    }
    return "0";
  };
  std::string s;
  for (size_t k = 0; k < p.code.size(); ++k) {
    const EwInstr& in = p.code[k];
    const std::string a = operand(in.args[0]), b = operand(in.args[1]), c = operand(in.args[2]);
    std::string e;
    switch (in.op) {
      case EwOp::Add:
        e = a + " + " + b;
        break;
      case EwOp::Sub:
        e = a + " - " + b;
        break;
      case EwOp::Mul:
        e = a + " * " + b;
        break;
      case EwOp::Div:
        e = a + " / " + b;
        break;
      case EwOp::Pow:
        e = "powf(" + a + ", " + b + ")";
        break;
      case EwOp::Max:
        e = "fm::max_nan(" + a + ", " + b + ")";
        break;
      case EwOp::Min:
        e = "fm::min_nan(" + a + ", " + b + ")";
        break;
      case EwOp::Neg:
        e = "-" + a;
        break;
      case EwOp::Abs:
        e = a + " < 0.0f ? -" + a + " : " + a;
        break;
      case EwOp::Exp:
        e = "expf(" + a + ")";
        break;
      case EwOp::Log:
        e = "logf(" + a + ")";
        break;
      case EwOp::Sqrt:
        e = "sqrtf(" + a + ")";
        break;
      case EwOp::Reciprocal:
        e = "1.0f / " + a;
        break;
      case EwOp::Erf:
        e = "erff(" + a + ")";
        break;
      case EwOp::Tanh:
        e = "tanhf(" + a + ")";
        break;
      case EwOp::Sigmoid:
        e = "fm::sigmoid_fast_f32(" + a + ")";
        break;
      case EwOp::Relu:
        e = "fm::relu(" + a + ")";
        break;
      case EwOp::Softplus:
        e = "fm::softplus(" + a + ")";
        break;
      case EwOp::Floor:
        e = "floorf(" + a + ")";
        break;
      case EwOp::Ceil:
        e = "ceilf(" + a + ")";
        break;
      case EwOp::HardSwish:
        e = "fm::hard_swish(" + a + ")";
        break;
      case EwOp::Gelu:
        e = "fm::gelu_erfc_f32(" + a + ")";
        break;
      case EwOp::GeluTanh:
        e = "fm::gelu_tanh_f32(" + a + ")";
        break;
      case EwOp::LeakyRelu:
        e = "fm::leaky_relu(" + a + ", " + b + ")";
        break;
      case EwOp::HardSigmoid:
        e = "fm::hard_sigmoid(" + a + ", " + b + ", " + c + ")";
        break;
      case EwOp::Clip:
        e = "fm::clamp(" + a + ", " + b + ", " + c + ")";
        break;
    }
    s += "const float r" + std::to_string(k) + " = " + e + ";\n  ";
  }
  s += "y = r" + std::to_string(p.code.size() - 1) + ";";
  return s;
}

/// Cast/CastLike body: y is the output's storage value. Mirrors cpu convert_tensor (via int64
/// between integer types, via double otherwise; float -> int clamps, NaN -> 0) and the
/// float64 -> half rounding through round-to-odd.
EwFunction cast_function(Builder& b, DType src, DType dst) {
  const std::string D = ew_storage_ctype(dst);
  if (src == dst) {
    std::string x = b.arg(0, true);
    return b.result_typed(D, "y = " + x + ";", true);
  }
  if (is_integral_storage(src) && is_integral_storage(dst)) {
    std::string x = b.arg(0, true);
    std::string conv = dst == DType::Bool ? "(unsigned char)(v != 0)" : "(" + D + ")v";
    return b.result_typed(D, "const long long v = (long long)" + x + ";\n  y = " + conv + ";", true);
  }
  std::string x = b.arg(0, false);  // float storage widened to float (or double)
  std::string conv;
  switch (dst) {
    case DType::Float32:
      conv = "(float)v";
      break;
    case DType::Float64:
      conv = "v";
      break;
    case DType::Float16:
      conv = src == DType::Float64 ? "fx_f2h(fx_d2f_odd(v))" : "fx_f2h((float)v)";
      break;
    case DType::BFloat16:
      conv = src == DType::Float64 ? "fx_f2b(fx_d2f_odd(v))" : "fx_f2b((float)v)";
      break;
    case DType::Bool:
      conv = "(unsigned char)(v != 0.0)";
      break;
    default: {
      IntRange r = int_range(dst);
      conv = "fx_to_int<" + D + ">(v, " + r.lo + ", " + r.hi + ", " + r.omin + ", " + r.omax + ")";
    }
  }
  return b.result_typed(D, "const double v = (double)" + x + ";\n  y = " + conv + ";", true);
}

}  // namespace

bool ew_widens_float_inputs(const std::string& domain, const std::string& op) {
  if (domain == "ai.fusec") return op == "FusedElementwise";
  if (!domain.empty() && domain != "ai.onnx") return false;
  // Each loads its inputs through Builder::arg() without `raw`: float storage becomes float32.
  static const char* kOps[] = {"Add",  "Sub",  "Mul", "Div", "Pow", "Max",  "Min",        "Sum",
                               "Mean", "Sqrt", "Exp", "Log", "Abs", "Neg",  "Reciprocal", "Floor",
                               "Ceil", "Sin",  "Cos", "Tan", "Mod", "Relu", "Sigmoid",    "Tanh"};
  for (const char* o : kOps)
    if (op == o) return true;
  return false;
}

const char* ew_storage_ctype(DType t) {
  switch (t) {
    case DType::Float32:
      return "float";
    case DType::Float64:
      return "double";
    case DType::Float16:
    case DType::BFloat16:
      return "unsigned short";
    case DType::Int8:
      return "signed char";
    case DType::UInt8:
    case DType::Bool:
      return "unsigned char";
    case DType::Int16:
      return "short";
    case DType::Int32:
      return "int";
    case DType::Int64:
      return "long long";
    default:
      return nullptr;
  }
}

std::optional<EwFunction> describe_elementwise(const NodeAttrs& node, int64_t opset, const std::vector<EwValue>& ins,
                                               const EwValue& out, std::string* why) {
  const std::string& op = node.node().op_type;
  const std::string& domain = node.node().domain;
  if (!ew_storage_ctype(out.dtype))
    return refuse(why, std::string("output type ") + dtype_name(out.dtype) + " is not supported");
  for (const auto& v : ins)
    if (v.present && !ew_storage_ctype(v.dtype))
      return refuse(why, std::string("input type ") + dtype_name(v.dtype) + " is not supported");
  if (ins.empty() || !ins[0].present) return refuse(why, "input 0 is missing");
  Builder b(ins, out, op);
  const DType t0 = ins[0].dtype;
  const std::string T = value_ctype(t0);  // compute type of input 0
  const bool fl = is_float_storage(t0);
  const bool is_fusec = domain == "ai.fusec";

  if (is_fusec && op == "FusedElementwise") {
    const int n = static_cast<int>(ins.size());
    for (int i = 0; i < n; ++i)
      if (!ins[static_cast<size_t>(i)].present) return refuse(why, "every input of FusedElementwise is required");
    for (int i = 0; i < n; ++i)
      if (value_ctype(ins[static_cast<size_t>(i)].dtype) != "float" ||
          !is_float_storage(ins[static_cast<size_t>(i)].dtype))
        return refuse(why, "FusedElementwise computes float32, float16 and bfloat16 only");
    if (value_ctype(out.dtype) != "float") return refuse(why, "FusedElementwise output must be a float32/16 type");
    ElementwiseProgram p = elementwise_program_of(node, n);
    for (int i = 0; i < n; ++i) b.arg(static_cast<size_t>(i));
    b.fn().num_ops = static_cast<int>(p.code.size());
    return b.result_typed("float", fused_body(p), false);
  }
  if (is_fusec && op != "Gelu") return refuse(why, "no generated kernel for ai.fusec." + op);
  if (!is_fusec && !domain.empty() && domain != "ai.onnx") return refuse(why, "unknown domain " + domain);

  // Binary ops before opset 7 broadcast B per `broadcast`/`axis` (legacy_broadcast.h).
  auto rhs_dims = [&]() -> std::vector<int64_t> {
    if (!legacy_broadcast_enabled(node)) return ins[1].dims;
    int64_t axis = legacy_broadcast_axis(ins[0].dims.size(), ins[1].dims.size(), node);
    return legacy_padded_dims(ins[1].dims, ins[0].dims.size(), axis);
  };
  auto binary_args = [&](bool raw = false) {
    if (ins.size() < 2 || !ins[1].present) node.fail("needs two inputs");
    std::string a = b.arg(0, raw);
    std::string c = b.arg(1, raw, rhs_dims());
    return std::make_pair(a, c);
  };

  // ---- binary arithmetic ----
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    auto [x, y] = binary_args();
    const char sym = op == "Add" ? '+' : op == "Sub" ? '-' : op == "Mul" ? '*' : '/';
    if (fl) return b.result(x + " " + sym + " " + y);
    const char* fn = op == "Add" ? "fx_iadd" : op == "Sub" ? "fx_isub" : op == "Mul" ? "fx_imul" : "fx_idiv";
    if (op == "Div") {
      if (const Tensor* c = ins[1].constant) {
        for (int64_t i = 0; i < c->numel(); ++i)
          if (c->as_double(i) == 0) return refuse(why, "integer division by zero (constant divisor)");
      } else {  // a divisor known only at run time: a zero is reported (kErrorPrelude)
        b.fn().reports_errors = true;
        return b.result("fx_idiv_r(" + x + ", " + y + ", fx_site)");
      }
    }
    return b.result(std::string(fn) + "(" + x + ", " + y + ")");
  }
  if (op == "Mod") {
    auto [x, y] = binary_args();
    const std::string fmod_sign = node.attr_int("fmod") != 0 ? "true" : "false";
    if (!fl) {
      if (const Tensor* c = ins[1].constant) {
        for (int64_t i = 0; i < c->numel(); ++i)
          if (c->as_double(i) == 0) return refuse(why, "integer modulo by zero (constant divisor)");
        return b.result("fx_imod(" + x + ", " + y + ", " + fmod_sign + ")");
      }
      b.fn().reports_errors = true;
      return b.result("fx_imod_r(" + x + ", " + y + ", " + fmod_sign + ", fx_site)");
    }
    return b.result("fx_mod_float(" + x + ", " + y + ", " + fmod_sign + ")");
  }
  if (op == "Pow") {
    auto [x, y] = binary_args();
    const DType te = ins[1].dtype;
    const std::string E = value_ctype(te);
    const bool bint = !fl, eint = !is_float_storage(te);
    if (bint && eint) return b.result("fx_ipow(" + x + ", " + y + ")");
    if (bint) {
      IntRange r = int_range(t0);
      return b.result("fx_to_int<" + T + ">(fx_pow_exact((double)" + x + ", (double)" + y + "), " + r.lo + ", " + r.hi +
                      ", " + r.omin + ", " + r.omax + ")");
    }
    if (T == "float" && E == "float") return b.result("powf(" + x + ", " + y + ")");
    return b.result("(" + T + ")pow((double)" + x + ", (double)" + y + ")");
  }

  // ---- variadic ----
  if (op == "Max" || op == "Min" || op == "Sum" || op == "Mean") {
    std::vector<std::string> xs;
    for (size_t i = 0; i < ins.size(); ++i)
      if (ins[i].present) xs.push_back(b.arg(i));
    if (xs.empty()) node.fail("needs at least one input");
    std::string acc = "const " + T + " a0 = " + xs[0] + ";\n  ";
    std::string cur = "a0";
    for (size_t k = 1; k < xs.size(); ++k) {
      std::string e;
      if (op == "Max")
        e = "fm::max_nan(" + cur + ", " + xs[k] + ")";
      else if (op == "Min")
        e = "fm::min_nan(" + cur + ", " + xs[k] + ")";
      else if (fl)
        e = cur + " + " + xs[k];
      else
        e = "fx_iadd(" + cur + ", " + xs[k] + ")";
      std::string nxt = "a" + std::to_string(k);
      acc += "const " + T + " " + nxt + " = " + e + ";\n  ";
      cur = nxt;
    }
    b.fn().num_ops = static_cast<int>(xs.size() > 1 ? xs.size() - 1 : 1) + (op == "Mean" ? 1 : 0);
    if (op == "Mean" && xs.size() > 1) {
      const std::string n = std::to_string(xs.size());
      if (fl) return b.result(cur + " / (" + T + ")" + n, acc);
      return b.result("(" + T + ")(" + cur + " / (" + T + ")" + n + ")", acc);
    }
    return b.result(cur, acc);
  }

  // ---- unary ----
  auto unary_float = [&](const std::string& fn) -> std::optional<EwFunction> {
    if (!fl) return refuse(why, op + " needs a float input, not " + std::string(dtype_name(t0)));
    std::string x = b.arg(0);
    return b.result(fn + "(" + x + ")");
  };
  if (op == "Abs") {
    std::string x = b.arg(0);
    if (t0 == DType::UInt8) return b.result(x);
    if (fl) return b.result(x + " < (" + T + ")0 ? (" + T + ")0 - " + x + " : " + x);
    return b.result(x + " < 0 ? fx_isub((" + T + ")0, " + x + ") : " + x);
  }
  if (op == "Neg") {
    std::string x = b.arg(0);
    // 0 - x, as the CPU (so Neg(+0) is +0).
    if (fl) return b.result("(" + T + ")0 - " + x);
    return b.result("fx_isub((" + T + ")0, " + x + ")");
  }
  if (op == "Sign") {
    std::string x = b.arg(0);
    if (t0 == DType::UInt8) return b.result("(" + T + ")(" + x + " > 0)");
    std::string s = "(" + T + ")((" + T + ")0 < " + x + ") - (" + T + ")(" + x + " < (" + T + ")0)";
    if (fl) return b.result(x + " != " + x + " ? " + x + " : (" + T + ")(" + s + ")");
    return b.result("(" + T + ")(((" + T + ")0 < " + x + ") - (" + x + " < (" + T + ")0))");
  }
  if (op == "Reciprocal") {
    if (!fl) return refuse(why, "Reciprocal needs a float input");
    std::string x = b.arg(0);
    return b.result("(" + T + ")1 / " + x);
  }
  static const std::pair<const char*, const char*> kFloatUnary[] = {
      {"Sqrt", "fm::sqrt"},         {"Exp", "fm::exp"},
      {"Log", "fm::log"},           {"Floor", "fm::floor"},
      {"Ceil", "fm::ceil"},         {"Round", "fm::rint"},
      {"Sin", "fm::sin"},           {"Cos", "fm::cos"},
      {"Tan", "fm::tan"},           {"Asin", "fm::asin"},
      {"Acos", "fm::acos"},         {"Atan", "fm::atan"},
      {"Sinh", "fm::sinh"},         {"Cosh", "fm::cosh"},
      {"Asinh", "fm::asinh"},       {"Acosh", "fm::acosh"},
      {"Atanh", "fm::atanh"},       {"Tanh", "fm::tanh"},
      {"Softplus", "fm::softplus"}, {"HardSwish", "fm::hard_swish"},
      {"Mish", "fm::mish"},         {"Softsign", "fm::softsign"},
  };
  for (const auto& [name, fn] : kFloatUnary)
    if (op == name) return unary_float(fn);
  // In float, the hardware's exponential and reciprocal (formulas.h says the error): expf's range
  // reduction and the IEEE division made SwiGLU's gate compute-bound (Llama's, 63% of the copy peak).
  if (op == "Sigmoid") return unary_float(T == "float" ? "fm::sigmoid_fast_f32" : "fm::sigmoid");
  if (op == "Erf") {
    std::string x = b.arg(0);
    if (fl) return b.result("fm::erf(" + x + ")");
    return b.result("(" + T + ")erf((double)" + x + ")");
  }
  if (op == "IsNaN" || op == "IsInf") {
    if (!fl) return refuse(why, op + " needs a float input");
    std::string x = b.arg(0);
    if (op == "IsNaN") return b.result("(unsigned char)(" + x + " != " + x + ")");
    const bool neg = node.attr_int("detect_negative") != 0, pos = node.attr_int("detect_positive") != 0;
    std::string cond = "isinf(" + x + ") && ((" + x + " > 0 && " + (pos ? "true" : "false") + ") || (" + x +
                       " < 0 && " + (neg ? "true" : "false") + "))";
    return b.result("(unsigned char)(" + cond + ")");
  }

  // ---- comparison and logic ----
  static const std::pair<const char*, const char*> kCompare[] = {
      {"Equal", "=="}, {"Less", "<"}, {"Greater", ">"}, {"LessOrEqual", "<="}, {"GreaterOrEqual", ">="}};
  for (const auto& [name, sym] : kCompare)
    if (op == name) {
      auto [x, y] = binary_args();
      return b.result("(unsigned char)(" + x + " " + sym + " " + y + ")");
    }
  if (op == "And" || op == "Or" || op == "Xor") {
    auto [x, y] = binary_args(true);
    const char* sym = op == "And" ? "&&" : op == "Or" ? "||" : "!=";
    return b.result("(unsigned char)((" + x + " != 0) " + sym + " (" + y + " != 0))");
  }
  if (op == "Not") {
    std::string x = b.arg(0, true);
    return b.result("(unsigned char)(" + x + " == 0)");
  }
  if (op == "BitwiseAnd" || op == "BitwiseOr" || op == "BitwiseXor") {
    auto [x, y] = binary_args(true);
    const char* sym = op == "BitwiseAnd" ? " & " : op == "BitwiseOr" ? " | " : " ^ ";
    return b.result("(" + T + ")(" + x + sym + y + ")");
  }
  if (op == "BitwiseNot") {
    std::string x = b.arg(0, true);
    return b.result("(" + T + ")(~" + x + ")");
  }
  if (op == "BitShift") {
    auto [x, y] = binary_args(true);
    const bool left = node.attr_string("direction") == "LEFT";
    return b.result("fx_shift(" + x + ", " + y + (left ? ", true)" : ", false)"));
  }
  if (op == "Where") {
    if (ins.size() < 3) node.fail("needs three inputs");
    std::string c = b.arg(0, true), x = b.arg(1, true), y = b.arg(2, true);
    // Pure selection of storage values (half types are not widened).
    return b.result_typed(ew_storage_ctype(ins[1].dtype), "y = " + c + " ? " + x + " : " + y + ";", true);
  }

  // ---- conversion ----
  if (op == "Cast" || op == "CastLike") return cast_function(b, t0, out.dtype);

  if (op == "Clip") {
    std::string x = b.arg(0);
    std::string lo, hi;
    if (node.schema().find_attr("min")) {  // opset < 11: float attributes
      lo = fl ? tlit(T, node.attr_float("min")) : "(" + T + ")" + dlit(node.attr_float("min"));
      hi = fl ? tlit(T, node.attr_float("max")) : "(" + T + ")" + dlit(node.attr_float("max"));
    } else {
      auto bound = [&](size_t i, std::string def) {
        if (ins.size() <= i || !ins[i].present) return def;
        int64_t n = 1;
        for (int64_t d : ins[i].dims) n *= d;
        if (n != 1) node.fail("min/max must be scalars");
        return b.arg(i, false, std::vector<int64_t>{});
      };
      lo = bound(1, lowest_of(t0));
      hi = bound(2, highest_of(t0));
      if (!fl) {
        lo = "(" + T + ")" + lo;
        hi = "(" + T + ")" + hi;
      }
    }
    return b.result("fm::clamp(" + x + ", (" + T + ")" + lo + ", (" + T + ")" + hi + ")");
  }

  // ---- activations ----
  if (op == "Relu") return b.result("fm::relu(" + b.arg(0) + ")");
  if (op == "PRelu") {
    if (ins.size() < 2 || !ins[1].present) node.fail("needs a slope");
    std::vector<int64_t> sd = ins[1].dims;
    const auto& xd = ins[0].dims;
    // Before opset 7 a 1-D slope of X's channel count is per channel (axis 1).
    if (opset < 7 && sd.size() == 1 && xd.size() >= 2 && sd[0] == xd[1] && sd[0] != 1) {
      std::vector<int64_t> d(xd.size() - 1, 1);
      d[0] = sd[0];
      sd = d;
    }
    std::string x = b.arg(0), s = b.arg(1, false, sd);
    std::string prod = fl ? x + " * " + s : "fx_imul(" + x + ", " + s + ")";
    return b.result(x + " < (" + T + ")0 ? (" + T + ")(" + prod + ") : " + x);
  }
  if (op == "Shrink") {
    std::string x = b.arg(0);
    const std::string bias = dlit(node.attr_float("bias")), lambd = dlit(node.attr_float("lambd"));
    return b.result("fm::shrink(" + x + ", " + bias + ", " + lambd + ")");
  }
  if (!fl) return refuse(why, op + " needs a float input, not " + std::string(dtype_name(t0)));
  if (op == "LeakyRelu") {
    std::string x = b.arg(0);
    return b.result("fm::leaky_relu(" + x + ", " + tlit(T, node.attr_float("alpha")) + ")");
  }
  if (op == "HardSigmoid") {
    std::string x = b.arg(0);
    return b.result("fm::hard_sigmoid(" + x + ", " + tlit(T, node.attr_float("alpha")) + ", " +
                    tlit(T, node.attr_float("beta")) + ")");
  }
  if (op == "Swish") {
    std::string x = b.arg(0);
    const std::string ax = "(" + tlit(T, node.attr_float("alpha")) + " * " + x + ")";
    return b.result(x + " * " + (T == "float" ? "fm::sigmoid_fast_f32" : "fm::sigmoid") + ax);
  }
  if (op == "Elu") {
    std::string x = b.arg(0);
    return b.result("fm::elu(" + x + ", " + tlit(T, node.attr_float("alpha")) + ")");
  }
  if (op == "Selu") {
    std::string x = b.arg(0);
    return b.result("fm::selu(" + x + ", " + tlit(T, node.attr_float("alpha")) + ", " +
                    tlit(T, node.attr_float("gamma")) + ")");
  }
  if (op == "Celu") {
    const float alpha = node.attr_float("alpha");
    if (alpha == 0.0f) return refuse(why, "Celu alpha must not be 0");
    std::string x = b.arg(0), a = tlit(T, alpha);
    return b.result("fm::celu(" + x + ", " + a + ")");
  }
  if (op == "ThresholdedRelu") {
    std::string x = b.arg(0);
    return b.result("fm::thresholded_relu(" + x + ", " + tlit(T, node.attr_float("alpha")) + ")");
  }
  if (op == "Gelu") {
    const std::string a = node.attr_string("approximate");
    if (a != "none" && a != "tanh") return refuse(why, "Gelu approximate='" + a + "'");
    std::string x = b.arg(0);
    // The CPU rounds a double computation once; float data gets the float forms (within 1e-5).
    if (T == "double") return b.result((a == "tanh" ? "fm::gelu_tanh_via_f64(" : "fm::gelu_erf_via_f64(") + x + ")");
    return b.result((a == "tanh" ? "fm::gelu_tanh_f32(" : "fm::gelu_erfc_f32(") + x + ")");
  }
  return refuse(why, "no generated kernel for " + op);
}

// ---- launch planning ----

FastDivider fast_divider(uint32_t d) {
  FastDivider f;
  if (d == 0) return f;  // an empty dim: nothing is ever divided by it
  uint32_t s = 0;
  while (s < 32 && (uint64_t{1} << s) < d) ++s;
  f.shift = s;
  f.magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << s) - d)) / d + 1);
  return f;
}

std::optional<EwLaunchPlan> plan_elementwise_launch(const EwFunction& f, DType out_dtype,
                                                    const std::vector<int64_t>& out_dims, std::string* why) {
  EwLaunchPlan p;
  p.numel = 1;
  for (int64_t d : out_dims) p.numel *= d;
  const size_t nargs = f.inputs.size();
  const size_t orank = out_dims.size();
  std::vector<std::vector<int64_t>> strides(nargs, std::vector<int64_t>(orank, 0));
  size_t max_full = dtype_size(out_dtype);
  for (size_t k = 0; k < nargs; ++k) {
    const auto& d = f.dims[k];
    int64_t n = 1;
    for (int64_t v : d) n *= v;
    if (n == 1) {
      p.kinds.push_back(EwArgKind::Scalar);
      continue;
    }
    if (d.size() > orank) {
      if (why) *why = "input dims do not broadcast to the output's";
      return std::nullopt;
    }
    int64_t s = 1;
    for (size_t i = 0; i < d.size(); ++i) {
      const size_t ax = d.size() - 1 - i, oax = orank - 1 - i;
      if (d[ax] != 1 && d[ax] != out_dims[oax]) {
        if (why) *why = "input dims do not broadcast to the output's";
        return std::nullopt;
      }
      strides[k][oax] = d[ax] == 1 ? 0 : s;
      s *= d[ax];
    }
    if (n == p.numel) {
      p.kinds.push_back(EwArgKind::Full);
      max_full = std::max(max_full, dtype_size(f.dtypes[k]));
    } else {
      p.kinds.push_back(EwArgKind::Mapped);
      p.linear = false;
    }
  }
  const int vec_max = static_cast<int>(std::max<size_t>(1, 16 / max_full));
  if (p.numel == 0) {  // nothing to launch; any valid plan will do
    for (auto& k : p.kinds) k = EwArgKind::Scalar;
    p.linear = true;
  }
  if (p.linear) {
    p.vec = vec_max;
    return p;
  }
  // Coalesce: drop size-1 dims, merge neighbours that every Mapped argument walks alike.
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> st(nargs);
  for (size_t ax = 0; ax < orank; ++ax) {
    if (out_dims[ax] == 1) continue;
    bool merge = !dims.empty();
    for (size_t k = 0; k < nargs && merge; ++k)
      if (p.kinds[k] == EwArgKind::Mapped && st[k].back() != strides[k][ax] * out_dims[ax]) merge = false;
    if (merge) {
      dims.back() *= out_dims[ax];
      for (size_t k = 0; k < nargs; ++k)
        if (p.kinds[k] == EwArgKind::Mapped) st[k].back() = strides[k][ax];
    } else {
      dims.push_back(out_dims[ax]);
      for (size_t k = 0; k < nargs; ++k)
        if (p.kinds[k] == EwArgKind::Mapped) st[k].push_back(strides[k][ax]);
    }
  }
  p.rank = static_cast<int>(dims.size());
  if (p.rank > 8) {
    if (why) *why = "rank " + std::to_string(p.rank) + " after merging dims exceeds 8";
    return std::nullopt;
  }
  p.index64 = p.numel >= (int64_t{1} << 31);
  // Vectorize along the innermost dim when it splits into whole vectors: a Mapped argument then
  // has inner stride 1 (vector load at an aligned offset) or 0 (one value for the whole vector).
  int vec = vec_max;
  while (vec > 1 && dims.back() % vec != 0) vec /= 2;
  p.vec = vec;
  auto block = [&](int v) {
    std::vector<int64_t> out;
    std::vector<int64_t> dd = dims;
    dd.back() /= v;
    std::vector<FastDivider> fd;
    for (int64_t d : dd) fd.push_back(fast_divider(static_cast<uint32_t>(std::min<int64_t>(d, INT32_MAX))));
    for (int64_t d : dd) out.push_back(d);
    for (const auto& x : fd) out.push_back(x.magic);
    for (const auto& x : fd) out.push_back(x.shift);
    for (size_t k = 0; k < nargs; ++k) {
      if (p.kinds[k] != EwArgKind::Mapped) continue;
      for (int r = 0; r < p.rank; ++r) out.push_back(r == p.rank - 1 ? st[k][r] * v : st[k][r]);
    }
    return out;
  };
  p.params = block(vec);
  p.params_scalar = block(1);
  return p;
}

// ---- source ----

namespace {

/// Innermost (unscaled) stride of Mapped argument k: 1 or 0 (broadcast along the inner dim).
int64_t ew_inner_stride(const EwLaunchPlan& p, size_t k) {
  size_t slot = 0;
  for (size_t j = 0; j < k; ++j) slot += p.kinds[j] == EwArgKind::Mapped;
  const size_t R = static_cast<size_t>(p.rank);
  return p.params_scalar[3 * R + slot * R + R - 1];
}

std::string kernel_text(const EwFunction& f, const EwLaunchPlan& p, DType out_dtype, const std::string& name, int vec) {
  const size_t nargs = f.inputs.size();
  const bool mapped = !p.linear;
  const std::string I = mapped && !p.index64 ? "unsigned" : "long long";
  const std::string O = ew_storage_ctype(out_dtype);
  std::ostringstream s;
  s << "extern \"C\" __global__ void __launch_bounds__(256) " << name << "(long long n_";
  for (size_t k = 0; k < nargs; ++k) s << ", const " << ew_storage_ctype(f.dtypes[k]) << "* __restrict__ in" << k;
  s << ", " << O << "* __restrict__ out";
  if (mapped) s << ", const FxIdx p";
  if (f.reports_errors) s << ", const FxErrSite fx_site";
  s << ") {\n";
  s << "  const " << I << " n = (" << I << ")n_;\n";
  auto val = [&](size_t k, const std::string& e) { return f.raw[k] ? e : load_expr(f.dtypes[k], e); };
  for (size_t k = 0; k < nargs; ++k)
    if (p.kinds[k] == EwArgKind::Scalar)
      s << "  const auto s" << k << " = " << val(k, "in" + std::to_string(k) + "[0]") << ";\n";
  s << "  const " << I << " nv = n / " << vec << ";\n";
  s << "  const " << I << " step = (" << I << ")gridDim.x * blockDim.x;\n";
  s << "  for (" << I << " v = (" << I << ")blockIdx.x * blockDim.x + threadIdx.x; v < nv; v += step) {\n";
  s << "    const " << I << " i = v * " << vec << ";\n";
  // Offsets of the Mapped arguments: v decomposed over the coalesced dims (innermost first).
  if (mapped) {
    const int R = p.rank;
    int m = 0;
    std::vector<int> slot(nargs, -1);
    for (size_t k = 0; k < nargs; ++k)
      if (p.kinds[k] == EwArgKind::Mapped) {
        slot[k] = m++;
        s << "    " << I << " o" << k << " = 0;\n";
      }
    s << "    " << I << " r = v;\n";
    for (int d = R - 1; d >= 0; --d) {
      std::string c;
      if (d > 0) {
        if (p.index64) {
          s << "    { const long long q = r / p.v[" << d << "]; const long long c = r - q * p.v[" << d << "];\n";
        } else {
          s << "    { const unsigned q = (__umulhi(r, (unsigned)p.v[" << R + d << "]) + r) >> (unsigned)p.v["
            << 2 * R + d << "]; const unsigned c = r - q * (unsigned)p.v[" << d << "];\n";
        }
        c = "c";
      } else {
        s << "    { const " << I << " c = r;\n";
      }
      for (size_t k = 0; k < nargs; ++k)
        if (slot[k] >= 0) s << "      o" << k << " += c * (" << I << ")p.v[" << 3 * R + slot[k] * R + d << "];\n";
      if (d > 0) s << "      r = q;\n";
      s << "    }\n";
    }
  }
  // Loads: whole vectors for Full arguments and Mapped ones with inner stride 1.
  std::vector<std::string> per_elem(nargs);
  for (size_t k = 0; k < nargs; ++k) {
    const std::string S = ew_storage_ctype(f.dtypes[k]);
    const std::string in = "in" + std::to_string(k);
    const std::string ks = std::to_string(k);
    if (p.kinds[k] == EwArgKind::Scalar) {
      per_elem[k] = "s" + ks;
      continue;
    }
    const std::string off = p.kinds[k] == EwArgKind::Full ? "i" : "o" + ks;
    const bool inner_contig = p.kinds[k] == EwArgKind::Full || ew_inner_stride(p, k) == 1;
    if (vec > 1 && inner_contig) {
      s << "    const FxVec<" << S << ", " << vec << "> a" << k << " = *reinterpret_cast<const FxVec<" << S << ", "
        << vec << ">*>(" << in << " + " << off << ");\n";
      per_elem[k] = val(k, "a" + ks + ".v[j]");
    } else if (vec > 1) {
      s << "    const auto b" << k << " = " << val(k, in + "[" + off + "]") << ";\n";
      per_elem[k] = "b" + ks;
    } else {
      per_elem[k] = val(k, in + "[" + off + "]");
    }
  }
  auto call = [&](const std::vector<std::string>& args) {
    std::string c = "fx_op(";
    for (size_t k = 0; k < args.size(); ++k) c += (k ? ", " : "") + args[k];
    c += f.reports_errors ? ", fx_site)" : ")";
    return f.y_is_storage ? c : store_expr(out_dtype, c);
  };
  if (vec > 1) {
    s << "    FxVec<" << O << ", " << vec << "> res;\n";
    s << "#pragma unroll\n";
    s << "    for (int j = 0; j < " << vec << "; ++j) res.v[j] = " << call(per_elem) << ";\n";
    s << "    *reinterpret_cast<FxVec<" << O << ", " << vec << ">*>(out + i) = res;\n";
  } else {
    s << "    out[i] = " << call(per_elem) << ";\n";
  }
  s << "  }\n";
  if (vec > 1 && !mapped) {
    // Fewer than `vec` elements left over: one per thread.
    std::vector<std::string> tail(nargs);
    for (size_t k = 0; k < nargs; ++k)
      tail[k] = p.kinds[k] == EwArgKind::Scalar ? "s" + std::to_string(k) : val(k, "in" + std::to_string(k) + "[i]");
    s << "  const " << I << " i = nv * " << vec << " + (" << I << ")blockIdx.x * blockDim.x + threadIdx.x;\n";
    s << "  if (i < n) out[i] = " << call(tail) << ";\n";
  }
  s << "}\n";
  return s.str();
}

}  // namespace

EwSource generate_elementwise_source(const EwFunction& f, const EwLaunchPlan& p, DType out_dtype) {
  EwSource src;
  std::ostringstream s;
  s << "// generated by fusec (backend/cuda/ops/elementwise/elementwise_codegen.cpp)\n"
    << kFormulasText << kPrelude << "\n";
  if (f.reports_errors) s << kErrorPrelude << "\n";
  if (!p.linear) s << "struct FxIdx { long long v[" << p.params.size() << "]; };\n\n";
  // The node's per-element function.
  s << "// " << f.label << "\n";
  s << "FX " << f.y_type << " fx_op(";
  for (size_t k = 0; k < f.inputs.size(); ++k)
    s << (k ? ", " : "") << (f.raw[k] ? ew_storage_ctype(f.dtypes[k]) : value_ctype(f.dtypes[k])) << " x" << k;
  if (f.reports_errors) s << ", FxErrSite fx_site";
  s << ") {\n  " << f.y_type << " y;\n  " << f.body << "\n  return y;\n}\n\n";
  const std::string base = p.linear ? "fx_linear" : "fx_mapped";
  if (p.vec > 1) {
    s << kernel_text(f, p, out_dtype, base + "_vec" + std::to_string(p.vec), p.vec) << "\n";
    src.kernels.push_back(base + "_vec" + std::to_string(p.vec));
  }
  s << kernel_text(f, p, out_dtype, base, 1);
  src.kernels.push_back(base);
  if (src.kernels.size() == 1) src.kernels.push_back(base);
  src.code = s.str();
  return src;
}

}  // namespace fusec::cuda

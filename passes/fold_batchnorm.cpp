// fold_batchnorm: a per-channel affine map after a Conv, or a per-feature one after a Gemm/MatMul,
// is folded into that op's weight and bias, so it costs nothing at run time. Writes standard ONNX
// only (so it also runs under --portable).
//
//   X   W  [b]                              X   W'  b'
//    \  |  /                                 \  |  /
//     Conv      γ  β  μ  σ²                    Conv
//       \       |  |  |  /         =>            |
//      BatchNormalization                        y
//              |
//              y
//
//   s[m]  = γ[m] / √(σ²[m] + ε)            per output channel m (W's axis 0, any group count)
//   W'[m] = W[m] · s[m]
//   b'[m] = (b[m] − μ[m]) · s[m] + β[m]    (b = 0 when the Conv has none)
//
//   Conv -> Mul(c), c per channel ([C,1,1], [1,C,1,1], scalar):  W'[m] = W[m]·c[m],  b'[m] = b[m]·c[m]
//   Conv -> Add(c), c per channel:                                b'[m] = b[m] + c[m]  (b made if absent)
//
//   Gemm(A, B, C; α, β, transB) -> BatchNormalization   The output is 2-D [rows, N], so BN's channel
//   MatMul(A 2-D, W [K,N])      -> BatchNormalization   axis 1 is the feature axis n:
//        B'[·, n] = B[·, n] · s[n]   (B's row n when transB)      C' = β·C·s + (β_bn − μ·s),  β' = 1
//     The MatMul becomes Gemm(A, W', C'). A MatMul whose A is not 2-D is left alone and said so:
//     BN then normalizes axis 1 of an N-D output, not the axis the weight's columns produce.
//
//   MatMul(A N-D, W [K,N]) [-> Add(b)] -> Reshape/Flatten to [rows, N] -> BatchNormalization
//   MatMul(A N-D, W [K,N]) [-> Add(b)] -> Transpose(perm, perm[1] = last) -> BatchNormalization
//     BatchNorm1d over tokens (LeViT's linears: flatten(0, 1), BN, reshape back; a channels-first BN
//     after a permute): BN's axis 1 is the product's feature axis n, so W'[·, n] = W[·, n]·s[n] and
//     b'[n] = b[n]·s[n] + t[n], an Add made when there is none. The Reshape or Transpose stays and
//     writes BN's output.
//
//   Gemm -> Add(c)                   C' = β·C + c, β' = 1        (c broadcasts to [rows, N])
//   MatMul(A 2-D, B 2-D) -> Add(c) -> BatchNormalization
//                                    Gemm(A, B, c), then Gemm -> BN as above
//     A MatMul -> Add bias with no BN after it is left to fuse_matmul_bias, which runs after the
//     GELU/LayerNorm fusions: it writes the same Gemm when nothing follows, but a FusedMatMul with
//     the activation when one does, which a Gemm written here first would prevent.
//
//   Gemm -> Mul(c), c per feature:   B'[·, n] = B[·, n]·c[n], C' = β·C·c, β' = 1
//   MatMul(A N-D, W [K,N]) [-> Add(b)] [-> Transpose(perm)] -> Mul(c)
//     c per feature (it varies only along the axis the product's last axis lands on; ConvNeXt's
//     layer scale [C,1,1] after its MLP's permute back to NCHW, CaiT's and DeiT-III's after their
//     projections): W'[·, n] = W[·, n]·c[n], b'[n] = b[n]·c[n], and the Mul is gone. The chain's
//     values must each be read only by the next op. b must be per feature too.
//
// The folded op keeps its name and now writes the BN/Mul/Add output value; fused_from lists both.
// New weights are new initializers (`<node>.W_folded`, `.B_folded`, `.C_folded`); the originals are
// never modified, so a weight shared with another node is safe.
#include "passes/fold_batchnorm.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "ir/error.h"
#include "ir/half.h"
#include "passes/batchnorm_affine.h"
#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec {

namespace {

const char* kPass = "fold_batchnorm";

/// A constant of rank <= 2 broadcast over a [rows, N] Gemm output: (r, c) reads element
/// (rows == 1 ? 0 : r, cols == 1 ? 0 : c).
struct Addend2D {
  std::vector<double> v{0.0};
  int64_t rows = 1, cols = 1;
  double at(int64_t r, int64_t c) const { return v[(rows == 1 ? 0 : r) * cols + (cols == 1 ? 0 : c)]; }
  static Addend2D of(const Tensor& t) {
    Addend2D a;
    a.rows = t.rank() == 2 ? t.dim(0) : 1;
    a.cols = t.rank() >= 1 ? t.dims().back() : 1;
    a.v.resize(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) a.v[i] = t.as_double(i);
    return a;
  }
};

/// A new tensor like `w` with element i multiplied by factor(i) (in double, rounded once).
template <typename F>
Tensor scaled(const Tensor& w, F&& factor) {
  if (w.dtype() == DType::Float32) {  // the common case, without a per-element type switch
    Tensor t(DType::Float32, w.dims());
    const float* src = w.data<float>();
    float* dst = t.data<float>();
    for (int64_t i = 0; i < w.numel(); ++i) dst[i] = static_cast<float>(src[i] * factor(i));
    return t;
  }
  std::vector<double> v(static_cast<size_t>(w.numel()));
  for (int64_t i = 0; i < w.numel(); ++i) v[i] = w.as_double(i) * factor(i);
  return tensor_from(w.dtype(), w.dims(), v);
}

/// Stem for new initializer names: the node's name, or its output's when it has none.
std::string stem_of(const Node* n) { return n->name.empty() ? n->outputs[0]->name : n->name; }

/// Why the output `v` of the op being folded into cannot take in its reader, or "".
std::string single_use_problem(const Value* v, const std::string& op) {
  if (v->is_graph_output) return "the " + op + " output '" + v->name + "' is a graph output";
  if (v->consumers.size() != 1)
    return "the " + op + " output '" + v->name + "' has " + std::to_string(v->consumers.size()) + " consumers";
  return "";
}

/// The values of constant `c` per index of axis `axis` of a rank-`rank` output whose axis has `n`
/// entries, or nullopt with `why` if `c` varies along another axis (or would grow the output).
std::optional<std::vector<double>> per_axis_values(const Tensor& c, size_t rank, size_t axis, int64_t n,
                                                   const std::string& axis_name, std::string* why) {
  if (c.rank() > rank) {
    *why = "the constant of shape " + dims_str(c.dims()) + " has more dims than the output (" + std::to_string(rank) +
           "): it would broadcast the output";
    return std::nullopt;
  }
  size_t off = rank - c.rank();
  bool varies = false;
  for (size_t i = 0; i < c.rank(); ++i) {
    int64_t d = c.dim(i);
    if (d == 1) continue;
    if (off + i == axis && d == n) {
      varies = true;
      continue;
    }
    *why = "the constant of shape " + dims_str(c.dims()) + " is not per-" + axis_name + ": it spans output axis " +
           std::to_string(off + i) +
           (off + i == axis ? " with " + std::to_string(d) + " entries, not " + std::to_string(n)
                            : " (the " + axis_name + " axis is " + std::to_string(axis) + ")");
    return std::nullopt;
  }
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = c.as_double(varies ? i : 0);
  if (!all_finite(v)) {
    *why = "the constant has non-finite values";
    return std::nullopt;
  }
  return v;
}

/// W'[m] = W[m]·scale[m], b'[m] = b[m]·scale[m] + shift[m]. The caller checked W (when scaled) and
/// b (when present) are constants.
void fold_into_conv(Graph& g, Node* conv, const ChannelAffine& a, DType dt) {
  int64_t m = static_cast<int64_t>(a.scale.size());
  if (!a.scale_is_one()) {
    const Tensor* w = constant_of(conv->input(1));
    int64_t per = w->numel() / m;
    g.set_input(
        conv, 1,
        g.add_initializer(stem_of(conv) + ".W_folded", scaled(*w, [&](int64_t i) { return a.scale[i / per]; })));
  }
  const Tensor* b = constant_of(conv->input(2));
  if (!b && a.shift_is_zero()) return;
  std::vector<double> nb(static_cast<size_t>(m));
  for (int64_t o = 0; o < m; ++o) nb[o] = (b ? b->as_double(o) : 0.0) * a.scale[o] + a.shift[o];
  g.set_input(conv, 2, g.add_initializer(stem_of(conv) + ".B_folded", tensor_from(dt, {m}, nb)));
}

/// Folds y = op(...) ⊙ scale[n] + shift into a Gemm or MatMul (which becomes a Gemm) with `n`
/// output features: B's feature n scaled (when `scale`), C' = β·C·scale + shift, β' = 1.
void fold_into_gemm(Graph& g, Node* mm, int64_t n, const std::vector<double>* scale, const Addend2D& shift, DType dt) {
  bool was_matmul = is_op(mm, "MatMul");
  double beta = was_matmul ? 1.0 : mm->attr_float("beta", 1.0f);
  bool trans_b = !was_matmul && mm->attr_int("transB", 0) != 0;
  if (scale) {
    const Tensor* w = constant_of(mm->input(1));
    int64_t c = w->dim(1);
    auto feature = [&](int64_t i) { return (*scale)[trans_b ? i / c : i % c]; };
    g.set_input(mm, 1, g.add_initializer(stem_of(mm) + ".W_folded", scaled(*w, feature)));
  }
  const Tensor* c_old = constant_of(mm->input(2));
  Addend2D c = c_old ? Addend2D::of(*c_old) : Addend2D{};
  int64_t rows = std::max(c.rows, shift.rows);
  std::vector<double> nc(static_cast<size_t>(rows * n));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j) nc[i * n + j] = beta * c.at(i, j) * (scale ? (*scale)[j] : 1.0) + shift.at(i, j);
  std::vector<int64_t> dims = rows == 1 ? std::vector<int64_t>{n} : std::vector<int64_t>{rows, n};
  g.set_input(mm, 2, g.add_initializer(stem_of(mm) + ".C_folded", tensor_from(dt, dims, nc)));
  if (was_matmul)
    mm->op_type = "Gemm";  // alpha = beta = 1, no transposes: the defaults
  else if (mm->has_attr("beta"))
    mm->set_attr("beta", 1.0f);
  if (g.opset("") < 7) mm->set_attr("broadcast", int64_t{1});  // Gemm-6 broadcasts C only when told
}

/// Output rank and size of axis 1 of `v` (a Conv or Gemm output), if known.
std::optional<std::pair<size_t, int64_t>> rank_and_axis1(const Value* v) {
  if (!v->type.shape || v->type.shape->size() < 2 || !(*v->type.shape)[1].is_static()) return std::nullopt;
  return std::make_pair(v->type.shape->size(), (*v->type.shape)[1].value);
}

/// Checks the [rows, N] Gemm/MatMul output `y` can absorb adding constant `c` (c broadcasts into y
/// without growing it). Returns the addend, or nullopt with `why`.
std::optional<Addend2D> gemm_addend(const Value* y, const Tensor& c, std::string* why) {
  const Shape& s = *y->type.shape;
  if (c.rank() > 2) {
    *why = "the constant of shape " + dims_str(c.dims()) + " has more dims than the 2-D output";
    return std::nullopt;
  }
  Addend2D a = Addend2D::of(c);
  bool cols_ok = a.cols == 1 || a.cols == s[1].value;
  bool rows_ok = a.rows == 1 || (s[0].is_static() && a.rows == s[0].value);
  if (!cols_ok || !rows_ok) {
    *why = "the constant of shape " + dims_str(c.dims()) + " does not broadcast into the output " + shape_str(s) +
           " without growing it";
    return std::nullopt;
  }
  if (!all_finite(a.v)) {
    *why = "the constant has non-finite values";
    return std::nullopt;
  }
  return a;
}

/// MatMul(x, W) [-> Add(b)] writing `y`, with W a constant matrix and b a constant: the product,
/// its weight, the bias Add and its constant (or nulls), which input of the Add b is, and the
/// product's value.
struct Linear {
  Node* mm;
  const Tensor* w;
  Node* add;
  const Tensor* bias;
  int bias_at;
  Value* product;
};

std::optional<Linear> linear_before(Value* y) {
  Linear l{nullptr, nullptr, nullptr, nullptr, -1, y};
  if (Node* a = y->producer; is_op(a, "Add")) {
    for (int i = 0; i < 2 && !l.bias; ++i)
      if (const Tensor* b = constant_of(a->input(i)); b && a->input(1 - i) != a->input(i))
        l.bias = b, l.bias_at = i, l.add = a, l.product = a->input(1 - i);
    if (!l.add) return std::nullopt;
  }
  l.mm = l.product->producer;
  l.w = l.mm && is_op(l.mm, "MatMul") ? constant_of(l.mm->input(1)) : nullptr;
  if (!l.w || l.w->rank() != 2) return std::nullopt;
  return l;
}

class Folder {
 public:
  explicit Folder(Rewriter& r) : r_(r), g_(r.graph()) {}

  /// Conv/Gemm/MatMul -> BatchNormalization.
  bool batchnorm(Node* bn) {
    Value* x = bn->input(0);
    Node* p = x ? x->producer : nullptr;
    if (is_op(p, "Reshape") || is_op(p, "Flatten") || is_op(p, "Transpose")) return matmul_batchnorm(bn, p);
    if (!p || !(is_op(p, "Conv") || is_op(p, "Gemm") || is_op(p, "MatMul"))) return false;
    what_ = describe(p) + " -> " + describe(bn) + " not folded";
    if (!common_guards(p, x)) return false;
    std::string why, done = describe(p) + " + " + describe(bn) + " -> ";
    std::vector<std::string> replaced = {p->name, bn->name};
    if (is_op(p, "Conv")) {
      const Tensor* w = nullptr;
      if (!conv_constants(p, /*need_weight=*/true, &w)) return false;
      auto a = batchnorm_affine(g_, bn, w->dim(0), &why);
      if (!a) return miss(why);
      fold_into_conv(g_, p, *a, x->type.dtype);
      done += describe(p) + " (BatchNormalization folded into its weight and bias)";
    } else {
      int64_t n = 0;
      if (!gemm_weight(p, x, &n)) return false;
      auto a = batchnorm_affine(g_, bn, n, &why);
      if (!a) return miss(why);
      Addend2D shift;
      shift.cols = n;
      shift.v = a->shift;
      fold_into_gemm(g_, p, n, &a->scale, shift, x->type.dtype);
      done += "Gemm '" + p->name + "' (BatchNormalization folded into its weight and C)";
    }
    r_.rewrote(done, replaced, p->name);
    absorb(p, bn);
    return true;
  }

  /// MatMul [-> Add(b)] -> Reshape/Transpose `move` -> BatchNormalization, where BN's channel axis
  /// is the product's feature axis (see top).
  bool matmul_batchnorm(Node* bn, Node* move) {
    Value* x = bn->input(0);
    Value* y = move->input(0);
    const auto lin = linear_before(y);
    if (!lin) return false;
    Node *mm = lin->mm, *add = lin->add;
    const Tensor *w = lin->w, *bias = lin->bias;
    Value* t = lin->product;
    const int64_t n = w->dim(1);
    if (!chain_guards(describe(mm) + " -> " + describe(move) + " -> " + describe(bn) + " not folded", {t, y, x}))
      return false;
    const size_t rank = t->type.shape ? t->type.shape->size() : 0;
    if (rank < 2 || !x->type.shape || x->type.shape->size() < 2)
      return miss("the product's or the BatchNormalization input's rank is unknown");
    if (!is_op(move, "Transpose")) {  // Reshape or Flatten
      // Row-major order keeps the feature index exactly when the last axis stays whole and last.
      const Shape& xs = *x->type.shape;
      if (xs.size() != 2 || !xs[1].is_static() || xs[1].value != n)
        return miss("the Reshape writes " + shape_str(xs) + ", not [rows, " + std::to_string(n) +
                    "]: BatchNormalization's axis 1 is not the product's feature axis");
    } else {
      const std::vector<int64_t> perm = move->attr_ints("perm");
      if (perm.size() != rank || perm[1] != static_cast<int64_t>(rank) - 1)
        return miss("the Transpose does not move the product's feature axis to axis 1");
    }
    std::string why;
    auto a = batchnorm_affine(g_, bn, n, &why);
    if (!a) return miss(why);
    std::optional<std::vector<double>> b;
    if (bias && !(b = per_axis_values(*bias, rank, rank - 1, n, "feature", &why))) return miss("the bias: " + why);
    r_.rewrote(describe(mm) + (add ? " + " + describe(add) : "") + " + " + describe(move) + " + " + describe(bn) +
                   " -> the same without the BatchNormalization (folded into the weight and bias)",
               {mm->name, bn->name}, mm->name);
    g_.set_input(mm, 1,
                 g_.add_initializer(stem_of(mm) + ".W_folded", scaled(*w, [&](int64_t i) { return a->scale[i % n]; })));
    std::vector<double> nb(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) nb[j] = (b ? (*b)[j] : 0.0) * a->scale[j] + a->shift[j];
    const DType dt = bias ? bias->dtype() : x->type.dtype;
    Value* nbv = g_.add_initializer(stem_of(add ? add : mm) + ".B_folded", tensor_from(dt, {n}, nb));
    if (add) {
      g_.set_input(add, lin->bias_at, nbv);
    } else {
      Value* biased = g_.add_value(stem_of(mm) + ".biased");
      biased->type = t->type;
      g_.add_node("Add", {t, nbv}, {biased}, stem_of(mm) + ".bias");
      g_.set_input(move, 0, biased);
    }
    absorb(move, bn);
    return true;
  }

  /// Conv -> Mul/Add of a per-channel constant; Gemm/MatMul -> Add of a bias constant.
  bool mul_or_add(Node* op) {
    bool is_mul = is_op(op, "Mul");
    for (int i = 0; i < 2; ++i) {
      Value* x = op->input(i);
      Value* cv = op->input(1 - i);
      Node* p = x ? x->producer : nullptr;
      const Tensor* c = constant_of(cv);
      // A non-constant operand is a residual or a gate (SiLU): other passes' patterns, not a miss.
      if (!p || !c || x == cv) continue;
      if (is_op(p, "Conv")) return conv_mul_add(p, op, x, *c, is_mul);
      if (is_mul && is_op(p, "Gemm")) return gemm_mul(p, op, x, *c);
      if (is_mul && matmul_scale(op, x, *c)) return true;
      if (!is_mul && (is_op(p, "Gemm") || is_op(p, "MatMul"))) return gemm_add(p, op, x, *c);
    }
    return false;
  }

 private:
  bool miss(const std::string& why) { return r_.near_miss(what_, why); }

  /// `keep` takes in `gone`, which read keep's output 0 (and nobody else did): keep now writes
  /// gone's output value, so downstream names and graph outputs survive.
  void absorb(Node* keep, Node* gone) {
    r_.absorb(keep, {gone});
    g_.remove_unused_values();
  }

  /// A product's chain to the op folded into it: each value read only by the next op (the same
  /// value may come up to three times: once each is enough), and the last a float type.
  bool chain_guards(std::string what, std::initializer_list<const Value*> chain) {
    what_ = std::move(what);
    for (const Value* v : chain)
      if (std::string why = single_use_problem(v, v->producer->op_type); !why.empty()) return miss(why);
    const DType dt = (*(chain.end() - 1))->type.dtype;
    if (!is_float(dt)) return miss(std::string("its type is ") + dtype_name(dt) + ", not a floating-point type");
    return true;
  }

  bool common_guards(const Node* p, const Value* x) {
    std::string why = single_use_problem(x, p->op_type);
    if (!why.empty()) return miss(why);
    DType dt = x->type.dtype;
    if (!is_float(dt)) return miss(std::string("its type is ") + dtype_name(dt) + ", not a floating-point type");
    return true;
  }

  /// The conv's weight (when needed) and bias (when present) are constants.
  bool conv_constants(const Node* conv, bool need_weight, const Tensor** w) {
    *w = constant_of(conv->input(1));
    if (need_weight && !*w) return miss("the conv weight '" + conv->input(1)->name + "' is not a constant");
    if (*w && (*w)->rank() < 3) return miss("the conv weight has rank " + std::to_string((*w)->rank()));
    if (conv->input(2) && !constant_of(conv->input(2)))
      return miss("the conv bias '" + conv->input(2)->name + "' is not a constant");
    return true;
  }

  /// For Gemm/MatMul -> BN: the weight is a constant 2-D matrix, the output's features are axis 1
  /// (MatMul: A is 2-D), C is constant. Sets the feature count.
  bool gemm_weight(const Node* p, const Value* y, int64_t* n) {
    if (is_op(p, "MatMul")) {
      const Value* a = p->input(0);
      if (!a->type.shape) return miss("the rank of MatMul's A is unknown");
      if (a->type.shape->size() != 2)
        return miss("MatMul's A is " + std::to_string(a->type.shape->size()) +
                    "-D: BatchNormalization normalizes axis 1 of the output, not the feature axis the weight produces");
    }
    const Tensor* w = constant_of(p->input(1));
    if (!w) return miss("the weight '" + p->input(1)->name + "' is not a constant");
    if (w->rank() != 2) return miss("the weight has rank " + std::to_string(w->rank()) + ", not 2");
    if (p->input(2) && !constant_of(p->input(2))) return miss("Gemm's C '" + p->input(2)->name + "' is not a constant");
    bool trans_b = is_op(p, "Gemm") && p->attr_int("transB", 0) != 0;
    *n = trans_b ? w->dim(0) : w->dim(1);
    if (!y->type.shape || y->type.shape->size() != 2) return miss("the output is not known to be 2-D");
    return true;
  }

  bool conv_mul_add(Node* conv, Node* op, Value* x, const Tensor& c, bool is_mul) {
    what_ = describe(conv) + " -> " + describe(op) + " not folded";
    if (!common_guards(conv, x)) return false;
    const Tensor* w = nullptr;
    if (!conv_constants(conv, is_mul, &w)) return false;
    auto ra = rank_and_axis1(x);
    if (!ra && w) ra = std::make_pair(w->rank(), w->dim(0));
    if (!ra) return miss("the conv output's channel count is unknown");
    std::string why;
    auto v = per_axis_values(c, ra->first, 1, ra->second, "channel", &why);
    if (!v) return miss(why);
    ChannelAffine a;
    a.scale.assign(v->size(), 1.0);
    a.shift.assign(v->size(), 0.0);
    (is_mul ? a.scale : a.shift) = *v;
    r_.rewrote(describe(conv) + " + " + describe(op) + " -> " + describe(conv) + " (per-channel " +
                   (is_mul ? "scale folded into its weight and bias)" : "shift folded into its bias)"),
               {conv->name, op->name}, conv->name);
    fold_into_conv(g_, conv, a, x->type.dtype);
    absorb(conv, op);
    return true;
  }

  /// Gemm -> Mul(c), c per feature (output axis 1): B's features and C scaled, β' = 1.
  bool gemm_mul(Node* p, Node* op, Value* x, const Tensor& c) {
    what_ = describe(p) + " -> " + describe(op) + " not folded";
    if (!common_guards(p, x)) return false;
    int64_t n = 0;
    if (!gemm_weight(p, x, &n)) return false;
    std::string why;
    auto scale = per_axis_values(c, 2, 1, n, "feature", &why);
    if (!scale) return miss(why);
    r_.rewrote(describe(p) + " + " + describe(op) + " -> Gemm '" + p->name +
                   "' (per-feature scale folded into its weight and C)",
               {p->name, op->name}, p->name);
    fold_into_gemm(g_, p, n, &*scale, Addend2D{}, x->type.dtype);  // a zero shift
    absorb(p, op);
    return true;
  }

  /// MatMul [-> Add(bias)] [-> Transpose] -> Mul(c): c folds into W's columns and the bias (see top).
  bool matmul_scale(Node* mul, Value* x, const Tensor& c) {
    Node* keep = x->producer;  // the node that will write the Mul's output
    Value* y = x;
    std::vector<int64_t> perm;
    if (is_op(keep, "Transpose")) {
      y = keep->input(0);
      perm = keep->attr_ints("perm");
    }
    const auto lin = linear_before(y);
    if (!lin) return false;
    Node *mm = lin->mm, *add = lin->add;
    const Tensor *w = lin->w, *bias = lin->bias;
    Value* t = lin->product;
    if (!chain_guards(describe(mm) + " -> " + describe(mul) + " not folded", {t, y, x})) return false;
    const size_t rank = t->type.shape ? t->type.shape->size() : 0;
    if (rank < 1 || (!perm.empty() && perm.size() != rank))
      return miss("the product's rank is unknown, or the Transpose's perm does not match it");
    // The axis of x that the product's last axis lands on (a Transpose without perm reverses).
    size_t axis = rank - 1;
    const bool transposed = keep != add && keep != mm;
    if (transposed) {
      axis = perm.empty() ? 0 : std::find(perm.begin(), perm.end(), int64_t(rank - 1)) - perm.begin();
      if (axis >= rank) return miss("the Transpose's perm does not name the product's last axis");
    }
    const int64_t n = w->dim(1);
    std::string why;
    auto scale = per_axis_values(c, rank, axis, n, "feature", &why);
    if (!scale) return miss(why);
    std::optional<std::vector<double>> b;
    if (bias && !(b = per_axis_values(*bias, rank, rank - 1, n, "feature", &why))) return miss("the bias: " + why);
    r_.rewrote(describe(mm) + (add ? " + " + describe(add) : "") + (transposed ? " + " + describe(keep) : "") + " + " +
                   describe(mul) + " -> the same without the Mul (per-feature scale folded into the weight" +
                   (add ? " and bias)" : ")"),
               {mm->name, mul->name}, mm->name);
    g_.set_input(mm, 1,
                 g_.add_initializer(stem_of(mm) + ".W_folded", scaled(*w, [&](int64_t i) { return (*scale)[i % n]; })));
    if (add) {
      std::vector<double> nb(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) nb[j] = (*b)[j] * (*scale)[j];
      g_.set_input(add, lin->bias_at,
                   g_.add_initializer(stem_of(add) + ".B_folded", tensor_from(bias->dtype(), {n}, nb)));
    }
    absorb(keep, mul);
    return true;
  }

  bool gemm_add(Node* p, Node* op, Value* x, const Tensor& c) {
    if (is_op(p, "MatMul")) {
      // Only a 2-D x 2-D MatMul is a Gemm, and only a BN after the bias makes it ours (see top).
      if (!sole_consumer_of(op->outputs[0], "BatchNormalization") || !constant_of(p->input(1))) return false;
      const Value* a = p->input(0);
      const Value* b = p->input(1);
      if (!a->type.shape || a->type.shape->size() != 2 || !b->type.shape || b->type.shape->size() != 2) return false;
    }
    what_ = describe(p) + " -> " + describe(op) + " not folded";
    if (!common_guards(p, x)) return false;
    if (!x->type.shape || x->type.shape->size() != 2 || !(*x->type.shape)[1].is_static())
      return miss("the output's feature count is unknown");
    if (p->input(2) && !constant_of(p->input(2))) return miss("Gemm's C '" + p->input(2)->name + "' is not a constant");
    std::string why;
    auto shift = gemm_addend(x, c, &why);
    if (!shift) return miss(why);
    r_.rewrote(describe(p) + " + " + describe(op) + " -> Gemm '" + p->name + "' (bias folded into C)",
               {p->name, op->name}, p->name);
    fold_into_gemm(g_, p, (*x->type.shape)[1].value, nullptr, *shift, x->type.dtype);
    absorb(p, op);
    return true;
  }

  Rewriter& r_;
  Graph& g_;
  std::string what_;
};

}  // namespace

bool FoldBatchNormPass::run(Graph& g, PassContext& ctx) {
  Rewriter r(g, ctx, kPass);
  Folder f(r);
  // Each rewrite removes only the node being visited (the BN/Mul/Add) and edits its producer in
  // place, so the snapshot stays valid; a chain Conv -> BN -> Mul -> Add folds in one sweep.
  for (Node* n : g.node_list()) {
    if (is_op(n, "BatchNormalization"))
      f.batchnorm(n);
    else if (is_op(n, "Mul") || is_op(n, "Add"))
      f.mul_or_add(n);
  }
  return r.changed();
}

}  // namespace fusec

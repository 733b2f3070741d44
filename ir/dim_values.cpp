#include "ir/dim_values.h"

#include "ir/op_schema.h"

#include <algorithm>
#include <functional>
#include <string>

namespace fusec {

DimValue DimValue::of(const Dim& d) {
  if (d.is_static()) return DimValue(d.value);
  DimValue e;
  e.symbol = d.symbol;
  return e;
}

namespace {
constexpr const char* kTimes = "\xC2\xB7";  // U+00B7, between the factors of a product's symbol
}  // namespace

std::optional<DimProduct> product_of(const Dim& d) {
  DimProduct p;
  if (d.is_static()) {
    p.coef = d.value;
    return p;
  }
  if (d.symbol.empty()) return std::nullopt;
  const std::string sep = kTimes;
  size_t at = 0;
  while (true) {
    const size_t next = d.symbol.find(sep, at);
    const std::string f = d.symbol.substr(at, next == std::string::npos ? std::string::npos : next - at);
    if (!f.empty() && std::all_of(f.begin(), f.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) && f.size() < 18)
      p.coef *= std::stoll(f);
    else
      p.names.push_back(f);
    if (next == std::string::npos) break;
    at = next + sep.size();
  }
  std::sort(p.names.begin(), p.names.end());
  return p;
}

Dim dim_of(const DimProduct& p) {
  if (p.names.empty() || p.coef == 0) return Dim(p.coef);
  std::string s = p.coef == 1 ? "" : std::to_string(p.coef);
  for (const std::string& n : p.names) s += (s.empty() ? "" : kTimes) + n;
  return Dim::sym(s);
}

std::optional<DimProduct> times(const DimProduct& a, const DimProduct& b) {
  DimProduct p;
  if (__builtin_mul_overflow(a.coef, b.coef, &p.coef)) return std::nullopt;
  if (p.coef == 0) return p;
  p.names = a.names;
  p.names.insert(p.names.end(), b.names.begin(), b.names.end());
  std::sort(p.names.begin(), p.names.end());
  return p;
}

std::optional<DimProduct> divided(const DimProduct& a, const DimProduct& b) {
  if (b.coef == 0 || a.coef % b.coef != 0) return std::nullopt;
  DimProduct p;
  p.coef = a.coef / b.coef;
  std::vector<std::string> rest = a.names;
  for (const std::string& n : b.names) {
    auto it = std::find(rest.begin(), rest.end(), n);
    if (it == rest.end()) return std::nullopt;
    rest.erase(it);
  }
  p.names = std::move(rest);
  return p;
}

std::optional<std::vector<DimValue>> dims_value_of(const Tensor& t) {
  if ((t.dtype() != DType::Int64 && t.dtype() != DType::Int32) || t.dims().size() > 1 ||
      static_cast<size_t>(t.numel()) > kMaxDimsValue)
    return std::nullopt;
  std::vector<DimValue> out;
  for (int64_t v : t.to_int64_vector()) out.push_back(DimValue(v));
  return out;
}

namespace {

using Dims = std::vector<DimValue>;

/// Input i's elements: from its value where known, else from what inference carried.
std::optional<Dims> operand(const InferContext& c, size_t i) {
  if (!c.has_input(i)) return std::nullopt;
  if (const Tensor* t = c.input_value(i)) return dims_value_of(*t);
  if (const Dims* d = c.input_dims_value(i)) return *d;
  return std::nullopt;
}

/// A known input's integers (indices, axes, starts...).
std::optional<std::vector<int64_t>> ints(const InferContext& c, size_t i) {
  if (!c.has_input(i)) return std::nullopt;
  const Tensor* t = c.input_value(i);
  if (!t || (t->dtype() != DType::Int64 && t->dtype() != DType::Int32)) return std::nullopt;
  return t->to_int64_vector();
}

size_t rank_of(const InferContext& c, size_t i) {
  const auto& s = c.input_shape(i);
  return s ? s->size() : 2;  // unknown: not a shape vector
}

bool same_symbol(const DimValue& a, const DimValue& b) { return a.named() && b.named() && a.symbol == b.symbol; }

// One element of a binary op. Static operands compute; a dim (symbolic, so never negative) passes
// through the identities (x * 1, x + 0, x - 0, x / 1) and compares unequal to a negative number.
DimValue binary(const std::string& op, const DimValue& a, const DimValue& b) {
  if (a.known() && b.known()) {
    const int64_t x = *a.value, y = *b.value;
    if (op == "Add") return DimValue(x + y);
    if (op == "Sub") return DimValue(x - y);
    if (op == "Mul") return DimValue(x * y);
    if (op == "Div") return y != 0 ? DimValue(x / y) : DimValue();  // ONNX integer Div truncates
    if (op == "Equal") return DimValue(x == y ? 1 : 0);
    if (op == "Max") return DimValue(std::max(x, y));
    if (op == "Min") return DimValue(std::min(x, y));
    return DimValue();
  }
  const bool a1 = a.known(), b1 = b.known();
  // Products and exact quotients of dims stay dims (DimProduct): B * 12 is the dim "12·B".
  auto as_product = [](const DimValue& e) -> std::optional<DimProduct> {
    if (e.known()) return *e.value >= 0 ? std::optional<DimProduct>(DimProduct{*e.value, {}}) : std::nullopt;
    return e.named() ? product_of(Dim::sym(e.symbol)) : std::nullopt;
  };
  auto as_value = [](const DimProduct& p) {
    const Dim d = dim_of(p);
    DimValue e = DimValue::of(d);
    return e;
  };
  if (op == "Mul") {
    if (a1 && *a.value == 1) return b;
    if (b1 && *b.value == 1) return a;
    if ((a1 && *a.value == 0) || (b1 && *b.value == 0)) return DimValue(0);
    auto pa = as_product(a), pb = as_product(b);
    if (pa && pb)
      if (auto p = times(*pa, *pb)) return as_value(*p);
  } else if (op == "Div" && !(b1 && *b.value == 1)) {
    auto pa = as_product(a), pb = as_product(b);
    if (pa && pb)
      if (auto p = divided(*pa, *pb)) return as_value(*p);
  } else if (op == "Add") {
    if (a1 && *a.value == 0) return b;
    if (b1 && *b.value == 0) return a;
  } else if (op == "Sub" || op == "Div") {
    if (b1 && *b.value == (op == "Sub" ? 0 : 1)) return a;
  } else if (op == "Equal") {
    if (same_symbol(a, b)) return DimValue(1);
    // A dim is never negative: a named one differs from every negative number.
    if ((a1 && *a.value < 0 && b.named()) || (b1 && *b.value < 0 && a.named())) return DimValue(0);
  } else if (op == "Max" || op == "Min") {
    if (same_symbol(a, b)) return a;
  }
  return DimValue();
}

/// Elements of an element-wise op over operands of rank 0 or 1 (a length-1 operand broadcasts).
std::optional<Dims> elementwise(const InferContext& c, size_t n_in, const std::function<DimValue(const Dims&)>& f) {
  std::vector<Dims> ops;
  size_t len = 1;
  for (size_t i = 0; i < n_in; ++i) {
    auto d = operand(c, i);
    if (!d || rank_of(c, i) > 1) return std::nullopt;
    if (d->size() != 1) {
      if (len != 1 && len != d->size()) return std::nullopt;
      len = d->size();
    }
    ops.push_back(std::move(*d));
  }
  Dims out;
  for (size_t e = 0; e < len; ++e) {
    Dims at;
    for (const Dims& d : ops) at.push_back(d.size() == 1 ? d[0] : d[e]);
    out.push_back(f(at));
  }
  return out;
}

/// Python-style slice bounds over n elements (ONNX Slice semantics for one axis).
std::optional<Dims> slice(const Dims& d, int64_t start, int64_t end, int64_t step) {
  const int64_t n = static_cast<int64_t>(d.size());
  if (step == 0) return std::nullopt;
  auto clamp = [&](int64_t v, int64_t lo, int64_t hi) { return std::max(lo, std::min(hi, v)); };
  if (start < 0) start += n;
  if (end < 0) end += n;
  Dims out;
  if (step > 0) {
    start = clamp(start, 0, n);
    end = clamp(end, 0, n);
    for (int64_t i = start; i < end; i += step) out.push_back(d[i]);
  } else {
    start = clamp(start, -1, n - 1);
    end = clamp(end, -1, n - 1);
    for (int64_t i = start; i > end; i += step) out.push_back(d[i]);
  }
  return out;
}

int64_t attr_or(const InferContext& c, const char* name, int64_t def) {
  return c.schema().find_attr(name) && c.has_attr(name) ? c.attr_int(name) : def;
}

std::optional<Dims> infer(const InferContext& c) {
  const std::string& op = c.node().op_type;
  if (!c.node().domain.empty() && c.node().domain != "ai.onnx") return std::nullopt;
  if (op == "Shape") {
    const auto& s = c.input_shape(0);
    if (!s) return std::nullopt;
    const int64_t r = static_cast<int64_t>(s->size());
    Dims dims;
    for (const Dim& d : *s) dims.push_back(DimValue::of(d));
    return slice(dims, attr_or(c, "start", 0), attr_or(c, "end", r), 1);
  }
  if (op == "Identity") return operand(c, 0);
  if (op == "Cast") {
    const int64_t to = c.attr_int("to");
    if (to != static_cast<int64_t>(DType::Int64) && to != static_cast<int64_t>(DType::Int32)) return std::nullopt;
    return operand(c, 0);
  }
  if (op == "Unsqueeze" || op == "Squeeze" || op == "Reshape") {
    // Between a scalar and a one-element vector, or a vector kept whole: the elements stay.
    auto d = operand(c, 0);
    if (!d || rank_of(c, 0) > 1) return std::nullopt;
    if (op == "Unsqueeze" && rank_of(c, 0) != 0) return std::nullopt;
    return d;
  }
  if (op == "Gather") {
    auto d = operand(c, 0);
    auto idx = ints(c, 1);
    if (!d || !idx || rank_of(c, 0) != 1 || attr_or(c, "axis", 0) != 0) return std::nullopt;
    Dims out;
    const int64_t n = static_cast<int64_t>(d->size());
    for (int64_t i : *idx) {
      if (i < -n || i >= n) return std::nullopt;
      out.push_back((*d)[i < 0 ? i + n : i]);
    }
    return out;
  }
  if (op == "Slice") {
    auto d = operand(c, 0);
    if (!d || rank_of(c, 0) != 1) return std::nullopt;
    std::optional<std::vector<int64_t>> starts, ends, axes, steps;
    if (c.opset() < 10) {
      starts = c.attr_ints("starts"), ends = c.attr_ints("ends");
      if (c.has_attr("axes")) axes = c.attr_ints("axes");
    } else {
      starts = ints(c, 1), ends = ints(c, 2);
      if (c.has_input(3)) axes = ints(c, 3);
      if (c.has_input(4)) steps = ints(c, 4);
      if ((c.has_input(3) && !axes) || (c.has_input(4) && !steps)) return std::nullopt;
    }
    if (!starts || !ends || starts->size() != 1 || ends->size() != 1) return std::nullopt;
    if (axes && (axes->size() != 1 || ((*axes)[0] != 0 && (*axes)[0] != -1))) return std::nullopt;
    return slice(*d, (*starts)[0], (*ends)[0], steps ? (steps->size() == 1 ? (*steps)[0] : 0) : 1);
  }
  if (op == "Concat") {
    const int64_t axis = c.attr_int("axis");
    if (axis != 0 && axis != -1) return std::nullopt;
    Dims out;
    for (size_t i = 0; i < c.num_inputs(); ++i) {
      if (rank_of(c, i) != 1) return std::nullopt;
      auto d = operand(c, i);
      if (!d) {  // nothing known of this part: as many unknown elements as its length
        const Dim& len = (*c.input_shape(i))[0];
        if (!len.is_static() || len.value > static_cast<int64_t>(kMaxDimsValue)) return std::nullopt;
        d = Dims(static_cast<size_t>(len.value));
      }
      out.insert(out.end(), d->begin(), d->end());
    }
    return out;
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Equal" ||
      ((op == "Max" || op == "Min") && c.num_inputs() == 2))
    return elementwise(c, 2, [&](const Dims& e) { return binary(op, e[0], e[1]); });
  if (op == "Where")
    return elementwise(c, 3, [](const Dims& e) {
      if (!e[0].known()) return e[1] == e[2] ? e[1] : DimValue();
      return *e[0].value != 0 ? e[1] : e[2];
    });
  return std::nullopt;
}

}  // namespace

std::optional<std::vector<DimValue>> infer_dims_value(const InferContext& c) {
  auto d = infer(c);
  if (!d || d->size() > kMaxDimsValue) return std::nullopt;
  for (const DimValue& x : *d)
    if (x.known() || x.named()) return d;
  return std::nullopt;  // nothing known of any element
}

}  // namespace fusec

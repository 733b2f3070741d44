#include "ir/ops/elementwise_program.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "ir/op_schema.h"

namespace fusec {

const std::vector<EwOpInfo>& ew_ops() {
  static const std::vector<EwOpInfo> ops = {
      {EwOp::Add, "add", 2},
      {EwOp::Sub, "sub", 2},
      {EwOp::Mul, "mul", 2},
      {EwOp::Div, "div", 2},
      {EwOp::Pow, "pow", 2},
      {EwOp::Max, "max", 2},
      {EwOp::Min, "min", 2},
      {EwOp::Neg, "neg", 1},
      {EwOp::Abs, "abs", 1},
      {EwOp::Exp, "exp", 1},
      {EwOp::Log, "log", 1},
      {EwOp::Sqrt, "sqrt", 1},
      {EwOp::Reciprocal, "reciprocal", 1},
      {EwOp::Erf, "erf", 1},
      {EwOp::Tanh, "tanh", 1},
      {EwOp::Sigmoid, "sigmoid", 1},
      {EwOp::Relu, "relu", 1},
      {EwOp::Softplus, "softplus", 1},
      {EwOp::Floor, "floor", 1},
      {EwOp::Ceil, "ceil", 1},
      {EwOp::HardSwish, "hard_swish", 1},
      {EwOp::Gelu, "gelu", 1},
      {EwOp::GeluTanh, "gelu_tanh", 1},
      {EwOp::LeakyRelu, "leaky_relu", 2},
      {EwOp::HardSigmoid, "hard_sigmoid", 3},
      {EwOp::Clip, "clip", 3},
  };
  return ops;
}

const EwOpInfo& ew_op_info(EwOp op) { return ew_ops()[static_cast<size_t>(op)]; }

std::optional<EwOp> ew_op_from_name(std::string_view name) {
  for (const auto& o : ew_ops())
    if (name == o.name) return o.op;
  return std::nullopt;
}

std::string format_ew_literal(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  // The shortest of %.6g..%.9g that reads back as the same float.
  for (int prec = 6; prec <= 9; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return buf;
}

namespace {

std::string operand_str(const EwOperand& a) {
  switch (a.kind) {
    case EwOperand::Kind::Input:
      return "i" + std::to_string(a.index);
    case EwOperand::Kind::Register:
      return "r" + std::to_string(a.index);
    case EwOperand::Kind::Literal:
      return format_ew_literal(a.value);
  }
  return "?";
}

std::vector<std::string> split_statements(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : text) {
    if (ch == ';' || ch == '\n') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  out.push_back(cur);
  return out;
}

std::vector<std::string> tokens_of(const std::string& stmt) {
  std::vector<std::string> t;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty()) t.push_back(cur);
    cur.clear();
  };
  for (char ch : stmt) {
    if (ch == ' ' || ch == '\t' || ch == '\r') {
      flush();
    } else if (ch == '=') {
      flush();
      t.emplace_back("=");
    } else {
      cur += ch;
    }
  }
  flush();
  return t;
}

/// "r12" / "i3" -> 12 / 3 when `s` is `prefix` followed by decimal digits only.
std::optional<int32_t> numbered(const std::string& s, char prefix) {
  if (s.size() < 2 || s[0] != prefix || s.size() > 10) return std::nullopt;
  int64_t v = 0;
  for (size_t i = 1; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    v = v * 10 + (s[i] - '0');
  }
  if (s.size() > 2 && s[1] == '0') return std::nullopt;  // no leading zeros: one spelling per name
  return static_cast<int32_t>(v);
}

std::optional<float> literal(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char c = s[0];
  bool starts_ok = (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || s == "inf" || s == "nan";
  if (!starts_ok) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  float v = std::strtof(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  // strtof sets ERANGE on overflow (±HUGE_VALF) and on underflow; a literal must be a float as written.
  if (errno == ERANGE && std::isinf(v)) return std::nullopt;
  return v;
}

}  // namespace

std::string ElementwiseProgram::to_string() const {
  std::string s;
  for (size_t k = 0; k < code.size(); ++k) {
    const EwOpInfo& info = ew_op_info(code[k].op);
    if (k) s += "; ";
    s += "r" + std::to_string(k) + " = " + info.name;
    for (int a = 0; a < info.arity; ++a) s += " " + operand_str(code[k].args[a]);
  }
  return s;
}

std::optional<ElementwiseProgram> parse_elementwise_program(const std::string& text, int num_inputs,
                                                            std::string* error) {
  auto fail = [&](const std::string& what) -> std::optional<ElementwiseProgram> {
    if (error) *error = what;
    return std::nullopt;
  };
  if (num_inputs < 1) return fail("a program needs at least one input");
  ElementwiseProgram p;
  p.num_inputs = num_inputs;
  std::vector<bool> input_used(static_cast<size_t>(num_inputs), false);
  for (const std::string& stmt : split_statements(text)) {
    std::vector<std::string> t = tokens_of(stmt);
    if (t.empty()) continue;
    const int32_t k = static_cast<int32_t>(p.code.size());
    std::string where = "instruction " + std::to_string(k) + " ('" + stmt + "'): ";
    if (p.code.size() >= kEwMaxInstructions)
      return fail("more than " + std::to_string(kEwMaxInstructions) + " instructions");
    if (t.size() < 3 || t[1] != "=") return fail(where + "expected 'r" + std::to_string(k) + " = opcode operands...'");
    auto dst = numbered(t[0], 'r');
    if (!dst || *dst != k)
      return fail(where + "defines '" + t[0] + "'; instruction " + std::to_string(k) + " must define r" +
                  std::to_string(k) + " (registers are numbered in order, each defined once)");
    auto op = ew_op_from_name(t[2]);
    if (!op) {
      std::string all;
      for (const auto& o : ew_ops()) all += (all.empty() ? "" : " ") + std::string(o.name);
      return fail(where + "unknown opcode '" + t[2] + "' (the opcodes are: " + all + ")");
    }
    const EwOpInfo& info = ew_op_info(*op);
    if (static_cast<int>(t.size()) - 3 != info.arity)
      return fail(where + "'" + info.name + "' takes " + std::to_string(info.arity) + " operand(s), got " +
                  std::to_string(t.size() - 3));
    EwInstr ins{*op, {}};
    for (int a = 0; a < info.arity; ++a) {
      const std::string& s = t[3 + static_cast<size_t>(a)];
      if (auto r = numbered(s, 'r')) {
        if (*r >= k) return fail(where + "reads '" + s + "' before it is defined");
        ins.args[a] = EwOperand::reg(*r);
      } else if (auto i = numbered(s, 'i')) {
        if (*i >= num_inputs)
          return fail(where + "reads '" + s + "' but the node has " + std::to_string(num_inputs) + " input(s)");
        input_used[static_cast<size_t>(*i)] = true;
        ins.args[a] = EwOperand::input(*i);
      } else if (auto v = literal(s)) {
        ins.args[a] = EwOperand::literal(*v);
      } else {
        return fail(where + "operand '" + s + "' is not an input (i0..), a register (r0..) or a float literal");
      }
    }
    p.code.push_back(ins);
  }
  if (p.code.empty()) return fail("the program has no instructions");
  for (int i = 0; i < num_inputs; ++i)
    if (!input_used[static_cast<size_t>(i)])
      return fail("input i" + std::to_string(i) + " is never read (every input must be an operand)");
  return p;
}

ElementwiseProgram elementwise_program_of(const NodeAttrs& node, int num_inputs) {
  std::string error;
  auto p = parse_elementwise_program(node.attr_string("program"), num_inputs, &error);
  if (!p) node.fail("bad program: " + error);
  return std::move(*p);
}

}  // namespace fusec

// The expression language of ai.fusec FusedElementwise: a straight-line SSA program over the
// node's inputs (i0, i1, ...) and float literals, evaluated in float32 per output element.
//
//   r0 = add i0 i1; r1 = mul r0 0.5; r2 = erf r1        (the last register is the output)
//
// Grammar, opcodes and exact semantics: docs/fused_elementwise.md. One parser serves shape
// inference, the CPU interpreter and the CUDA code generator, so a program is validated the same
// way everywhere; the opcodes' scalar functions are backend/formulas.h's, which both backends call.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fusec {

class NodeAttrs;

enum class EwOp : uint8_t {
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Max,
  Min,  // binary
  Neg,
  Abs,
  Exp,
  Log,
  Sqrt,
  Reciprocal,
  Erf,
  Tanh,
  Sigmoid,  // unary
  Relu,
  Softplus,
  Floor,
  Ceil,
  HardSwish,
  Gelu,
  GeluTanh,   // unary
  LeakyRelu,  // x alpha
  HardSigmoid,
  Clip,  // x alpha beta / x lo hi
};

struct EwOpInfo {
  EwOp op;
  const char* name;  // as written in programs: "add", "leaky_relu", ...
  int arity;         // operands, parameters included
};

/// Every opcode, in EwOp order.
const std::vector<EwOpInfo>& ew_ops();
const EwOpInfo& ew_op_info(EwOp op);
std::optional<EwOp> ew_op_from_name(std::string_view name);

struct EwOperand {
  enum class Kind : uint8_t { Input, Register, Literal };
  Kind kind = Kind::Literal;
  int32_t index = 0;  // input number (Input) or register number (Register)
  float value = 0;    // Literal

  static EwOperand input(int32_t i) { return {Kind::Input, i, 0}; }
  static EwOperand reg(int32_t r) { return {Kind::Register, r, 0}; }
  static EwOperand literal(float v) { return {Kind::Literal, 0, v}; }
};

constexpr int kEwMaxArity = 3;
/// Programs longer than this are rejected (the fusion pass splits regions to stay below it).
constexpr size_t kEwMaxInstructions = 1024;

struct EwInstr {
  EwOp op;
  std::array<EwOperand, kEwMaxArity> args{};  // the first ew_op_info(op).arity are used
};

struct ElementwiseProgram {
  int num_inputs = 0;
  std::vector<EwInstr> code;  // instruction k defines register rk; the last register is the output

  /// Canonical text ("r0 = add i0 i1; r1 = relu r0"); parses back to the same program.
  std::string to_string() const;
};

/// A float literal as programs write it: the shortest "%.9g" form, which round-trips every float
/// ("0.5", "1e-05", "-inf", "nan").
std::string format_ew_literal(float v);

/// Parses and validates a program for a node with `num_inputs` inputs. On failure returns nullopt
/// and sets `error` to what is wrong and where ("instruction 3 ('r3 = foo r1'): unknown opcode 'foo'").
std::optional<ElementwiseProgram> parse_elementwise_program(const std::string& text, int num_inputs,
                                                            std::string* error);

/// The node's `program` attribute parsed for its `num_inputs` inputs; fails naming the node.
ElementwiseProgram elementwise_program_of(const NodeAttrs& node, int num_inputs);

}  // namespace fusec

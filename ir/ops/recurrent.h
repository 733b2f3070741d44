// RNN, GRU and LSTM: attributes and activation functions, shared by the schemas
// (ir/ops/recurrent.cpp) and the CPU kernel (backend/cpu/kernels/recurrent.cpp).
#pragma once
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "ir/op_schema.h"

namespace fusec::recurrent {

enum class Cell { Rnn, Gru, Lstm };

/// One of the ONNX recurrent activation functions, with its alpha and beta.
struct Activation {
  enum class Kind {
    Relu,
    Tanh,
    Sigmoid,
    Affine,
    LeakyRelu,
    ThresholdedRelu,
    ScaledTanh,
    HardSigmoid,
    Elu,
    Softsign,
    Softplus
  };
  Kind kind = Kind::Tanh;
  double alpha = 0, beta = 0;

  double operator()(double x) const {
    switch (kind) {
      case Kind::Relu:
        return x > 0 ? x : 0;
      case Kind::Tanh:
        return std::tanh(x);
      case Kind::Sigmoid:
        return 1 / (1 + std::exp(-x));
      case Kind::Affine:
        return alpha * x + beta;
      case Kind::LeakyRelu:
        return x >= 0 ? x : alpha * x;
      case Kind::ThresholdedRelu:
        return x > alpha ? x : 0;
      case Kind::ScaledTanh:
        return alpha * std::tanh(beta * x);
      case Kind::HardSigmoid:
        return std::clamp(alpha * x + beta, 0.0, 1.0);
      case Kind::Elu:
        return x >= 0 ? x : alpha * (std::exp(x) - 1);
      case Kind::Softsign:
        return x / (1 + std::fabs(x));
      case Kind::Softplus:
        return std::log1p(std::exp(-std::fabs(x))) + std::max(x, 0.0);
    }
    return x;
  }
};

struct Config {
  Cell cell = Cell::Rnn;
  int64_t gates = 1;                 // rows of W per hidden unit: 1 (RNN), 3 (GRU: z, r, h), 4 (LSTM: i, o, f, c)
  int64_t directions = 1;            // 2 when bidirectional
  bool reverse = false;              // direction "reverse" (a single direction walking the sequence backwards)
  int64_t hidden = -1;               // hidden_size, or -1 when the attribute is absent (then R's shape says)
  bool batch_major = false;          // layout 1: X [batch, seq, input], states [batch, directions, hidden]
  double clip = 0;                   // > 0: gate inputs clamped to [-clip, clip]
  bool linear_before_reset = false;  // GRU
  bool input_forget = false;         // LSTM: the forget gate is 1 - the input gate
  std::vector<Activation> acts;      // per direction: 1 (RNN), 2 (GRU: f, g) or 3 (LSTM: f, g, h)
};

inline Cell cell_of(const std::string& op) { return op == "GRU" ? Cell::Gru : op == "LSTM" ? Cell::Lstm : Cell::Rnn; }

/// The node's configuration; anything fusec cannot run or ONNX does not allow is a BadInput naming
/// the node.
inline Config configure(const NodeAttrs& a, int64_t opset) {
  Config c;
  c.cell = cell_of(a.node().op_type);
  c.gates = c.cell == Cell::Rnn ? 1 : c.cell == Cell::Gru ? 3 : 4;
  const std::string dir = a.attr_string("direction");
  if (dir == "bidirectional")
    c.directions = 2;
  else if (dir == "reverse")
    c.reverse = true;
  else if (dir != "forward")
    a.fail("direction '" + dir + "' is not one of forward, reverse, bidirectional");
  if (a.has_attr("hidden_size")) {
    c.hidden = a.attr_int("hidden_size");
    if (c.hidden <= 0) a.fail("hidden_size must be positive, got " + std::to_string(c.hidden));
  }
  if (opset >= 14) {
    const int64_t layout = a.attr_int("layout");
    if (layout != 0 && layout != 1) a.fail("layout must be 0 or 1, got " + std::to_string(layout));
    c.batch_major = layout == 1;
  }
  if (a.has_attr("clip")) {
    c.clip = a.attr_float("clip");
    if (!(c.clip > 0)) a.fail("clip must be positive, got " + std::to_string(c.clip));
  }
  if (c.cell == Cell::Gru) c.linear_before_reset = a.attr_int("linear_before_reset") != 0;
  if (c.cell == Cell::Lstm) c.input_forget = a.attr_int("input_forget") != 0;

  const size_t per_dir = c.cell == Cell::Rnn ? 1 : c.cell == Cell::Gru ? 2 : 3;
  std::vector<std::string> names;
  if (const Attribute* v = a.node().find_attr("activations")) {
    // (checked against the schema's Strings kind on import; NodeAttrs has no strings accessor)
    if (const auto* list = std::get_if<std::vector<std::string>>(&v->value)) names = *list;
  }
  if (names.empty()) {
    const std::vector<std::string> defaults = c.cell == Cell::Rnn ? std::vector<std::string>{"Tanh"}
                                              : c.cell == Cell::Gru
                                                  ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                  : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
    for (int64_t d = 0; d < c.directions; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  }
  if (names.size() != per_dir * static_cast<size_t>(c.directions))
    a.fail("activations lists " + std::to_string(names.size()) + " functions; " + a.node().op_type + " with " +
           std::to_string(c.directions) + " direction(s) needs " + std::to_string(per_dir * c.directions));
  const std::vector<float> alphas =
      a.has_attr("activation_alpha") ? a.attr_floats("activation_alpha") : std::vector<float>{};
  const std::vector<float> betas =
      a.has_attr("activation_beta") ? a.attr_floats("activation_beta") : std::vector<float>{};
  size_t next_alpha = 0, next_beta = 0;
  using K = Activation::Kind;
  for (const std::string& raw : names) {
    std::string n = raw;
    std::transform(n.begin(), n.end(), n.begin(), [](unsigned char ch) { return std::tolower(ch); });
    struct Known {
      const char* name;
      K kind;
      bool alpha, beta;
      double alpha0, beta0;
    };
    static const Known known[] = {{"relu", K::Relu, false, false, 0, 0},
                                  {"tanh", K::Tanh, false, false, 0, 0},
                                  {"sigmoid", K::Sigmoid, false, false, 0, 0},
                                  {"affine", K::Affine, true, true, 1, 0},
                                  {"leakyrelu", K::LeakyRelu, true, false, 0.01, 0},
                                  {"thresholdedrelu", K::ThresholdedRelu, true, false, 1, 0},
                                  {"scaledtanh", K::ScaledTanh, true, true, 1, 1},
                                  {"hardsigmoid", K::HardSigmoid, true, true, 0.2, 0.5},
                                  {"elu", K::Elu, true, false, 1, 0},
                                  {"softsign", K::Softsign, false, false, 0, 0},
                                  {"softplus", K::Softplus, false, false, 0, 0}};
    const Known* k = nullptr;
    for (const Known& e : known)
      if (n == e.name) k = &e;
    if (!k) a.fail("activation '" + raw + "' is not one of ONNX's recurrent activation functions");
    Activation act{k->kind, k->alpha0, k->beta0};
    // Alphas and betas are taken in order by the functions that have them.
    if (k->alpha && next_alpha < alphas.size()) act.alpha = alphas[next_alpha++];
    if (k->beta && next_beta < betas.size()) act.beta = betas[next_beta++];
    c.acts.push_back(act);
  }
  return c;
}

}  // namespace fusec::recurrent

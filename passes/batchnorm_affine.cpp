// The per-channel affine map an inference BatchNormalization computes, shared by the passes that
// fold it into a neighbour (fold_batchnorm: a Conv/Gemm's weights; fuse_elementwise: an elementwise
// region's program).
#include "passes/batchnorm_affine.h"

#include <algorithm>
#include <cmath>

#include "ir/error.h"
#include "ir/half.h"
#include "passes/pattern.h"

namespace fusec {

bool all_finite(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

Tensor tensor_from(DType dt, std::vector<int64_t> dims, const std::vector<double>& v) {
  Tensor t(dt, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (dt) {
      case DType::Float32:
        t.data<float>()[i] = static_cast<float>(v[i]);
        break;
      case DType::Float64:
        t.data<double>()[i] = v[i];
        break;
      case DType::Float16:
        t.data<uint16_t>()[i] = float_to_half(static_cast<float>(v[i]));
        break;
      case DType::BFloat16:
        t.data<uint16_t>()[i] = float_to_bf16(static_cast<float>(v[i]));
        break;
      default:
        internal_error(std::string("fold_batchnorm: cannot write ") + dtype_name(dt));
    }
  }
  return t;
}

/// BatchNormalization (inference) as y = x·s + t per channel, or nullopt with `why`.
std::optional<ChannelAffine> batchnorm_affine(const Graph& g, const Node* bn, int64_t channels, std::string* why) {
  if (bn->attr_int("training_mode", 0) != 0) {
    *why = "it is in training mode (training_mode=1): it normalizes with batch statistics";
    return std::nullopt;
  }
  for (size_t i = 1; i < bn->outputs.size(); ++i)
    if (bn->outputs[i] && use_count(bn->outputs[i]) > 0) {
      *why = "its statistics output '" + bn->outputs[i]->name + "' is used (training)";
      return std::nullopt;
    }
  if (g.opset("") < 9 && bn->attr_int("spatial", 1) != 1) {
    *why = "spatial=0: its statistics are per element, not per channel";
    return std::nullopt;
  }
  static const char* kNames[] = {"scale", "B", "mean", "var"};
  const Tensor* p[4];
  std::string missing;
  for (int i = 0; i < 4; ++i) {
    p[i] = constant_of(bn->input(i + 1));
    if (!p[i]) missing += (missing.empty() ? "" : ", ") + std::string(kNames[i]);
  }
  if (!missing.empty()) {
    *why = "its " + missing + (missing.find(',') == std::string::npos ? " is" : " are") + " not constant";
    return std::nullopt;
  }
  for (int i = 0; i < 4; ++i)
    if (p[i]->numel() != channels) {
      *why = std::string("its ") + kNames[i] + " has shape " + dims_str(p[i]->dims()) + ", not [" +
             std::to_string(channels) + "] (one per channel)";
      return std::nullopt;
    }
  double eps = bn->attr_float("epsilon", 1e-5f);
  ChannelAffine a;
  for (int64_t c = 0; c < channels; ++c) {
    double s = p[0]->as_double(c) / std::sqrt(p[3]->as_double(c) + eps);
    a.scale.push_back(s);
    a.shift.push_back(p[1]->as_double(c) - p[2]->as_double(c) * s);
  }
  if (!all_finite(a.scale) || !all_finite(a.shift)) {
    *why = "scale/√(var+ε) is not finite for some channel (var + epsilon <= 0?)";
    return std::nullopt;
  }
  return a;
}

}  // namespace fusec

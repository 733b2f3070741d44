// How the op registries (ir/op_schema.h, backend/cpu/kernel.h, backend/cuda/core/cuda_op.h) name
// an op's domain. ONNX spells the default domain both "" and "ai.onnx"; every registry keys its
// entries by the canonical spelling, so a lookup with either finds the same entry, and the
// registry-agreement tests (tests/ir/test_registry_agreement.cpp, tests/gpu/...) can compare the
// three tables key by key.
#pragma once
#include <string>
#include <string_view>

namespace fusec {

/// The canonical spelling of an op domain: "" for the default domain ("" or "ai.onnx"), any other
/// domain unchanged.
inline std::string canonical_domain(std::string_view domain) {
  return domain == "ai.onnx" ? std::string() : std::string(domain);
}

}  // namespace fusec

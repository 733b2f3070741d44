// Host-side code generator for elementwise nodes: turns one node (a standard elementwise op, an
// activation, or ai.fusec FusedElementwise) into CUDA C that NVRTC compiles (nvrtc_module.h).
// Three steps, each testable without a GPU:
//
//   describe_elementwise     node + attributes + storage dtypes -> EwFunction: the per-element
//                            body (C statements over x0..xk, assigning y), shape-free
//   plan_elementwise_launch  + static dims -> EwLaunchPlan: dims coalesced, each argument
//                            classified (full / scalar / broadcast-mapped), vector width
//   generate_elementwise_source  -> the .cu text with its extern "C" kernels
//
// One source per (body, storage dtypes, argument classes, coalesced rank, index width, vector
// width). Dims and strides are kernel parameters, not baked-in constants, so a model's many
// shapes share a handful of kernels (one NVRTC compile each, then the disk cache); the per-dim
// divisions of the broadcast path use precomputed multiply-shift divisors (32-bit indices), which
// makes them about as cheap as constant divisors.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/op_schema.h"
#include "ir/tensor.h"

namespace fusec::cuda {

/// One input or output of a node as the generator sees it (mirrors PlanValue).
struct EwValue {
  bool present = false;
  DType dtype = DType::Undefined;       // device storage dtype
  DType onnx_dtype = DType::Undefined;  // the model's dtype
  std::vector<int64_t> dims;
  const Tensor* constant = nullptr;
};

/// What one output element is, independent of shapes. Kernel argument k reads node input
/// inputs[k] (CastLike's target and absent optional inputs are not arguments).
struct EwFunction {
  std::vector<size_t> inputs;
  std::vector<std::vector<int64_t>> dims;  // per argument (legacy-broadcast / PRelu slopes reshaped)
  std::vector<DType> dtypes;               // per argument, storage
  std::vector<bool> raw;                   // body sees the storage value itself (no widening)
  std::string y_type;                      // C type of y
  bool y_is_storage = false;               // y already holds the output's storage bits
  std::string body;                        // C statements reading x0.., assigning y
  int num_ops = 1;
  std::string label;  // "Add", "FusedElementwise"
  /// The body may find bad data (an integer divisor of 0 known only at run time): the kernels then
  /// take a last parameter, the DeviceErrorSite (device_error.h) they report it to.
  bool reports_errors = false;
};

/// Nullopt with *why when this node/dtype/attribute combination has no generated kernel.
std::optional<EwFunction> describe_elementwise(const NodeAttrs& node, int64_t opset, const std::vector<EwValue>& inputs,
                                               const EwValue& output, std::string* why);

enum class EwArgKind { Full, Scalar, Mapped };

struct EwLaunchPlan {
  int64_t numel = 0;
  std::vector<EwArgKind> kinds;  // per argument
  bool linear = true;            // no Mapped argument: index everything by the output index
  int rank = 0;                  // coalesced rank (Mapped only)
  bool index64 = false;          // Mapped only: 64-bit index arithmetic (numel >= 2^31)
  int vec = 1;                   // elements per thread step in the fast kernel (16-byte accesses)
  /// Index parameter blocks (Mapped only): dims[rank], magic[rank], shift[rank], then rank
  /// strides per Mapped argument. `params` is for the fast kernel (the innermost dim counted in
  /// vectors of `vec`), `params_scalar` for the one-element fallback.
  std::vector<int64_t> params, params_scalar;
};

/// Nullopt with *why when the dims cannot be handled (rank above 8 after coalescing, or inputs
/// that do not broadcast to the output's dims).
std::optional<EwLaunchPlan> plan_elementwise_launch(const EwFunction& f, DType out_dtype,
                                                    const std::vector<int64_t>& out_dims, std::string* why);

struct EwSource {
  std::string code;
  /// kernels[0]: the fast kernel (vectorized when plan.vec > 1), kernels[1]: the one-element
  /// kernel for misaligned pointers (the same as [0] when vec == 1).
  std::vector<std::string> kernels;
};

EwSource generate_elementwise_source(const EwFunction& f, const EwLaunchPlan& plan, DType out_dtype);

/// 32-bit division by d as q = (umulhi(n, magic) + n) >> shift, exact for n, d < 2^31.
struct FastDivider {
  uint32_t magic = 0, shift = 0;
};
FastDivider fast_divider(uint32_t d);

/// C type of a storage dtype in generated code ("float", "unsigned short" for float16, ...).
const char* ew_storage_ctype(DType t);

/// Whether the generated kernel of this op widens every float input to float32 as it loads it, so
/// that its inputs may be stored in different float types (fp16 beside float32): arithmetic, not
/// selection (Where copies storage values) or casts.
bool ew_widens_float_inputs(const std::string& domain, const std::string& op);

}  // namespace fusec::cuda

// --device, --gpu, --precision, --cuda-graph, --strict, --max-device-memory: how run/bench/optimize
// pick a backend.
// Default device: cuda when this build has the CUDA backend and a usable GPU is present, else
// cpu; the choice and why are printed.
#pragma once
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/precision.h"

namespace fusec::cli {

struct DeviceOptions {
  std::string device = "auto";
  int gpu = 0;
  std::string precision = "fp32";
  std::string cuda_graph = "on";
  bool strict = false;
  std::string max_device_memory;  // empty: the GPU's free memory is the limit

  /// Adds the flags; `with_graph` adds --cuda-graph (run/bench), `with_strict` adds --strict.
  void add_to(CLI::App& app, bool with_graph = true, bool with_strict = true);
};

struct ResolvedDevice {
  bool cuda = false;
  Precision precision = Precision::FP32;
  std::string description;  // "cuda:0 NVIDIA H100 80GB HBM3 (sm_90)" or "cpu (2 threads)"
  std::string why;          // how auto chose, or empty when the user named the device
};

/// Validates the flags and picks the device; BadInput for cuda without a GPU (saying why), a
/// precision the CPU backend does not run, a build without CUDA, or a bad value.
ResolvedDevice resolve_device(const DeviceOptions& o);

/// For a CUDA executable: "57 nodes on the GPU, 2 folded at plan time" or "... 3 on the CPU:
/// name (Op: why), ..."; empty for the CPU backend.
std::string placement_summary(const Executable& exe);
/// A node whose engine build kept its parts over a one-kernel candidate that timed slower on this
/// GPU (NodePlacement::device_decision).
struct DeviceDecision {
  std::string node, op_type, decision;
};
/// Every such node of a GPU executable, in plan order (none for the CPU).
std::vector<DeviceDecision> device_decisions(const Executable& exe);

/// The backend for a resolved device.
std::unique_ptr<Backend> make_backend(const DeviceOptions& o, const ResolvedDevice& d);

}  // namespace fusec::cli

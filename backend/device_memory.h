// The device-memory guard: what one compiled model will hold on a GPU, compared with the GPU's free
// memory and with --max-device-memory before anything is allocated, tuned or generated, so a model
// or batch that cannot fit fails in seconds with one error naming both byte counts.
//
// Host-side arithmetic only (no CUDA here): the CUDA backend feeds it cudaMemGetInfo's numbers,
// and tests/ir/test_device_memory.cpp runs it on machines without a GPU.
//
// Why the check must come first: `fusec bench resnet50_small.onnx --device cuda --batch 20000000`
// would spend minutes making a 246 GB random input on the host before the GPU is asked for
// anything. The same check refuses a tensor past 32-bit sizes (batch 2,000,000 of that model: its
// 49.2 GB fit an 80 GB card, but its input has 6.1e9 elements and cuDNN stops at 2^31 - 1), which
// otherwise failed in cuDNN after those minutes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/precision.h"
#include "ir/graph.h"

namespace fusec {

/// Device bytes of one compiled model, by what holds them.
struct DeviceMemoryNeed {
  size_t activations = 0;  // intermediates (the arena): the most bytes live at one step
  size_t weights = 0;      // initializers read at run time, in the run precision's storage type
  size_t io = 0;           // graph input buffers, in the model's types
  size_t workspace = 0;    // library and kernel scratch (known once the kernels are planned)

  /// The device-held tensor with the most elements: cuDNN's descriptors and cuBLAS's sizes are
  /// 32-bit, so a tensor past kMaxDeviceTensorElements cannot run even where its bytes fit.
  int64_t largest_elements = 0;
  std::string largest_value;  // its name
  std::string largest_where;  // " (output of node 'x', op Conv)", or "" for a graph input

  /// The sum, saturating at SIZE_MAX (a 2^63-byte shape must not wrap to a small number).
  size_t total() const;
};

/// The most elements one tensor may have on the GPU (INT32_MAX: cuDNN tensor descriptors and
/// cuBLAS's m/n/k/ld are int).
constexpr int64_t kMaxDeviceTensorElements = 2147483647;

/// A lower bound of what the CUDA backend will allocate for `g` at `p`, from the shapes alone,
/// before any kernel is planned: the peak of live intermediates (views such as Reshape share
/// their input's bytes; values computed from constants are folded and not counted), the
/// initializers that nodes read, and the input buffers. No workspace. Values whose shape is not
/// static are left out, so a model whose shapes wait for its inputs is under-counted, never
/// over-counted: the exact check after planning catches the rest.
DeviceMemoryNeed estimate_device_memory(const Graph& g, Precision p);

/// What the GPU can give: cudaMemGetInfo's free and total bytes, and the user's cap (0: none).
struct DeviceMemoryLimit {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  size_t cap = 0;        // --max-device-memory; 0 when not given
  std::string device;    // "cuda:0 NVIDIA H100 80GB HBM3", for the message
  size_t limit() const;  // the smaller of free_bytes and cap (when given)
};

/// Empty when `need` fits `lim` and no tensor is past kMaxDeviceTensorElements; otherwise the one-line error, e.g. "the
/// model needs 612.34 GiB (657489231872 bytes) of device memory (activations ..., weights ..., inputs ...), but cuda:0
/// has 78.91 GiB (84729675776 bytes) free of 79.19 GiB (--max-device-memory SIZE caps it lower)".
/// `what` names the thing that needs it ("the model", "the plan").
std::string device_memory_shortfall(const DeviceMemoryNeed& need, const DeviceMemoryLimit& lim,
                                    const std::string& what);

/// Throws BadInput with device_memory_shortfall's message when `need` does not fit.
void check_device_memory(const DeviceMemoryNeed& need, const DeviceMemoryLimit& lim, const std::string& what);

}  // namespace fusec

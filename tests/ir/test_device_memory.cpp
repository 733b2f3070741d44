// The device-memory guard's arithmetic (backend/device_memory.h), without a GPU: the estimate a
// plan is checked against before anything is tuned or allocated, and the one error a model that
// does not fit gets.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "backend/device_memory.h"
#include "importer/onnx_import.h"
#include "ir/error.h"
#include "ir/graph_builder.h"
#include "passes/infer_shapes.h"

using namespace fusec;

namespace {

constexpr size_t kGiB = size_t{1} << 30;

std::string shortfall_error(const DeviceMemoryNeed& need, const DeviceMemoryLimit& lim) {
  try {
    check_device_memory(need, lim, "the model");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// x [n, 1024] float32 -> Relu -> Relu -> Relu -> y.
std::unique_ptr<Graph> relu_chain(int64_t n) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Dim(n), Dim(1024)});
  b.output(b.node("Relu", {b.node("Relu", {b.node("Relu", {x})})}));
  auto g = b.build();
  infer_shapes(*g);
  return g;
}

}  // namespace

TEST(DeviceMemoryGuard, TotalSaturatesInsteadOfWrapping) {
  DeviceMemoryNeed n;
  n.activations = SIZE_MAX - 10;
  n.weights = 100;
  EXPECT_EQ(n.total(), SIZE_MAX);
  n = {1, 2, 3, 4};
  EXPECT_EQ(n.total(), 10u);
}

TEST(DeviceMemoryGuard, TheLimitIsTheSmallerOfFreeMemoryAndTheCap) {
  DeviceMemoryLimit lim;
  lim.free_bytes = 10 * kGiB;
  lim.total_bytes = 16 * kGiB;
  EXPECT_EQ(lim.limit(), 10 * kGiB);  // no cap
  lim.cap = 4 * kGiB;
  EXPECT_EQ(lim.limit(), 4 * kGiB);
  lim.cap = 12 * kGiB;
  EXPECT_EQ(lim.limit(), 10 * kGiB);  // a cap above what is free does not make memory
}

TEST(DeviceMemoryGuard, ANeedThatFitsExactlyPasses) {
  DeviceMemoryLimit lim{1000, 2000, 0, "cuda:0 Test GPU"};
  DeviceMemoryNeed need{600, 300, 100, 0};
  EXPECT_EQ(device_memory_shortfall(need, lim, "the model"), "");
  need.workspace = 1;
  EXPECT_NE(device_memory_shortfall(need, lim, "the model"), "");
}

TEST(DeviceMemoryGuard, TheErrorNamesTheBytesNeededAndTheBytesFree) {
  DeviceMemoryLimit lim{kGiB, 2 * kGiB, 0, "cuda:0 Test GPU"};
  DeviceMemoryNeed need{2 * kGiB, kGiB / 2, kGiB / 2, 0};
  const std::string m = shortfall_error(need, lim);
  EXPECT_TRUE(has(m, "the model needs 3.00 GiB (3221225472 bytes) of device memory")) << m;
  EXPECT_TRUE(has(m, "activations 2.00 GiB, weights 512.00 MiB, inputs 512.00 MiB")) << m;
  EXPECT_TRUE(has(m, "cuda:0 Test GPU has 1.00 GiB (1073741824 bytes) free of 2.00 GiB")) << m;
  EXPECT_FALSE(has(m, "workspace")) << m;  // not known before planning: not mentioned
}

TEST(DeviceMemoryGuard, ACapBelowFreeMemoryIsNamedAsTheLimit) {
  DeviceMemoryLimit lim{8 * kGiB, 16 * kGiB, kGiB, "cuda:0 Test GPU"};
  DeviceMemoryNeed need{kGiB, 0, 1, 4096};
  const std::string m = shortfall_error(need, lim);
  EXPECT_TRUE(has(m, "needs 1.00 GiB (1073745921 bytes)")) << m;
  EXPECT_TRUE(has(m, "workspace 4.00 KiB")) << m;
  EXPECT_TRUE(has(m, "--max-device-memory is 1.00 GiB (1073741824 bytes)")) << m;
  EXPECT_TRUE(has(m, "has 8.00 GiB (8589934592 bytes) free")) << m;
}

TEST(DeviceMemoryEstimate, AChainHoldsTwoIntermediatesAtATime) {
  auto g = relu_chain(256);
  const size_t t = 256 * 1024 * 4;
  DeviceMemoryNeed n = estimate_device_memory(*g, Precision::FP32);
  EXPECT_EQ(n.io, t);               // x
  EXPECT_EQ(n.activations, 2 * t);  // a Relu's input and output
  EXPECT_EQ(n.weights, 0u);
  EXPECT_EQ(n.workspace, 0u);
}

TEST(DeviceMemoryEstimate, HalfPrecisionStoresFloatsInTwoBytes) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Dim(64), Dim(256)});
  Value* w = b.initializer("w", Tensor(DType::Float32, {256, 512}));
  b.output(b.node("MatMul", {x, w}));
  auto g = b.build();
  infer_shapes(*g);
  DeviceMemoryNeed fp32 = estimate_device_memory(*g, Precision::FP32);
  DeviceMemoryNeed fp16 = estimate_device_memory(*g, Precision::FP16);
  EXPECT_EQ(fp32.weights, 256u * 512 * 4);
  EXPECT_EQ(fp16.weights, 256u * 512 * 2);
  EXPECT_EQ(fp32.io, 64u * 256 * 4);
  EXPECT_EQ(fp16.io, 64u * 256 * 4);  // the host copies float32 in, the device converts it
  EXPECT_EQ(fp32.activations, 64u * 512 * 4);
  // fp16: x converted (64x256x2) lives while the product (64x512x2) is made; then the product and
  // the float32 output buffer it is converted into (64x512x4) are live together.
  EXPECT_EQ(fp16.activations, 64u * 512 * 2 + 64u * 512 * 4);
}

TEST(DeviceMemoryEstimate, ViewsShareBytesAndFoldedValuesCostNothing) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Dim(128), Dim(1024)});
  Value* r = b.node("Relu", {x});
  Value* shape = b.node("Shape", {r});  // folded at plan time
  Value* flat = b.node("Reshape", {r, shape});
  Value* table = b.initializer("table", Tensor(DType::Float32, {1 << 20}));
  b.node("Neg", {table});  // every input constant: folded, never on the device
  b.output(b.node("Relu", {flat}));
  auto g = b.build();
  infer_shapes(*g);
  DeviceMemoryNeed n = estimate_device_memory(*g, Precision::FP32);
  const size_t t = 128 * 1024 * 4;
  EXPECT_EQ(n.activations, 2 * t);
  EXPECT_EQ(n.weights, 0u);
}

TEST(DeviceMemoryEstimate, AHugeBatchIsRefusedFromTheShapesAloneInMilliseconds) {
  // The model: resnet50_small, 12,288 bytes of input and 12,288 bytes of live
  // intermediates per image (the CPU backend's planned arena says the same). At batch 2,000,000
  // that is 49.2 GB: its bytes fit an 80 GB H100 (not an 8 GiB cap), but its input has 6.1e9
  // elements, past what cuDNN can describe; at 20,000,000 it fits nowhere.
  auto path = std::filesystem::path(FUSEC_SOURCE_DIR) / "models" / "resnet50_small.onnx";
  auto at_batch = [&](int64_t batch) {
    auto g = import_onnx_file(path.string());
    ShapeBindings bind;
    bind.batch = batch;
    bind_input_shapes(*g, bind);
    infer_shapes(*g);
    return g;
  };
  const DeviceMemoryLimit h100{size_t{79} * kGiB, size_t{80} * kGiB, 0, "cuda:0 NVIDIA H100 80GB HBM3"};
  auto g = at_batch(2000000);
  const auto t0 = std::chrono::steady_clock::now();
  DeviceMemoryNeed n = estimate_device_memory(*g, Precision::FP32);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, 1000.0);
  EXPECT_EQ(n.io, size_t{2000000} * 3 * 32 * 32 * 4);  // 24.6 GB of input
  EXPECT_EQ(n.activations, size_t{2000000} * 12288);   // and as much live at the peak
  std::string m = shortfall_error(n, h100);
  EXPECT_TRUE(has(m, "the model needs 45.78 GiB (49152479744 bytes) of device memory and cuda:0")) << m;
  EXPECT_TRUE(has(m, "but tensor 'input' has 6144000000 elements")) << m;
  EXPECT_EQ(device_memory_shortfall(estimate_device_memory(*at_batch(699050), Precision::FP32), h100, "the model"), "");
  DeviceMemoryLimit capped = h100;
  capped.cap = 8 * kGiB;
  m = shortfall_error(n, capped);
  EXPECT_TRUE(has(m, "the model needs 45.78 GiB (49152")) << m;
  EXPECT_TRUE(has(m, "--max-device-memory is 8.00 GiB (8589934592 bytes)")) << m;

  DeviceMemoryNeed huge = estimate_device_memory(*at_batch(20000000), Precision::FP32);
  m = shortfall_error(huge, h100);
  EXPECT_TRUE(has(m, "the model needs 457.")) << m;
  EXPECT_TRUE(has(m, " bytes) of device memory")) << m;
  EXPECT_TRUE(has(m, "has 79.00 GiB (84825604096 bytes) free of 80.00 GiB")) << m;

  EXPECT_EQ(device_memory_shortfall(estimate_device_memory(*at_batch(16), Precision::FP32), h100, "the model"), "");
}

TEST(DeviceMemoryEstimate, ATensorPastThirtyTwoBitSizesIsRefusedEvenWhereItsBytesFit) {
  // cuDNN descriptors and cuBLAS sizes are int: 2^21 + 1 rows of 1024 is 2^31 + 1024 elements.
  auto g = relu_chain((int64_t{1} << 21) + 1);
  DeviceMemoryNeed n = estimate_device_memory(*g, Precision::FP32);
  EXPECT_EQ(n.largest_elements, (int64_t{1} << 31) + 1024);
  DeviceMemoryLimit lim;
  lim.free_bytes = 80 * kGiB;
  lim.total_bytes = 80 * kGiB;
  lim.device = "cuda:0 Test GPU";
  ASSERT_LE(n.total(), lim.limit());
  const std::string m = shortfall_error(n, lim);
  EXPECT_TRUE(has(m, "the model needs ")) << m;
  EXPECT_TRUE(has(m, " bytes) of device memory and cuda:0 Test GPU has 80.00 GiB (85899345920 bytes) free")) << m;
  EXPECT_TRUE(has(m, "has 2147484672 elements, more than the 2147483647 one tensor may have")) << m;
  EXPECT_TRUE(has(m, "but tensor 'x' has ")) << m;  // the first tensor of the largest size
  // One row fewer than the limit's worth runs.
  auto ok = relu_chain((int64_t{1} << 21) - 1);
  EXPECT_EQ(shortfall_error(estimate_device_memory(*ok, Precision::FP32), lim), "");
}

// Weights converted and permuted on the device (ConstantUploader) against the host's own
// conversion: bit-exact, fp16 saturating, the channels-last filter order.
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/constant_upload.h"
#include "gpu_test_util.h"
#include "ir/half.h"

using namespace fusec;
using namespace fusec::test;

namespace {

std::vector<uint16_t> download16(const cuda::DeviceBuffer& b, size_t n) {
  std::vector<uint16_t> out(n);
  FUSEC_CUDA_CHECK(cudaMemcpy(out.data(), b.get(), n * 2, cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace

TEST(GpuConstantUpload, Fp16SaturatesAndRoundsAsTheHost) {
  FUSEC_REQUIRE_GPU();
  cuda::Context ctx;
  Tensor t = random_tensor(DType::Float32, {1000}, 5, -70000, 70000);
  float* p = t.data<float>();
  p[0] = 1e30f;
  p[1] = -3.4e38f;  // an exporter's "minus infinity" mask value: must stay finite
  p[2] = -std::numeric_limits<float>::infinity();
  p[3] = 1e-7f;  // an fp16 subnormal
  p[4] = 65519.0f;
  cuda::DeviceBuffer d(t.numel() * 2, "test");
  cuda::ConstantUploader up(ctx.stream());
  up.upload(t, d.get(), DType::Float16);
  up.finish();
  auto got = download16(d, t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    float v = p[i];
    if (std::isfinite(v)) v = std::min(65504.0f, std::max(-65504.0f, v));
    ASSERT_EQ(got[i], float_to_half(v)) << "element " << i << " = " << p[i];
  }
  EXPECT_EQ(got[1], float_to_half(-65504.0f));
  EXPECT_EQ(got[2], 0xfc00);  // -inf stays -inf
}

TEST(GpuConstantUpload, ChannelsLastFiltersAtEveryStorageType) {
  FUSEC_REQUIRE_GPU();
  cuda::Context ctx;
  const int64_t K = 5, C = 7, R = 3, S = 2;
  Tensor w = random_tensor(DType::Float32, {K, C, R, S}, 9);
  for (DType to : {DType::Float32, DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(to));
    const size_t es = dtype_size(to);
    cuda::DeviceBuffer d(w.numel() * es, "test");
    cuda::ConstantUploader up(ctx.stream());
    up.upload(w, d.get(), to, /*krsc=*/true);
    up.finish();
    std::vector<char> got(w.numel() * es);
    FUSEC_CUDA_CHECK(cudaMemcpy(got.data(), d.get(), got.size(), cudaMemcpyDeviceToHost));
    for (int64_t k = 0; k < K; ++k)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t s = 0; s < S; ++s)
          for (int64_t c = 0; c < C; ++c) {
            const float v = w.data<float>()[((k * C + c) * R + r) * S + s];
            const char* o = got.data() + (((k * R + r) * S + s) * C + c) * es;
            if (to == DType::Float32) {
              float f;
              std::memcpy(&f, o, 4);
              ASSERT_EQ(f, v);
            } else {
              uint16_t h;
              std::memcpy(&h, o, 2);
              ASSERT_EQ(h, to == DType::Float16 ? float_to_half(v) : float_to_bf16(v))
                  << k << " " << c << " " << r << " " << s;
            }
          }
  }
}

TEST(GpuConstantUpload, NonFloat32SourcesConvertOnTheHost) {
  FUSEC_REQUIRE_GPU();
  cuda::Context ctx;
  // A model stored in fp16, run at fp32 storage, as a channels-last filter: the host path.
  Tensor w32 = random_tensor(DType::Float32, {2, 3, 2, 2}, 11);
  Tensor w16(DType::Float16, w32.dims());
  for (int64_t i = 0; i < w32.numel(); ++i)
    reinterpret_cast<uint16_t*>(w16.raw())[i] = float_to_half(w32.data<float>()[i]);
  cuda::DeviceBuffer d(w16.numel() * 4, "test");
  cuda::ConstantUploader up(ctx.stream());
  up.upload(w16, d.get(), DType::Float32, /*krsc=*/true);
  up.finish();
  std::vector<float> got(w16.numel());
  FUSEC_CUDA_CHECK(cudaMemcpy(got.data(), d.get(), got.size() * 4, cudaMemcpyDeviceToHost));
  const int64_t C = 3, RS = 4;
  for (int64_t k = 0; k < 2; ++k)
    for (int64_t rs = 0; rs < RS; ++rs)
      for (int64_t c = 0; c < C; ++c)
        ASSERT_EQ(got[(k * RS + rs) * C + c], static_cast<float>(w16.as_double((k * C + c) * RS + rs)));
  // Integers go over as they are.
  Tensor ints(DType::Int64, {3});
  for (int i = 0; i < 3; ++i) ints.data<int64_t>()[i] = 1000000000000LL * (i + 1);
  cuda::DeviceBuffer di(24, "test");
  up.upload(ints, di.get(), DType::Int64);
  up.finish();
  int64_t back[3];
  FUSEC_CUDA_CHECK(cudaMemcpy(back, di.get(), 24, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(back[i], ints.data<int64_t>()[i]);
}

TEST(GpuConstantUpload, LargeConstantsGoInPieces) {
  FUSEC_REQUIRE_GPU();
  cuda::Context ctx;
  // Past the 64 MiB staging piece (16 Mi floats): three pieces, the last one short.
  const int64_t n = (int64_t{1} << 25) + 12345;
  Tensor t(DType::Float32, {n});
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(i % 4099) * 0.25f - 500.0f;
  cuda::DeviceBuffer d(n * 2, "test");
  cuda::ConstantUploader up(ctx.stream());
  up.upload(t, d.get(), DType::Float16);
  up.finish();
  auto got = download16(d, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], float_to_half(p[i])) << "element " << i;
}

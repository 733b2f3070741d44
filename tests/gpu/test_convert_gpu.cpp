// The precision-boundary conversion (launch_convert_float) against the host's rounding: every
// pair of float storage types, lengths with and without a tail past the vector width, and
// pointers off the vector alignment (the scalar path).
#include <cmath>
#include <cstring>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/convert.h"
#include "gpu_test_util.h"
#include "ir/half.h"

using namespace fusec;
using namespace fusec::test;

namespace {

/// Element i of a buffer of type t, as the host rounds it.
double host_value(DType t, const std::vector<unsigned char>& bytes, int64_t i) {
  switch (t) {
    case DType::Float64: {
      double v;
      std::memcpy(&v, bytes.data() + i * 8, 8);
      return v;
    }
    case DType::Float32: {
      float v;
      std::memcpy(&v, bytes.data() + i * 4, 4);
      return v;
    }
    default: {
      uint16_t h;
      std::memcpy(&h, bytes.data() + i * 2, 2);
      return t == DType::Float16 ? half_to_float(h) : bf16_to_float(h);
    }
  }
}

/// v rounded to t on the host, as element bytes.
void host_store(DType t, double v, unsigned char* out) {
  switch (t) {
    case DType::Float64:
      std::memcpy(out, &v, 8);
      break;
    case DType::Float32: {
      const float f = static_cast<float>(v);
      std::memcpy(out, &f, 4);
      break;
    }
    default: {
      const uint16_t h =
          t == DType::Float16 ? float_to_half(static_cast<float>(v)) : float_to_bf16(static_cast<float>(v));
      std::memcpy(out, &h, 2);
    }
  }
}

}  // namespace

TEST(GpuConvert, EveryFloatPairMatchesTheHostAtEveryLengthAndAlignment) {
  FUSEC_REQUIRE_GPU();
  const DType types[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64};
  for (DType from : types)
    for (DType to : types)
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{1001}, int64_t{65536 + 5}})
        for (int64_t offset : {0, 1}) {  // elements; 1 puts both pointers off a 16-byte boundary
          SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + dtype_name(to) + ", n " + std::to_string(n) +
                       ", offset " + std::to_string(offset));
          const size_t fs = dtype_size(from), ts = dtype_size(to);
          // Values exact in every type (halves up to 128, both signs: 8 significant bits, as many
          // as bfloat16 holds), so that each conversion has one right answer.
          std::vector<unsigned char> src((n + offset) * fs);
          for (int64_t i = 0; i < n + offset; ++i) host_store(from, ((i * 37) % 512 - 256) / 2.0, src.data() + i * fs);
          cuda::DeviceBuffer ds(src.size(), "test"), dd((n + offset) * ts, "test");
          FUSEC_CUDA_CHECK(cudaMemcpy(ds.get(), src.data(), src.size(), cudaMemcpyHostToDevice));
          FUSEC_CUDA_CHECK(cudaMemset(dd.get(), 0xff, (n + offset) * ts));
          auto* sp = static_cast<unsigned char*>(ds.get()) + offset * fs;
          auto* dp = static_cast<unsigned char*>(dd.get()) + offset * ts;
          ASSERT_TRUE(cuda::launch_convert_float(sp, from, dp, to, n, nullptr));
          FUSEC_CUDA_CHECK(cudaDeviceSynchronize());
          std::vector<unsigned char> got((n + offset) * ts);
          FUSEC_CUDA_CHECK(cudaMemcpy(got.data(), dd.get(), got.size(), cudaMemcpyDeviceToHost));
          for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(host_value(to, got, offset + i), host_value(from, src, offset + i)) << "element " << i;
          for (int64_t i = 0; i < offset; ++i)  // nothing written before the destination
            for (size_t b = 0; b < ts; ++b) ASSERT_EQ(got[i * ts + b], 0xff);
        }
}

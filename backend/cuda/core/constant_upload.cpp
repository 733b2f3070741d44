#include "backend/cuda/core/constant_upload.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cuda/core/check.h"
#include "ir/half.h"

namespace fusec::cuda {
namespace {

/// A filter's taps per (output, input) channel pair: R·S, or T·R·S for a 3-D conv.
int64_t filter_taps(const Tensor& w) {
  int64_t taps = 1;
  for (size_t i = 2; i < w.dims().size(); ++i) taps *= w.dims()[i];
  return taps;
}

/// The host path, for constants that are not float32: convert (fp16 saturating, as on the
/// device) and permute element by element.
std::vector<char> host_convert(const Tensor& t, DType to, bool krsc) {
  const int64_t n = t.numel();
  const size_t es = dtype_size(to);
  std::vector<char> out(static_cast<size_t>(n) * es);
  int64_t C = 1, RS = 1;
  if (krsc) {
    C = t.dims()[1];
    RS = filter_taps(t);
  }
  for (int64_t i = 0; i < n; ++i) {
    int64_t from = i;
    if (krsc) {
      const int64_t ch = i % C, kr = i / C;
      from = ((kr / RS) * C + ch) * RS + kr % RS;
    }
    const double v = t.as_double(from);
    char* o = out.data() + i * es;
    switch (to) {
      case DType::Float32: {
        float f = static_cast<float>(v);
        std::memcpy(o, &f, 4);
        break;
      }
      case DType::Float64:
        std::memcpy(o, &v, 8);
        break;
      case DType::Float16: {
        float f = static_cast<float>(v);
        if (std::isfinite(f)) f = std::min(65504.0f, std::max(-65504.0f, f));
        uint16_t h = float_to_half(f);
        std::memcpy(o, &h, 2);
        break;
      }
      case DType::BFloat16: {
        uint16_t h = float_to_bf16(static_cast<float>(v));
        std::memcpy(o, &h, 2);
        break;
      }
      default:
        internal_error(std::string("no constant conversion to ") + dtype_name(to));
    }
  }
  return out;
}

}  // namespace

ConstantUploader::~ConstantUploader() { cudaStreamSynchronize(stream_); }

void ConstantUploader::finish() { FUSEC_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void ConstantUploader::upload(const Tensor& host, void* dst, DType to, bool krsc) {
  const int64_t n = host.numel();
  if (n == 0) return;
  if (krsc && host.dims().size() != 4 && host.dims().size() != 5)
    internal_error("a channels-last filter upload needs 4-D or 5-D weights");
  if (host.dtype() == to && !krsc) {
    FUSEC_CUDA_CHECK(cudaMemcpyAsync(dst, host.raw(), host.nbytes(), cudaMemcpyHostToDevice, stream_));
    return;
  }
  const bool float_dst = to == DType::Float32 || to == DType::Float16 || to == DType::BFloat16 || to == DType::Float64;
  if (host.dtype() != DType::Float32 || !float_dst) {
    // Rare (a model stored in fp16, an integer constant): converted here, copied synchronously
    // so the temporary can go.
    std::vector<char> bytes = host_convert(host, to, krsc);
    FUSEC_CUDA_CHECK(cudaMemcpyAsync(dst, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream_));
    FUSEC_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return;
  }
  // A plain conversion goes in pieces of at most kStagingMax (BERT-base's 94 MB embedding table
  // need not be staged whole); a permutation needs the whole filter (a few MB).
  constexpr size_t kStagingMax = size_t{64} << 20;
  const int64_t piece = krsc ? n : std::max<int64_t>(1, static_cast<int64_t>(kStagingMax / sizeof(float)));
  const size_t staging_bytes = static_cast<size_t>(std::min(n, piece)) * sizeof(float);
  if (staging_.size() < staging_bytes) {
    finish();  // the old staging buffer may still feed a conversion
    staging_ = DeviceBuffer(staging_bytes, "the weight upload staging buffer");
  }
  const int64_t C = krsc ? host.dims()[1] : 0, RS = krsc ? filter_taps(host) : 0;
  const size_t out_es = dtype_size(to);
  for (int64_t at = 0; at < n; at += piece) {
    const int64_t count = std::min(piece, n - at);
    FUSEC_CUDA_CHECK(cudaMemcpyAsync(staging_.get(), host.data<float>() + at,
                                     static_cast<size_t>(count) * sizeof(float), cudaMemcpyHostToDevice, stream_));
    if (!launch_constant_from_f32(static_cast<const float*>(staging_.get()), static_cast<char*>(dst) + at * out_es, to,
                                  count, C, RS, stream_))
      internal_error(std::string("no device conversion of a float32 constant to ") + dtype_name(to));
  }
}

}  // namespace fusec::cuda

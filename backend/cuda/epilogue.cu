#include "backend/cuda/common.cuh"
#include "backend/cuda/epilogue.cuh"

namespace fusec::cuda {

namespace {

__device__ __forceinline__ float apply(float x, ActParams a) {
  switch (a.act) {
    case Act::None: return x;
    case Act::Relu: return x > 0.0f ? x : 0.0f;  // as the CPU reference: NaN -> 0
    case Act::LeakyRelu: return x >= 0.0f ? x : a.p0 * x;
    case Act::Clip: { float v = x < a.p0 ? a.p0 : x; return a.p1 < v ? a.p1 : v; }  // std::min(std::max()): NaN stays
    case Act::Sigmoid: return 1.0f / (1.0f + expf(-x));
    case Act::Tanh: return tanhf(x);
    case Act::HardSigmoid: return fmaxf(0.0f, fminf(1.0f, a.p0 * x + a.p1));
    case Act::HardSwish: return x * fmaxf(0.0f, fminf(1.0f, x / 6.0f + 0.5f));
    case Act::SiLU: return x * (1.0f / (1.0f + expf(-x)));
    case Act::Gelu: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case Act::GeluTanh: return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
  }
  return x;
}

template <typename T>
__global__ void epilogue_kernel(T* __restrict__ y, const T* __restrict__ z, const T* __restrict__ bias,
                                int64_t channels, int64_t inner, int64_t n, ActParams a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float v = to_compute(y[i]);
    // Same order as the reference: conv + bias first, then the residual, then the activation.
    if (bias) v += to_compute(bias[(i / inner) % channels]);
    if (z) v += to_compute(z[i]);
    y[i] = from_compute<T>(apply(v, a));
  }
}

}  // namespace

bool parse_activation(const std::string& name, const std::vector<float>& p, ActParams* out) {
  auto param = [&](size_t i, float def) { return i < p.size() ? p[i] : def; };
  ActParams a;
  if (name.empty()) a.act = Act::None;
  else if (name == "Relu") a.act = Act::Relu;
  else if (name == "LeakyRelu") a = {Act::LeakyRelu, param(0, 0.01f), 0};
  else if (name == "Clip") a = {Act::Clip, param(0, -INFINITY), param(1, INFINITY)};
  else if (name == "Sigmoid") a.act = Act::Sigmoid;
  else if (name == "Tanh") a.act = Act::Tanh;
  else if (name == "HardSigmoid") a = {Act::HardSigmoid, param(0, 0.2f), param(1, 0.5f)};
  else if (name == "HardSwish") a.act = Act::HardSwish;
  else if (name == "SiLU") a.act = Act::SiLU;
  else if (name == "Gelu") a.act = Act::Gelu;
  else if (name == "GeluTanh") a.act = Act::GeluTanh;
  else return false;
  *out = a;
  return true;
}

bool launch_epilogue(void* y, const void* z, DType t, int64_t n, ActParams act, cudaStream_t s,
                     const void* bias, int64_t channels, int64_t inner) {
  if (n == 0) return true;
  return dispatch_float_storage(t, [&](auto tag) {
    using T = decltype(tag);
    epilogue_kernel<T><<<grid_for(n), kBlock, 0, s>>>(static_cast<T*>(y), static_cast<const T*>(z),
                                                      static_cast<const T*>(bias), channels, inner, n, act);
    check_launch("epilogue_kernel");
  });
}

}  // namespace fusec::cuda

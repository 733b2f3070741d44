#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/elementwise/epilogue.cuh"
#include "backend/cuda/ops/elementwise/epilogue_act.cuh"

#include <iterator>

namespace fusec::cuda {

namespace {

template <typename T>
__global__ void epilogue_kernel(T* __restrict__ y, const T* __restrict__ z, const T* __restrict__ bias,
                                int64_t channels, int64_t inner, int64_t n, ActParams a) {
  pdl_wait_then_release();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float v = to_compute(y[i]);
    // Same order as the reference: conv + bias first, then the residual, then the activation.
    if (bias) v += to_compute(bias[(i / inner) % channels]);
    if (z) v += to_compute(z[i]);
    y[i] = from_compute<T>(apply_act(v, a));
  }
}

// Marks epilogue_pack_kernel's generic instance: the activation chosen at run time. The kernel
// takes the activation as an int because nvcc's generated host-side launch wrappers reject an
// enum-class template argument.
constexpr int kAnyAct = -1;

// The same epilogue, 16 bytes per access and 32-bit indices: the scalar kernel's 2-byte fp16
// loads and 64-bit index division made BERT's erf-GELU pass run far below the copy peak (fusec
// profile). Used when whole packs share their bias layout: bias along the innermost dim (inner ==
// 1) with channels a multiple of V, read as one pack, or one channel per pack. One instance per
// common activation (A), so that its formula is inlined with no per-element switch: with the
// switch and a 2-byte load per bias value, BERT's GELU pass and EfficientNet's SiLU passes ran at
// half the copy peak on the H200 (fusec profile).
template <typename T, int V, int A>
__global__ void epilogue_pack_kernel(T* __restrict__ y, const T* __restrict__ z, const T* __restrict__ bias,
                                     uint32_t channels, uint32_t inner, uint32_t packs, ActParams a) {
  pdl_wait_then_release();
  if constexpr (A != kAnyAct) a.act = static_cast<Act>(A);
  // Back to front: the producer (a GEMM, a conv) wrote the end of y last, so that part is the
  // likeliest to be still in L2 when the pass starts.
  for (uint32_t q = blockIdx.x * blockDim.x + threadIdx.x; q < packs; q += gridDim.x * blockDim.x) {
    const uint32_t p = packs - 1 - q;
    const uint32_t i = p * V;
    float v[V];
    load_vec<T, V>(y + i, v);
    // Same order as the reference: conv + bias first, then the residual, then the activation.
    if (bias) {
      float b[V];
      if (inner == 1) {
        load_vec<T, V>(bias + i % channels, b);  // channels % V == 0: the pack's V channels in a row
      } else {
        const float bc = to_compute(bias[(i / inner) % channels]);
#pragma unroll
        for (int k = 0; k < V; ++k) b[k] = bc;
      }
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] += b[k];
    }
    if (z) {
      float zv[V];
      load_vec<T, V>(z + i, zv);
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] += zv[k];
    }
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = apply_act(v[k], a);
    store_vec<T, V>(y + i, v);
  }
}

// FusedConv/FusedMatMul's `activation` names, indexed by Act ("" is none).
constexpr const char* kActNames[] = {"",          "Relu", "LeakyRelu", "Clip",    "Sigmoid", "Tanh", "HardSigmoid",
                                     "HardSwish", "SiLU", "Gelu",      "GeluTanh"};
static_assert(std::size(kActNames) == static_cast<size_t>(Act::GeluTanh) + 1);
}  // namespace

const char* activation_name(Act a) { return a == Act::None ? "none" : kActNames[static_cast<int>(a)]; }

bool parse_activation(const std::string& name, const std::vector<float>& p, ActParams* out) {
  auto param = [&](size_t i, float def) { return i < p.size() ? p[i] : def; };
  int found = -1;
  for (int i = 0; i < static_cast<int>(std::size(kActNames)); ++i)
    if (name == kActNames[i]) found = i;
  if (found < 0) return false;
  ActParams a;
  a.act = static_cast<Act>(found);
  // The CPU reference's defaults for the parameters the attribute leaves out.
  if (a.act == Act::LeakyRelu)
    a.p0 = param(0, 0.01f);
  else if (a.act == Act::Clip)
    a.p0 = param(0, -INFINITY), a.p1 = param(1, INFINITY);
  else if (a.act == Act::HardSigmoid)
    a.p0 = param(0, 0.2f), a.p1 = param(1, 0.5f);
  *out = a;
  return true;
}

bool launch_epilogue(void* y, const void* z, DType t, int64_t n, ActParams act, cudaStream_t s, const void* bias,
                     int64_t channels, int64_t inner) {
  if (n == 0) return true;
  return dispatch_float_storage(t, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = 16 / sizeof(T);
    const bool packs_fit = n % V == 0 && n / V <= INT32_MAX && aligned16(y) && (!z || aligned16(z)) &&
                           (!bias || (channels <= INT32_MAX && inner <= INT32_MAX &&
                                      ((inner == 1 && channels % V == 0 && aligned16(bias)) || inner % V == 0)));
    if (packs_fit) {
      const int64_t packs = n / V;
      void (*kernel)(T*, const T*, const T*, uint32_t, uint32_t, uint32_t, ActParams) =
          epilogue_pack_kernel<T, V, kAnyAct>;
      switch (act.act) {
        case Act::None:
          kernel = epilogue_pack_kernel<T, V, int(Act::None)>;
          break;
        case Act::Relu:
          kernel = epilogue_pack_kernel<T, V, int(Act::Relu)>;
          break;
        case Act::Sigmoid:
          kernel = epilogue_pack_kernel<T, V, int(Act::Sigmoid)>;
          break;
        case Act::HardSwish:
          kernel = epilogue_pack_kernel<T, V, int(Act::HardSwish)>;
          break;
        case Act::SiLU:
          kernel = epilogue_pack_kernel<T, V, int(Act::SiLU)>;
          break;
        case Act::Gelu:
          kernel = epilogue_pack_kernel<T, V, int(Act::Gelu)>;
          break;
        case Act::GeluTanh:
          kernel = epilogue_pack_kernel<T, V, int(Act::GeluTanh)>;
          break;
        default:
          break;
      }
      launch_pdl("epilogue_pack_kernel", kernel, dim3(grid_for(packs)), dim3(kBlock), 0, s, static_cast<T*>(y),
                 static_cast<const T*>(z), static_cast<const T*>(bias), static_cast<uint32_t>(channels),
                 static_cast<uint32_t>(inner), static_cast<uint32_t>(packs), act);
      return;
    }
    launch_pdl("epilogue_kernel", epilogue_kernel<T>, dim3(grid_for(n)), dim3(kBlock), 0, s, static_cast<T*>(y),
               static_cast<const T*>(z), static_cast<const T*>(bias), channels, inner, n, act);
  });
}

}  // namespace fusec::cuda

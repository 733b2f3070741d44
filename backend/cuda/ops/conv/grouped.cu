// The grouped conv's kernel (grouped.cuh): FMA, fp32 accumulation, the FusedConv epilogue.
//
// A block computes a patch of 8 output rows x TW columns (TW 16, or 8 where the wider patch's
// input would not fit shared memory) for one group and a slice of its output channels. It first
// stages the patch's input window, every input channel of the group, in shared memory (fp32,
// zero where the window falls in the padding): each input value is then read from DRAM once per
// block instead of once per tap and output channel. Beside it goes the block's slice of the
// weights (every tap and input channel, for its output channels) from the route's
// [G][R][S][Cg][Kg] copy. A thread computes CO output channels (8, or 4 for groups 4 wide) of PX
// pixels of a column, 8 / PX rows apart (the two configurations: PX 2 or 4, timed against each
// other and cuDNN): per input value it does PX·CO FMAs against CO weights, read as float4s. A
// warp's 32 threads hold 32 different pixels and the same channels, so their weight reads are one
// address (a shared-memory broadcast), and their input reads are 32 pixels at a stride of Cg | 1
// floats (odd: no bank conflict). The first version read the weights from L1 through __ldg: RegNetX
// ran its grouped convs at 4-10 TFLOP/s, waiting on those loads.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/conv/grouped.cuh"
#include "backend/cuda/ops/elementwise/epilogue_act.cuh"

namespace fusec::cuda {

namespace {

constexpr int kRows = 8;              // output rows a block: two halves of 4, a thread's pixel pair
constexpr int kMaxVectors = 4;        // channel vectors a block
constexpr int kMaxSmem = 160 * 1024;  // past this the block would hold an SM alone for one patch
constexpr int kWideSmem = 64 * 1024;  // a wider patch than this takes TW = 8

struct GcParams {
  const void* x;
  const float* w;
  const void* bias;
  const void* z;
  void* y;
  int h, w_in, c, k, cg, kg, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl;
  ActParams act;
  int tw, pr, pc, cs;      // patch columns; staged rows, columns and channel stride (floats)
  int wpatch;              // floats of the staged input patch: the weights' slice follows it
  int nv, chunks, groups;  // channel vectors a block, channel slices a group, groups
  int tiles_w, tiles_h;
};

int staged_rows(int rows, int stride, int k, int dil) { return (rows - 1) * stride + (k - 1) * dil + 1; }

int vector_width(const GroupedShape& s) { return s.kg % 8 == 0 ? 8 : 4; }
/// Output channels a block computes: up to kMaxVectors vectors of the group's.
int64_t block_channels(const GroupedShape& s) {
  const int co = vector_width(s);
  return std::min<int64_t>(kMaxVectors, s.kg / co) * co;
}

int64_t patch_floats(const GroupedShape& s, int tw) {
  const int64_t pr = (kRows - 1) * s.stride_h + (s.kh - 1) * s.dil_h + 1;
  const int64_t pc = (tw - 1) * s.stride_w + (s.kw - 1) * s.dil_w + 1;
  return pr * pc * (s.cg | 1);
}
/// The block's slice of the weights: every tap and input channel for its output channels.
int64_t weight_floats(const GroupedShape& s) { return s.kh * s.kw * s.cg * block_channels(s); }

int patch_width(const GroupedShape& s) { return patch_floats(s, 16) * 4 <= kWideSmem ? 16 : 8; }
/// Shared memory a block takes: the patch, rounded up to 16 bytes, then the weights' slice.
int64_t smem_bytes(const GroupedShape& s) {
  return ((patch_floats(s, patch_width(s)) + 3) / 4 * 4 + weight_floats(s)) * 4;
}

template <typename T, int CO, int PX>
__global__ void __launch_bounds__(256) grouped_conv_kernel(GcParams p) {
  pdl_wait_then_release();
  extern __shared__ float patch[];
  int b = blockIdx.x;
  const int chunk = b % p.chunks;
  b /= p.chunks;
  const int g = b % p.groups;
  b /= p.groups;
  const int tile_w = b % p.tiles_w;
  b /= p.tiles_w;
  const int tile_h = b % p.tiles_h;
  const int n = b / p.tiles_h;
  const int oh0 = tile_h * kRows, ow0 = tile_w * p.tw;

  // Stage the input window of the patch, the group's channels, as fp32.
  const T* x = static_cast<const T*>(p.x);
  const int ih0 = oh0 * p.sh - p.pt, iw0 = ow0 * p.sw - p.pl;
  const int staged = p.pr * p.pc * p.cg;
  for (int i = threadIdx.x; i < staged; i += blockDim.x) {
    const int c = i % p.cg, pix = i / p.cg;
    const int ih = ih0 + pix / p.pc, iw = iw0 + pix % p.pc;
    float v = 0.0f;
    if (ih >= 0 && ih < p.h && iw >= 0 && iw < p.w_in)
      v = to_compute(x[((static_cast<int64_t>(n) * p.h + ih) * p.w_in + iw) * p.c + g * p.cg + c]);
    patch[pix * p.cs + c] = v;
  }
  // The block's weights: [tap][c][its nv·CO channels], zero past the group's last channel.
  float* wsm = patch + p.wpatch;
  const int bc = p.nv * CO, cb0 = chunk * bc;
  const int wn = p.kh * p.kw * p.cg * bc;
  for (int i = threadIdx.x; i < wn; i += blockDim.x) {
    const int j = i % bc, tc = i / bc;  // tc: tap·cg + c
    wsm[i] = cb0 + j < p.kg ? __ldg(p.w + (static_cast<int64_t>(g) * p.kh * p.kw * p.cg + tc) * p.kg + cb0 + j) : 0.0f;
  }
  __syncthreads();

  constexpr int kStep = kRows / PX;  // rows between a thread's pixels
  const int pairs = p.tw * kStep;
  const int pp = threadIdx.x % pairs, vec = threadIdx.x / pairs;
  const int co = (chunk * p.nv + vec) * CO;
  if (co >= p.kg) return;
  const int px = pp % p.tw, py = pp / p.tw;  // pixels (py + i·kStep, px) of the patch, i < PX
  float acc[PX][CO];
#pragma unroll
  for (int i = 0; i < PX; ++i)
#pragma unroll
    for (int j = 0; j < CO; ++j) acc[i][j] = 0.0f;
  const int next = kStep * p.sh * p.pc * p.cs;  // from one of a thread's pixels to the next, in the patch
  for (int r = 0; r < p.kh; ++r)
    for (int s = 0; s < p.kw; ++s) {
      const float* x0 = patch + ((py * p.sh + r * p.dh) * p.pc + px * p.sw + s * p.dw) * p.cs;
      const float* wrow = wsm + (r * p.kw + s) * p.cg * bc + vec * CO;
#pragma unroll 4
      for (int c = 0; c < p.cg; ++c) {
        float wv[CO];
#pragma unroll
        for (int j = 0; j < CO; j += 4) {
          const float4 q = *reinterpret_cast<const float4*>(wrow + c * bc + j);
          wv[j] = q.x, wv[j + 1] = q.y, wv[j + 2] = q.z, wv[j + 3] = q.w;
        }
#pragma unroll
        for (int i = 0; i < PX; ++i) {
          const float a = x0[i * next + c];
#pragma unroll
          for (int j = 0; j < CO; ++j) acc[i][j] = fmaf(a, wv[j], acc[i][j]);
        }
      }
    }

  const int ch = g * p.kg + co;
  float bias[CO];
#pragma unroll
  for (int j = 0; j < CO; ++j) bias[j] = p.bias ? to_compute(static_cast<const T*>(p.bias)[ch + j]) : 0.0f;
#pragma unroll
  for (int i = 0; i < PX; ++i) {
    const int oh = oh0 + py + i * kStep, ow = ow0 + px;
    if (oh >= p.oh || ow >= p.ow) continue;
    const int64_t at = ((static_cast<int64_t>(n) * p.oh + oh) * p.ow + ow) * p.k + ch;
    Pack<T, CO> z{};
    if (p.z) z = *reinterpret_cast<const Pack<T, CO>*>(static_cast<const T*>(p.z) + at);
    Pack<T, CO> out;
#pragma unroll
    for (int j = 0; j < CO; ++j) {
      float v = acc[i][j] + bias[j];
      if (p.z) v += to_compute(z.v[j]);
      out.v[j] = from_compute<T>(apply_act(v, p.act));
    }
    *reinterpret_cast<Pack<T, CO>*>(static_cast<T*>(p.y) + at) = out;
  }
}

}  // namespace

const char* grouped_shape_refusal(const GroupedShape& s) {
  const int64_t c = s.groups * s.cg, k = s.groups * s.kg;
  for (int64_t v : {s.batch * s.h * s.w * c, s.batch * s.oh * s.ow * k, s.groups * s.kh * s.kw * s.cg * s.kg})
    if (v <= 0 || v > INT32_MAX) return "the grouped conv's tensors pass 32-bit indexing";
  if (s.stride_h < 1 || s.stride_w < 1 || s.dil_h < 1 || s.dil_w < 1 || s.stride_h > 4 || s.stride_w > 4)
    return "the grouped conv kernel takes strides 1 to 4";
  return nullptr;
}

const char* grouped_refusal(const GroupedShape& s, DType dtype) {
  if (dtype != DType::Float32 && dtype != DType::Float16 && dtype != DType::BFloat16)
    return "the grouped conv kernel takes float32, float16 and bfloat16";
  if (s.groups < 2 || s.cg < 1 || s.kg % 4 != 0) return "the grouped conv kernel wants groups of 4k output channels";
  if (const char* no = grouped_shape_refusal(s)) return no;
  if (smem_bytes(s) > kMaxSmem) return "the grouped conv's input patch and weights pass shared memory";
  return nullptr;
}

int grouped_config_count() { return 3; }
const char* grouped_config_name(int config) {
  return config == 0   ? "direct fma, 2 pixels a thread"
         : config == 1 ? "direct fma, 4 pixels a thread"
                       : "tensor cores, mma.sync m16n8k16";
}
const char* grouped_config_refusal(int config, const GroupedShape& s, DType dtype) {
  if (config < 0 || config >= grouped_config_count()) return "no such grouped conv configuration";
  return config == kGroupedMmaConfig ? grouped_mma_refusal(s, dtype) : grouped_refusal(s, dtype);
}

bool launch_grouped(const GroupedArgs& a, int config, cudaStream_t st) {
  const GroupedShape& s = a.s;
  if (config == kGroupedMmaConfig) return launch_grouped_mma(a, st);
  if (config < 0 || config >= grouped_config_count() || grouped_refusal(s, a.dtype)) return false;
  const int px = config == 0 ? 2 : 4;
  const int co = vector_width(s);
  const size_t pack = dtype_size(a.dtype) * co;
  for (const void* q : {a.x, static_cast<const void*>(a.y), a.z, a.bias})
    if (q && !aligned_to(q, q == a.x || q == a.bias ? dtype_size(a.dtype) : pack)) return false;
  if (!aligned_to(a.w, 16)) return false;
  GcParams p{};
  p.x = a.x, p.w = a.w, p.bias = a.bias, p.z = a.z, p.y = a.y;
  p.h = static_cast<int>(s.h), p.w_in = static_cast<int>(s.w);
  p.c = static_cast<int>(s.groups * s.cg), p.k = static_cast<int>(s.groups * s.kg);
  p.cg = static_cast<int>(s.cg), p.kg = static_cast<int>(s.kg);
  p.oh = static_cast<int>(s.oh), p.ow = static_cast<int>(s.ow);
  p.kh = static_cast<int>(s.kh), p.kw = static_cast<int>(s.kw);
  p.sh = static_cast<int>(s.stride_h), p.sw = static_cast<int>(s.stride_w);
  p.dh = static_cast<int>(s.dil_h), p.dw = static_cast<int>(s.dil_w);
  p.pt = static_cast<int>(s.pad_top), p.pl = static_cast<int>(s.pad_left);
  p.act = a.act;
  p.tw = patch_width(s);
  p.pr = staged_rows(kRows, p.sh, p.kh, p.dh), p.pc = staged_rows(p.tw, p.sw, p.kw, p.dw), p.cs = p.cg | 1;
  p.nv = static_cast<int>(block_channels(s) / co);
  // The weights' slice starts 16-byte aligned after the patch.
  p.wpatch = static_cast<int>((patch_floats(s, p.tw) + 3) / 4 * 4);
  p.chunks = static_cast<int>((s.kg + p.nv * co - 1) / (p.nv * co));
  p.groups = static_cast<int>(s.groups);
  p.tiles_w = static_cast<int>((s.ow + p.tw - 1) / p.tw), p.tiles_h = static_cast<int>((s.oh + kRows - 1) / kRows);
  const int64_t blocks = s.batch * p.tiles_h * p.tiles_w * p.groups * p.chunks;
  if (blocks > INT32_MAX) return false;
  const int threads = p.tw * (kRows / px) * p.nv;
  const size_t smem = static_cast<size_t>(smem_bytes(s));
  return dispatch_float_storage(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      auto go = [&](auto kernel) {
        if (smem > 48 * 1024)
          allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kMaxSmem, "grouped_conv_kernel");
        launch_pdl("grouped_conv_kernel", kernel, dim3(static_cast<unsigned>(blocks)), dim3(threads), smem, st, p);
      };
      if (co == 8)
        px == 2 ? go(grouped_conv_kernel<T, 8, 2>) : go(grouped_conv_kernel<T, 8, 4>);
      else
        px == 2 ? go(grouped_conv_kernel<T, 4, 2>) : go(grouped_conv_kernel<T, 4, 4>);
    }
  });
}

}  // namespace fusec::cuda

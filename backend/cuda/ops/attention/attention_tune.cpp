#include "backend/cuda/ops/attention/attention_tune.h"

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include "backend/cuda/core/captured_reps.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/tuning_cache.h"
#include "backend/cuda/ops/attention/attention_group.cuh"
#include "backend/cuda/ops/attention/attention_mma.cuh"
#include "ir/switches.h"

namespace fusec::cuda {

namespace {

/// Elements from a tensor's first to one past its last, by its strides.
int64_t extent(const HeadStrides& s, int batch, int heads, int len, int dim) {
  return (batch - 1) * s.batch + int64_t(heads - 1) * s.head + int64_t(len - 1) * s.seq + dim;
}

}  // namespace

std::string attention_problem_key(const AttentionArgs& a) {
  std::string k = std::string(dtype_name(a.dtype)) + "|" + dtype_name(a.mask_dtype);
  for (int64_t v : {int64_t(a.batch),
                    int64_t(a.q_heads),
                    int64_t(a.kv_heads),
                    int64_t(a.q_len),
                    int64_t(a.kv_len),
                    int64_t(a.head_dim),
                    int64_t(a.v_head_dim),
                    a.qs.batch,
                    a.qs.head,
                    a.qs.seq,
                    a.ks.batch,
                    a.ks.head,
                    a.ks.seq,
                    a.vs.batch,
                    a.vs.head,
                    a.vs.seq,
                    a.ys.batch,
                    a.ys.head,
                    a.ys.seq,
                    a.mask_stride[0],
                    a.mask_stride[1],
                    a.mask_stride[2],
                    a.mask_stride[3],
                    int64_t(a.causal)})
  {
    k += '|';
    k += std::to_string(v);  // not "|" + to_string(v), which trips g++ 12's -Wrestrict (as below)
  }
  char scale[32];
  std::snprintf(scale, sizeof scale, "|%a", static_cast<double>(a.scale));
  k += scale;
  if (a.softcap > 0.0f) {
    // A soft cap is another problem (cuDNN's SDPA does not take it): the key must not match an
    // uncapped one's plan or timing.
    std::snprintf(scale, sizeof scale, "|cap%a", static_cast<double>(a.softcap));
    k += scale;
  }
  return k;
}

AttentionPick pick_attention(const AttentionArgs& a, CudnnSdpa* sdpa, Context& ctx, bool packed, size_t k_off,
                             size_t v_off, const RotaryArgs* rot, const int (&group)[2]) {
  // Candidate 0: cuDNN's SDPA (after the rotary kernel); 1: the flash kernel; 2 + i: the grouped
  // kernel at group[i] heads a block.
  const AttentionPick fallback{sdpa != nullptr, 0};
  auto pick_of = [](size_t i, const int(&g)[2]) { return AttentionPick{i == 0, i >= 2 ? g[i - 2] : 0}; };
  TuningCache& cache = TuningCache::global();
  if (!cache.enabled() || a.batch == 0 || a.q_heads == 0 || a.q_len == 0 || a.kv_len == 0) return fallback;
  std::string problem = attention_problem_key(a);
  if (rot)
    for (int64_t v : {a.cos_st.batch, a.cos_st.seq, a.sin_st.batch, a.sin_st.seq})
      problem += "|rot " + std::to_string(v);
  const std::string names[4] = {"cudnn", "own", "group " + std::to_string(group[0]),
                                "group " + std::to_string(group[1])};
  const size_t n = group[1] ? 4 : group[0] ? 3 : 2;
  // Appended piece by piece: a literal + a temporary string trips g++ 12's -Wrestrict (a false positive).
  std::string key = "attention2|cudnn ";
  for (const std::string& part : {sdpa ? std::to_string(cudnnGetVersion()) : std::string("none"), std::string("|"),
                                  tuning_device_key(ctx.device()), std::string("|"), problem, std::string("|group "),
                                  std::to_string(group[0]), std::string(","), std::to_string(group[1])})
    key += part;
  if (const auto v = cache.get(key))
    for (size_t i = sdpa ? 0 : 1; i < n; ++i)
      if (*v == names[i]) return pick_of(i, group);

  const size_t es = dtype_size(a.dtype);
  const int64_t q_ext = extent(a.qs, a.batch, a.q_heads, a.q_len, a.head_dim);
  const int64_t k_ext = extent(a.ks, a.batch, a.kv_heads, a.kv_len, a.head_dim);
  const int64_t v_ext = extent(a.vs, a.batch, a.kv_heads, a.kv_len, a.v_head_dim);
  const int64_t y_ext = extent(a.ys, a.batch, a.q_heads, a.q_len, a.v_head_dim);
  const int64_t full[4] = {a.batch, a.q_heads, a.q_len, a.kv_len};
  int64_t m_ext = 1;
  for (int i = 0; i < 4; ++i) m_ext += (full[i] - 1) * a.mask_stride[i];
  const size_t q_bytes = packed ? std::max({size_t(q_ext) * es, k_off + size_t(k_ext) * es, v_off + size_t(v_ext) * es})
                                : size_t(q_ext) * es;
  const size_t m_bytes = a.mask_dtype == DType::Undefined ? 16 : size_t(m_ext) * (a.mask_dtype == DType::Bool ? 1 : es);
  try {
    // Rotary tables as long as the packed rows (they broadcast over no more), and the rotated rows.
    const size_t rot_bytes = rot ? q_bytes : 16;
    DeviceBuffer q(q_bytes, "attention tuning"), k(packed ? 16 : size_t(k_ext) * es, "attention tuning"),
        v(packed ? 16 : size_t(v_ext) * es, "attention tuning"), y(size_t(y_ext) * es, "attention tuning"),
        m(m_bytes, "attention tuning"),
        ws(std::max<size_t>(sdpa ? sdpa->workspace_bytes() : 0, 16), "attention tuning"),
        cs(rot_bytes, "attention tuning"), sn(rot_bytes, "attention tuning"), rq(rot_bytes, "attention tuning");
    cudaStream_t stream = ctx.stream();
    // Not zeros (0x3C3C is about 1 in fp16, 0.01 in bf16; a bool mask of 0x3C keeps every key).
    for (DeviceBuffer* b : {&q, &k, &v, &m, &cs, &sn})
      FUSEC_CUDA_CHECK(cudaMemsetAsync(b->get(), 0x3C, b->size(), stream));
    AttentionArgs t = a;
    t.q = q.get();
    t.k = packed ? static_cast<const char*>(q.get()) + k_off : k.get();
    t.v = packed ? static_cast<const char*>(q.get()) + v_off : v.get();
    t.mask = a.mask_dtype == DType::Undefined ? nullptr : m.get();
    t.y = y.get();
    // cuDNN reads the rotated rows; the own kernels rotate as they load.
    AttentionArgs after = t;
    RotaryArgs r;
    if (rot) {
      t.rot_cos = cs.get();
      t.rot_sin = sn.get();
      r = *rot;
      r.x = q.get();
      r.cos = cs.get();
      r.sin = sn.get();
      r.y = rq.get();
      after.q = rq.get();
      after.k = static_cast<const char*>(rq.get()) + k_off;  // V read in place, as the op does
    }
    if (!attention_mma_aligned(t)) return fallback;
    // A call that fails leaves its candidate out.
    auto run = [&](size_t i) {
      try {
        if (i == 0) {
          if (rot && !launch_rotary(r, stream)) return false;
          sdpa->launch(after, ws.get(), stream);
        } else if (i == 1) {
          launch_attention_mma(t, stream);
        } else {
          if (!attention_group_ok(t)) return false;
          launch_attention_group(t, group[i - 2], stream);
        }
      } catch (const std::exception&) {
        cudaGetLastError();
        return false;
      }
      return cudaGetLastError() == cudaSuccess;
    };
    std::vector<float> best(n, -1.0f);
    for (size_t i = sdpa ? 0 : 1; i < n; ++i)
      if (run(i) && run(i) && cudaStreamSynchronize(stream) == cudaSuccess) best[i] = 0.0f;  // warm
    cudaGetLastError();
    time_candidates(
        stream, best, TimingPlan{}, [](size_t) {}, [&](size_t i) { return run(i); });
    size_t won = n;
    for (size_t i = 0; i < n; ++i)
      if (best[i] >= 0 && (won == n || best[i] < best[won])) won = i;
    if (won == n) return fallback;
    if (env_switch("FUSEC_ATTN_TRACE")) {
      std::fprintf(stderr, "attention tune %s:", problem.c_str());
      const char* labels[4] = {rot ? "cuDNN SDPA after rotary" : "cuDNN SDPA",
                               rot ? "tensor-core kernel rotating" : "tensor-core kernel", "grouped kernel",
                               "grouped kernel"};
      for (size_t i = 0; i < n; ++i) {
        if (i == 0 && !sdpa) continue;
        std::fprintf(stderr, "%s %s", i == (sdpa ? 0u : 1u) ? "" : ",", labels[i]);
        if (i >= 2) std::fprintf(stderr, " (%d head%s a block)", group[i - 2], group[i - 2] == 1 ? "" : "s");
        std::fprintf(stderr, best[i] >= 0 ? " %.4f ms" : " failed", best[i]);
      }
      std::fprintf(stderr, "  <- %s\n", names[won].c_str());
    }
    cache.put(key, names[won]);
    return pick_of(won, group);
  } catch (const std::exception&) {
    cudaGetLastError();  // no memory for the scratch buffers: untimed
    return fallback;
  }
}

}  // namespace fusec::cuda

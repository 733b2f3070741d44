// cuDNN SDPA through the cuDNN frontend (see sdpa_cudnn.h). One graph per node: Q, K, V (and an
// additive bias) with fusec's strides, O written in Y's layout, inference only (no softmax stats).
#include "backend/cuda/ops/attention/sdpa_cudnn.h"

#include "backend/cuda/ops/attention/attention_tune.h"

#ifdef FUSEC_HAVE_CUDNN_FRONTEND
#include <cudnn_frontend.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <unordered_map>

#include "backend/cuda/core/check.h"
#endif

namespace fusec::cuda {

#ifdef FUSEC_HAVE_CUDNN_FRONTEND
namespace {

namespace fe = cudnn_frontend;

enum Uid : int64_t { kQ = 1, kK = 2, kV = 3, kO = 4, kBias = 5 };

std::vector<int64_t> strides_of(const HeadStrides& s) { return {s.batch, s.head, s.seq, 1}; }

class Sdpa : public CudnnSdpa {
 public:
  Sdpa(std::shared_ptr<fe::graph::Graph> g, cudnnHandle_t h, int64_t ws, bool bias)
      : graph_(std::move(g)), handle_(h), workspace_(static_cast<size_t>(ws)), bias_(bias) {}
  size_t workspace_bytes() const override { return workspace_; }
  void launch(const AttentionArgs& a, void* workspace, cudaStream_t stream) override {
    std::unordered_map<int64_t, void*> pack = {
        {kQ, const_cast<void*>(a.q)}, {kK, const_cast<void*>(a.k)}, {kV, const_cast<void*>(a.v)}, {kO, a.y}};
    if (bias_) pack[kBias] = const_cast<void*>(a.mask);
    cudnnSetStream(handle_, stream);
    fe::error_t e = graph_->execute(handle_, pack, workspace);
    if (e.is_bad())
      throw_library_error("cuDNN", static_cast<int>(e.get_code()), e.get_message(), /*out_of_memory=*/false,
                          "cudnn_frontend Graph::execute (SDPA)", __FILE__, __LINE__);
  }

 private:
  std::shared_ptr<fe::graph::Graph> graph_;
  cudnnHandle_t handle_;
  size_t workspace_;
  bool bias_;
};

/// Built graphs by problem: the layers of one model share a shape, and building a cuDNN SDPA plan
/// is slow, so BERT-base's 12 layers build one (graphs are immutable once built, and
/// execute() takes the pointers per call). Keyed by everything the graph was built from.
std::string problem_key(const AttentionArgs& a, const Context& ctx) {
  return std::to_string(ctx.id()) + "|" + attention_problem_key(a);
}

struct Built {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
};

std::mutex& built_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, Built>& built_graphs() {
  static std::map<std::string, Built> m;
  return m;
}

std::unique_ptr<CudnnSdpa> create_uncached(const AttentionArgs& a, Context& ctx, std::string* why, Built* out);

}  // namespace

std::unique_ptr<CudnnSdpa> CudnnSdpa::create(const AttentionArgs& a, Context& ctx, std::string* why) {
  const std::string key = problem_key(a, ctx);
  {
    std::lock_guard<std::mutex> lock(built_mutex());
    auto it = built_graphs().find(key);
    if (it != built_graphs().end())
      return std::make_unique<Sdpa>(it->second.graph, ctx.cudnn(), it->second.workspace,
                                    a.mask_dtype != DType::Undefined);
  }
  Built b;
  auto op = create_uncached(a, ctx, why, &b);
  if (op) {
    std::lock_guard<std::mutex> lock(built_mutex());
    built_graphs().emplace(key, std::move(b));
  }
  return op;
}

namespace {

std::unique_ptr<CudnnSdpa> create_uncached(const AttentionArgs& a, Context& ctx, std::string* why, Built* out) {
  auto refuse = [&](std::string r) -> std::unique_ptr<CudnnSdpa> {
    if (why) *why = std::move(r);
    return nullptr;
  };
  fe::DataType_t io;
  if (a.dtype == DType::Float16)
    io = fe::DataType_t::HALF;
  else if (a.dtype == DType::BFloat16)
    io = fe::DataType_t::BFLOAT16;
  else
    return refuse("cuDNN SDPA takes fp16 and bf16 only");
  if (a.head_dim != a.v_head_dim || a.head_dim % 8 != 0 || a.head_dim > kSdpaMaxHead)
    return refuse("cuDNN SDPA here takes equal Q/V head sizes, a multiple of 8 up to " + std::to_string(kSdpaMaxHead));
  // At plan time the pointers are not bound yet: the mask's presence is its dtype.
  const bool has_mask = a.mask_dtype != DType::Undefined;
  if (has_mask && a.mask_dtype == DType::Bool) return refuse("cuDNN SDPA takes an additive mask, not a bool one");
  if (a.softcap > 0.0f) return refuse("cuDNN SDPA has no soft cap");
  if (ctx.sm() < 80) return refuse("cuDNN SDPA needs sm_80 or newer");

  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(io)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const int64_t b = a.batch, hq = a.q_heads, hk = a.kv_heads, sq = a.q_len, sk = a.kv_len, d = a.head_dim;
  auto tensor = [&](const char* name, int64_t uid, std::vector<int64_t> dims, std::vector<int64_t> strides) {
    return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(strides));
  };
  auto Q = tensor("Q", kQ, {b, hq, sq, d}, strides_of(a.qs));
  auto K = tensor("K", kK, {b, hk, sk, d}, strides_of(a.ks));
  auto V = tensor("V", kV, {b, hk, sk, d}, strides_of(a.vs));
  auto opts =
      fe::graph::SDPA_attributes().set_name("fusec_attention").set_generate_stats(false).set_attn_scale(a.scale);
  if (a.causal) opts.set_causal_mask(true);
  if (has_mask) {
    // The mask's broadcast dims (stride 0) become size-1 dims of the bias tensor.
    const int64_t full[4] = {b, hq, sq, sk};
    std::vector<int64_t> dims(4), strides(4);
    for (int i = 0; i < 4; ++i) {
      dims[i] = a.mask_stride[i] == 0 ? 1 : full[i];
      strides[i] = a.mask_stride[i] == 0 ? (i == 3 ? 1 : 0) : a.mask_stride[i];
    }
    // Contiguous strides for the size-1 dims, as cuDNN expects of a packed tensor.
    int64_t run = 1;
    for (int i = 3; i >= 0; --i) {
      if (a.mask_stride[i] == 0) strides[i] = run;
      run = std::max(run, a.mask_stride[i] * dims[i]);
    }
    opts.set_bias(tensor("bias", kBias, dims, strides));
  }
  auto [O, stats] = g->sdpa(Q, K, V, opts);
  (void)stats;
  O->set_output(true).set_uid(kO).set_dim({b, hq, sq, d}).set_stride(strides_of(a.ys));

  cudnnHandle_t h = ctx.cudnn();
  fe::error_t e = g->validate();
  if (!e.is_bad()) e = g->build_operation_graph(h);
  if (!e.is_bad()) e = g->create_execution_plans({fe::HeurMode_t::A});
  if (!e.is_bad()) e = g->check_support(h);
  if (!e.is_bad()) e = g->build_plans(h);
  if (e.is_bad()) return refuse("cuDNN SDPA does not support this case: " + e.get_message());
  int64_t ws = 0;
  e = g->get_workspace_size(ws);
  if (e.is_bad()) return refuse("cuDNN SDPA workspace query failed: " + e.get_message());
  out->graph = g;
  out->workspace = ws;
  return std::make_unique<Sdpa>(std::move(g), h, ws, has_mask);
}

}  // namespace

#else

std::unique_ptr<CudnnSdpa> CudnnSdpa::create(const AttentionArgs&, Context&, std::string* why) {
  if (why) *why = "built without the cuDNN frontend headers";
  return nullptr;
}

#endif

}  // namespace fusec::cuda

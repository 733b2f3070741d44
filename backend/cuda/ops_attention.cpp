// CUDA entry point of ONNX Attention (opset 23+) and ai.fusec Attention (kernel in attention.cu).
// The factory turns the 3-D [B, S, H·D] or 4-D [B, H, S, D] layout into strides and the mask's
// broadcast into per-dimension strides; what the kernel does not cover (a KV cache, the extra
// outputs, softcap, nonpad_kv_seqlen, head sizes over 128) runs on the CPU reference, which the
// planner reports with the reason.
#include <cmath>
#include <cstdlib>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_op.h"
#include "backend/cuda/sdpa_cudnn.h"

namespace fusec::cuda {

namespace {

class AttentionOp : public CudaOp {
 public:
  /// packed: K and V are views into Q's tensor, `k_off`/`v_off` bytes in (ai.fusec packed QKV).
  AttentionOp(AttentionArgs a, std::unique_ptr<CudnnSdpa> sdpa, bool packed, size_t k_off, size_t v_off)
      : a_(a), sdpa_(std::move(sdpa)), packed_(packed), k_off_(k_off), v_off_(v_off) {}
  void launch(const LaunchArgs& l) override {
    AttentionArgs a = a_;
    a.q = l.inputs[0].data;
    if (packed_) {
      a.k = static_cast<const char*>(l.inputs[0].data) + k_off_;
      a.v = static_cast<const char*>(l.inputs[0].data) + v_off_;
    } else {
      a.k = l.inputs[1].data;
      a.v = l.inputs[2].data;
    }
    a.mask = l.inputs.size() > 3 && l.inputs[3].defined() ? l.inputs[3].data : nullptr;
    a.y = l.outputs[0].data;
    if (sdpa_) sdpa_->launch(a, l.workspace, l.stream);
    else launch_attention(a, l.stream);
  }
  size_t workspace_bytes() const override { return sdpa_ ? sdpa_->workspace_bytes() : 0; }
  std::string kernel_name() const override {
    return std::string(sdpa_ ? "cuDNN SDPA " : "fused attention ") + dtype_name(a_.dtype) + (a_.causal ? " causal" : "") +
           (a_.mask_dtype != DType::Undefined ? " masked" : "") + (packed_ ? " packed-qkv" : "");
  }

 private:
  AttentionArgs a_;
  std::unique_ptr<CudnnSdpa> sdpa_;
  bool packed_ = false;
  size_t k_off_ = 0, v_off_ = 0;
};

std::unique_ptr<CudaOp> refuse(std::string* why, std::string reason) {
  if (why) *why = std::move(reason);
  return nullptr;
}

/// Sizes and strides of one of Q/K/V from its dims: 4-D [B, H, S, D], or 3-D [B, S, H·D] with
/// `heads` given by the node. Returns "" or why the dims do not fit.
std::string layout(const std::vector<int64_t>& d, int64_t heads, int64_t* h, int64_t* s, int64_t* hd,
                   HeadStrides* st) {
  if (d.size() == 4) {
    *h = d[1];
    *s = d[2];
    *hd = d[3];
    *st = {d[1] * d[2] * d[3], d[2] * d[3], d[3]};
    return "";
  }
  if (d.size() != 3) return "Q, K and V must be 3-D or 4-D";
  if (heads < 1 || d[2] % heads != 0) return "the hidden size is not a multiple of the head count";
  *h = heads;
  *s = d[1];
  *hd = d[2] / heads;
  *st = {d[1] * d[2], *hd, d[2]};
  return "";
}

std::unique_ptr<CudaOp> make_attention(const PlanContext& c, std::string* why) {
  for (size_t i = 4; i < c.num_inputs(); ++i)
    if (c.has_input(i)) return refuse(why, "the CUDA attention kernel takes no KV cache or nonpad_kv_seqlen");
  for (size_t i = 1; i < c.num_outputs(); ++i)
    if (c.has_output(i)) return refuse(why, "the CUDA attention kernel writes only Y (no present_key/value or qk output)");
  if (c.has_attr("softcap") && c.attr_float("softcap") != 0.0f) return refuse(why, "the CUDA attention kernel has no softcap");
  const auto& qd = c.in_dims(0);
  const int64_t qh_attr = c.has_attr("q_num_heads") ? c.attr_int("q_num_heads") : 0;
  const int64_t kvh_attr = c.has_attr("kv_num_heads") ? c.attr_int("kv_num_heads") : 0;
  // ai.fusec packed form: K and V omitted, Q is [B, S, (Hq + 2·Hkv)·D], each token's row holding
  // the Q heads, then the K heads, then the V heads (one merged projection GEMM wrote it).
  const bool packed = !c.has_input(1) && !c.has_input(2);
  if (!packed && (!c.has_input(1) || !c.has_input(2))) return refuse(why, "K or V is missing");

  AttentionArgs a;
  int64_t hq, sq, d, hk, sk, dk, hv, sv, dv;
  size_t k_off = 0, v_off = 0;
  if (packed) {
    if (qd.size() != 3 || qh_attr < 1 || kvh_attr < 1 || qd[2] % (qh_attr + 2 * kvh_attr) != 0)
      return refuse(why, "packed QKV must be [B, S, (q_num_heads + 2·kv_num_heads)·head_size]");
    hq = qh_attr;
    hk = hv = kvh_attr;
    sq = sk = sv = qd[1];
    d = dk = dv = qd[2] / (qh_attr + 2 * kvh_attr);
    const HeadStrides st{qd[1] * qd[2], d, qd[2]};
    a.qs = a.ks = a.vs = st;
    const size_t es = dtype_size(c.in_dtype(0));
    k_off = static_cast<size_t>(hq * d) * es;
    v_off = static_cast<size_t>((hq + hk) * d) * es;
  } else {
    if (c.in_dims(1).size() != qd.size() || c.in_dims(2).size() != qd.size())
      return refuse(why, "Q, K and V differ in rank");
    std::string bad = layout(qd, qh_attr, &hq, &sq, &d, &a.qs);
    if (bad.empty()) bad = layout(c.in_dims(1), kvh_attr, &hk, &sk, &dk, &a.ks);
    if (bad.empty()) bad = layout(c.in_dims(2), kvh_attr, &hv, &sv, &dv, &a.vs);
    if (!bad.empty()) return refuse(why, bad);
    if (dk != d || hv != hk || sv != sk || c.in_dims(1)[0] != qd[0] || c.in_dims(2)[0] != qd[0])
      return refuse(why, "K and V do not match Q's batch and head size");
  }
  int64_t yh, ys, ydv;
  std::string bad = layout(c.out_dims(0), hq, &yh, &ys, &ydv, &a.ys);
  if (!bad.empty() || ydv != dv || ys != sq) return refuse(why, "Y's shape does not follow from Q and V");

  a.dtype = c.in_dtype(0);
  if ((!packed && (c.in_dtype(1) != a.dtype || c.in_dtype(2) != a.dtype)) || c.out_dtype(0) != a.dtype)
    return refuse(why, "Q, K, V and Y differ in type");
  a.batch = static_cast<int>(qd[0]);
  a.q_heads = static_cast<int>(hq);
  a.kv_heads = static_cast<int>(hk);
  a.q_len = static_cast<int>(sq);
  a.kv_len = static_cast<int>(sk);
  a.head_dim = static_cast<int>(d);
  a.v_head_dim = static_cast<int>(dv);
  const float scale = c.has_attr("scale") ? c.attr_float("scale") : 0.0f;
  a.scale = scale != 0.0f ? scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  a.causal = c.has_attr("is_causal") && c.attr_int("is_causal") != 0;

  if (c.has_input(3)) {
    // The mask broadcasts (right-aligned) to [B, Hq, Sq, Skv]; size-1 dims get stride 0.
    const auto& md = c.in_dims(3);
    if (md.size() > 4) return refuse(why, "the mask has more than 4 dims");
    const int64_t full[4] = {qd[0], hq, sq, sk};
    int64_t stride = 1;
    for (int i = 3; i >= 0; --i) {
      const int mi = i - (4 - static_cast<int>(md.size()));
      const int64_t n = mi >= 0 ? md[mi] : 1;
      if (n != 1 && n != full[i]) return refuse(why, "the mask does not broadcast to [B, heads, Sq, Skv]");
      a.mask_stride[i] = n == 1 ? 0 : stride;
      stride *= n;
    }
    a.mask_dtype = c.in_dtype(3);
  }
  const std::string unsupported = attention_unsupported(a);
  if (!unsupported.empty()) return refuse(why, unsupported);
  // Tensor cores through cuDNN where it takes the case (fp16/bf16, additive or no mask);
  // FUSEC_CUDNN_SDPA=0 keeps the own kernel (to compare the two, and for the tests).
  std::unique_ptr<CudnnSdpa> sdpa;
  const char* env = std::getenv("FUSEC_CUDNN_SDPA");
  if (!(env && std::string(env) == "0")) sdpa = CudnnSdpa::create(a, c.ctx(), nullptr);
  return std::make_unique<AttentionOp>(a, std::move(sdpa), packed, k_off, v_off);
}

}  // namespace

void register_attention_ops(CudaOpRegistry& r) {
  r.add("Attention", make_attention);
  r.add("Attention", make_attention, "ai.fusec");
}

}  // namespace fusec::cuda

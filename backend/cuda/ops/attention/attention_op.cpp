// CUDA entry point of ONNX Attention (opset 23+) and ai.fusec Attention (kernel in attention.cu).
// The factory turns the node's geometry (ir/ops/attention.h: 3-D [B, S, H·D], 4-D [B, H, S, D] or
// packed QKV) into strides and the mask's broadcast into per-dimension strides; what the kernels do not cover (a KV
// cache, the extra outputs, nonpad_kv_seqlen, head sizes over 256) runs on
// the CPU reference, which the planner reports with the reason.
#include <algorithm>
#include <cstdlib>

#include <optional>

#include "backend/cuda/ops/attention/attention.cuh"
#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/ops/attention/attention_group.cuh"
#include "backend/cuda/ops/attention/attention_mma.cuh"
#include "backend/cuda/ops/attention/rotary.cuh"
#include "backend/cuda/ops/attention/attention_tune.h"
#include "backend/cuda/ops/attention/sdpa_cudnn.h"
#include "ir/ops/attention.h"
#include "ir/switches.h"

namespace fusec::cuda {

namespace {

class AttentionOp : public CudaOp {
 public:
  /// K and V are read from node inputs 1 and 2, or, packed, from input 0 (views into Q's tensor),
  /// `k_off`/`v_off` bytes in. With rotary tables (inputs 4 and 5, `rot` their rotation of the packed
  /// rows), the tensor-core kernel rotates Q and K tiles as it loads them where `fused`, and
  /// otherwise the rotary kernel writes rotated rows into the workspace for the chosen kernel.
  /// Without cuDNN's SDPA, `group_heads` (nonzero) runs the grouped kernel with that many query
  /// heads a block where it takes the launch's arguments, and the flash kernel otherwise.
  AttentionOp(AttentionArgs a, std::unique_ptr<CudnnSdpa> sdpa, bool packed, size_t k_off, size_t v_off,
              std::optional<RotaryArgs> rot, bool fused, int group_heads)
      : a_(a),
        sdpa_(std::move(sdpa)),
        packed_(packed),
        k_off_(k_off),
        v_off_(v_off),
        rot_(rot),
        fused_(fused),
        group_heads_(group_heads) {}
  void launch(const LaunchArgs& l) override {
    AttentionArgs a = a_;
    a.q = l.inputs[0].data;
    a.k = static_cast<const char*>(l.inputs[packed_ ? 0 : 1].data) + k_off_;
    a.v = static_cast<const char*>(l.inputs[packed_ ? 0 : 2].data) + v_off_;
    a.mask = l.inputs.size() > 3 && l.inputs[3].defined() ? l.inputs[3].data : nullptr;
    a.y = l.outputs[0].data;
    if (rot_) {
      a.rot_cos = l.inputs[4].data;
      a.rot_sin = l.inputs[5].data;
      if (fused_ && attention_mma_aligned(a)) return launch_own(a, l.stream);
      RotaryArgs r = *rot_;
      r.x = l.inputs[0].data;
      r.cos = a.rot_cos;
      r.sin = a.rot_sin;
      r.y = static_cast<char*>(l.workspace) + rotated_offset();
      require_launched(launch_rotary(r, l.stream), "rotary");
      a.rot_cos = a.rot_sin = nullptr;
      a.q = r.y;
      a.k = static_cast<const char*>(r.y) + k_off_;  // V stays where it is: packed_rotation copies no V
    }
    if (sdpa_)
      sdpa_->launch(a, l.workspace, l.stream);
    else
      launch_own(a, l.stream);
  }
  size_t workspace_bytes() const override {
    return rot_ ? rotated_offset() + static_cast<size_t>(rot_->heads * rot_->head) * dtype_size(a_.dtype)
                : sdpa_bytes();
  }
  std::string kernel_name() const override {
    const std::string rot = !rot_ ? "" : fused_ ? " rotary-inside" : " after rotary";
    const std::string variant = group_heads_ ? "grouped, " + std::to_string(group_heads_) +
                                                   (group_heads_ == 1 ? " head a block" : " heads a block")
                                             : std::string(attention_variant(a_));
    return std::string(sdpa_ ? "cuDNN SDPA " : "fused attention ") + dtype_name(a_.dtype) +
           (sdpa_ ? "" : " " + variant) + (a_.causal ? " causal" : "") +
           (a_.mask_dtype != DType::Undefined ? " masked" : "") + (packed_ ? " packed-qkv" : "") + rot;
  }

 private:
  /// The own kernels: the grouped one where chosen and it takes these pointers (a mask's rows
  /// 16-byte aligned), else the flash kernel (rotating where `a` has tables).
  void launch_own(const AttentionArgs& a, cudaStream_t stream) const {
    if (group_heads_ && attention_group_ok(a) && attention_mma_aligned(a))
      launch_attention_group(a, group_heads_, stream);
    else if (a.rot_cos)
      launch_attention_mma(a, stream);
    else
      launch_attention(a, stream);
  }
  size_t sdpa_bytes() const { return sdpa_ ? sdpa_->workspace_bytes() : 0; }
  size_t rotated_offset() const { return (sdpa_bytes() + 255) / 256 * 256; }

  AttentionArgs a_;
  std::unique_ptr<CudnnSdpa> sdpa_;
  bool packed_ = false;
  size_t k_off_ = 0, v_off_ = 0;
  std::optional<RotaryArgs> rot_;
  bool fused_ = false;
  int group_heads_ = 0;
};

std::unique_ptr<CudaOp> refuse(std::string* why, std::string reason) {
  if (why) *why = std::move(reason);
  return nullptr;
}

HeadStrides head_strides(const AttentionDims::Strides& s) { return {s.b, s.h, s.s}; }

/// The rotation of packed rows [B, S, W] that ai.fusec Attention's tables ask for: Q's and K's heads
/// of D values, the tables' rows at their strides (rotary.cuh's head view [B, S, W / D]).
RotaryArgs packed_rotation(const AttentionDims& d, DType t, const RotaryTableStrides& cs,
                           const RotaryTableStrides& ss) {
  RotaryArgs r;
  r.dtype = t;
  r.head = d.head_size;
  r.heads_per_row = d.q_heads + 2 * d.kv_heads;
  r.rotated_heads = d.q_heads + d.kv_heads;
  r.copy_rest = false;  // V's heads: the attention reads them from the packed rows
  r.heads = d.batch * d.q_seq * r.heads_per_row;
  r.rank = 3;
  const int64_t dims[3] = {d.batch, d.q_seq, r.heads_per_row};
  const int64_t cos_rows[3] = {cs.batch / d.head_size, cs.seq / d.head_size, 0};
  const int64_t sin_rows[3] = {ss.batch / d.head_size, ss.seq / d.head_size, 0};
  for (int i = 0; i < 3; ++i) {
    r.dims[i] = dims[i];
    r.cos_stride[i] = cos_rows[i];
    r.sin_stride[i] = sin_rows[i];
  }
  return r;
}

std::unique_ptr<CudaOp> make_attention(const PlanContext& c, std::string* why) {
  const bool fusec_domain = !is_standard_attention(c);
  for (size_t i = 4; i < c.num_inputs(); ++i)
    if (c.has_input(i) && !(fusec_domain && i < 6))
      return refuse(why, "the CUDA attention kernel takes no KV cache or nonpad_kv_seqlen");
  for (size_t i = 1; i < c.num_outputs(); ++i)
    if (c.has_output(i))
      return refuse(why, "the CUDA attention kernel writes only Y (no present_key/value or qk output)");
  // Opset 25's sliding window: none of the CUDA kernels (fusec's, cuDNN's SDPA) masks by it, so
  // the node stays on the CPU reference (as the CPU clamps them, values below 0 mean no window).
  for (const char* w : {"left_window_size", "right_window_size"})
    if (c.has_attr(w) && c.attr_int(w) >= 0)
      return refuse(why, std::string("the CUDA attention kernels have no sliding window (") + w + ")");
  // ai.fusec packed form: K and V omitted, Q holding each token's Q, K and V heads (one merged
  // projection GEMM wrote it). The geometry, layouts and scale are the CPU reference's own
  // (ir/ops/attention.h), so the two cannot disagree.
  const bool packed = !c.has_input(1) && !c.has_input(2);
  if (!packed && (!c.has_input(1) || !c.has_input(2))) return refuse(why, "K or V is missing");
  const AttentionDims d = packed ? packed_attention_dims(c, c.in_dims(0))
                                 : attention_dims(c, c.in_dims(0), c.in_dims(1), c.in_dims(2), nullptr);
  AttentionArgs a;
  a.dtype = c.in_dtype(0);
  if ((!packed && (c.in_dtype(1) != a.dtype || c.in_dtype(2) != a.dtype)) || c.out_dtype(0) != a.dtype)
    return refuse(why, "Q, K, V and Y differ in type");
  const AttentionDims::View q = d.q_view(), k = d.k_view(), v = d.v_view();
  a.qs = head_strides(q.st);
  a.ks = head_strides(k.st);
  a.vs = head_strides(v.st);
  a.ys = head_strides(d.y_strides());
  const size_t es = dtype_size(a.dtype);
  a.batch = static_cast<int>(d.batch);
  a.q_heads = static_cast<int>(d.q_heads);
  a.kv_heads = static_cast<int>(d.kv_heads);
  a.q_len = static_cast<int>(d.q_seq);
  a.kv_len = static_cast<int>(d.kv_seq);
  a.head_dim = static_cast<int>(d.head_size);
  a.v_head_dim = static_cast<int>(d.v_head_size);
  a.scale = attention_scale(c, d.head_size);
  a.causal = c.has_attr("is_causal") && c.attr_int("is_causal") != 0;
  a.softcap = c.attr_float("softcap");

  if (c.has_input(3)) {
    // The mask broadcasts (right-aligned) to [B, Hq, Sq, Skv]; size-1 dims get stride 0.
    const auto& md = c.in_dims(3);
    if (md.size() > 4) return refuse(why, "the mask has more than 4 dims");
    const int64_t full[4] = {d.batch, d.q_heads, d.q_seq, d.kv_seq};
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
  std::optional<RotaryArgs> rot;
  if (fusec_domain && (c.has_input(4) || c.has_input(5))) {
    if (!packed || !c.has_input(4) || !c.has_input(5))
      return refuse(why, "rotary tables (cos and sin, both) need packed QKV");
    if (c.in_dtype(4) != a.dtype || c.in_dtype(5) != a.dtype)
      return refuse(why, "the rotary tables are not of Q's type");
    const RotaryTableStrides cs = rotary_table_strides(c, c.in_dims(4), d, "cos");
    const RotaryTableStrides ss = rotary_table_strides(c, c.in_dims(5), d, "sin");
    a.cos_st = {cs.batch, 0, cs.seq};
    a.sin_st = {ss.batch, 0, ss.seq};
    if (d.batch * d.q_seq * d.packed_width() >= (int64_t{1} << 31) - 1)
      return refuse(why, "the packed QKV holds 2^31 values or more (the rotary kernel indexes in 32 bits)");
    rot = packed_rotation(d, a.dtype, cs, ss);
  }
  // At fp16/bf16 cuDNN's SDPA (where it takes the case: additive or no mask), the own flash kernel
  // and, at short sequences, the grouped kernel race once per problem (attention_tune.h).
  // FUSEC_CUDNN_SDPA=0 keeps the own kernels, =1 cuDNN's untimed (to compare them, and for the
  // tests); FUSEC_ATTN_GROUP=0 leaves the grouped kernel out of the race, and =N with
  // FUSEC_CUDNN_SDPA=0 runs it at N query heads a block (the largest divisor of the group up to N)
  // where it takes the case.
  const size_t k_off = static_cast<size_t>(k.offset) * es, v_off = static_cast<size_t>(v.offset) * es;
  std::unique_ptr<CudnnSdpa> sdpa;
  const char* env = env_switch("FUSEC_CUDNN_SDPA");
  const std::string sw = env ? env : "";
  const char* group_env = env_switch("FUSEC_ATTN_GROUP");
  const int group_want = group_env ? std::atoi(group_env) : -1;
  // With rotary tables the race is the own kernels rotating as they load against the rotary
  // kernel then cuDNN's SDPA. They rotate only where they won that race (or are forced,
  // FUSEC_CUDNN_SDPA=0): otherwise the rotary kernel then the unrotated kernel runs.
  if (std::max(a.head_dim, a.v_head_dim) > kOwnMaxHead) {
    // Past the fast kernels' heads (Gemma's 256): cuDNN's SDPA where it takes the case, untimed
    // (tensor cores against the streaming kernel's FMAs), else the streaming kernel; after the
    // rotary kernel where there are tables.
    if (sw != "0") sdpa = CudnnSdpa::create(a, c.ctx(), nullptr);
    return std::make_unique<AttentionOp>(a, std::move(sdpa), packed, k_off, v_off, rot, false, 0);
  }
  const bool on_tc = attention_on_tensor_cores(a);
  const bool rotates = rot && on_tc && attention_mma_rotates(a);
  const bool grouped = on_tc && group_want != 0 && attention_group_ok(a) && (!rot || rotates);
  if (sw != "0") sdpa = CudnnSdpa::create(a, c.ctx(), nullptr);
  AttentionPick pick{sdpa != nullptr, 0};
  if (sw == "0") {
    pick.cudnn = false;
    if (grouped && group_want > 0) pick.group_heads = attention_group_heads(a, group_want);
  } else if (sw != "1" && on_tc && (sdpa || grouped)) {
    // The grouped kernel at the whole group a block, and at half of it (twice the blocks: the
    // better of the two depends on how the blocks fill the SMs).
    const int group = a.q_heads / a.kv_heads;
    int counts[2] = {0, 0};
    if (grouped) {
      counts[0] = attention_group_heads(a, group);
      const int half = attention_group_heads(a, group / 2);
      if (half != counts[0]) counts[1] = half;
    }
    pick = pick_attention(a, sdpa.get(), c.ctx(), packed, k_off, v_off, rotates ? &*rot : nullptr, counts);
  }
  if (!pick.cudnn) sdpa.reset();
  const bool fused = rotates && !pick.cudnn;
  return std::make_unique<AttentionOp>(a, std::move(sdpa), packed, k_off, v_off, rot, fused, pick.group_heads);
}

}  // namespace

void register_attention_ops(CudaOpRegistry& r) {
  r.add("Attention", make_attention);
  r.add("Attention", make_attention, "ai.fusec");
}

}  // namespace fusec::cuda

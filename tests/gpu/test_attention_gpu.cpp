// The fused attention kernel (attention.cu) against the CPU reference at fp32 (1e-5), fp16 and
// bf16 (1e-2): the 3-D form the fusion pass writes (BERT-base heads, an additive [B,1,1,S] mask),
// the 4-D form, lengths that are not multiples of the 64-row/64-key tiles, causal masking with
// Sq != Skv, grouped-query heads, bool masks broadcast from [Sq, Skv], head sizes that pad to the
// 64 and 128 tiles, the standard opset-23 op, and the head size the kernel refuses (CPU fallback);
// packed QKV with rotary tables on every route.
// The register-tiled fp32 kernel: which arguments select it (and which fall back to the streaming
// kernel), and its cases at fp32: no mask, row-broadcast float and bool masks, lengths off its
// 64-row/64-key tiles (several key chunks), head sizes 32 and 64, grouped heads, packed QKV, and
// rows that see only excluded keys in a whole chunk or in all of them.
// At fp16/bf16 each case runs six times: as tuned, through cuDNN's SDPA where it takes the case
// (FUSEC_CUDNN_SDPA=1), through the tensor-core kernel (attention_mma.cu, FUSEC_CUDNN_SDPA=0) where
// its head sizes and strides allow, through the grouped kernel (attention_group.cu) at the whole
// group and at one head a block where it takes the case (up to 128 keys, head sizes up to 64, a
// mask the same for every head), and through the streaming kernel (FUSEC_ATTN_MMA=0).
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <string>

#include "backend/cuda/core/tuning_cache.h"
#include "backend/cuda/ops/attention/attention.cuh"
#include "gpu_test_util.h"
#include "passes/infer_shapes.h"
#include "ir/switches.h"

using namespace fusec;
using namespace fusec::test;

namespace {

const Precision kAll[] = {Precision::FP32, Precision::FP16, Precision::BF16};

struct Case {
  std::vector<int64_t> q, k, v;
  std::vector<int64_t> mask;  // empty: none
  DType mask_type = DType::Float32;
  int64_t q_heads = 0, kv_heads = 0;  // for 3-D inputs
  bool causal = false;
  float scale = 0.0f;  // 0: the default 1/sqrt(head size)
  bool standard = false;
  bool packed = false;  // ai.fusec packed QKV: q is [B, S, (Hq + 2·Hkv)·D], K and V left out
  std::vector<int64_t> table;  // packed: the rotary tables' dims (cos and sin); empty: none
  float softcap = 0.0f;        // > 0: softcap(scale·QKᵀ) before the mask (Gemma 2)
};

OpCase attention(const Case& k, uint64_t seed) {
  OpCase c;
  c.op = "Attention";
  c.domain = k.standard ? "" : "ai.fusec";
  c.opset = k.standard ? 23 : 17;
  // Q spread wider than K and V so the softmax is far from uniform.
  if (k.packed) {
    // Each token's row: Q heads spread wider, as above, then K and V heads.
    Tensor qkv = random_tensor(DType::Float32, k.q, seed);
    const int64_t width = k.q.back(), q_width = width / (k.q_heads + 2 * k.kv_heads) * k.q_heads;
    for (int64_t i = 0; i < qkv.numel(); ++i)
      if (i % width < q_width) qkv.data<float>()[i] *= 3.0f;
    c.inputs = {std::move(qkv), Tensor(), Tensor()};
  } else
    c.inputs = {random_tensor(DType::Float32, k.q, seed, -3, 3), random_tensor(DType::Float32, k.k, seed + 1),
                random_tensor(DType::Float32, k.v, seed + 2)};
  if (!k.mask.empty()) {
    Tensor m = random_tensor(k.mask_type, k.mask, seed + 3, k.mask_type == DType::Bool ? 0 : -4,
                             k.mask_type == DType::Bool ? 1.6 : 1);
    if (k.mask_type == DType::Float32)  // some keys padded out, as BERT's extended mask does
      for (int64_t i = 0; i < m.numel(); ++i)
        if (m.data<float>()[i] < -3.5f) m.data<float>()[i] = -10000.0f;
    c.inputs.push_back(std::move(m));
  }
  if (!k.table.empty()) {
    if (k.mask.empty()) c.inputs.emplace_back();
    c.inputs.push_back(random_tensor(DType::Float32, k.table, seed + 4));
    c.inputs.push_back(random_tensor(DType::Float32, k.table, seed + 5));
  }
  if (k.q_heads) c.attrs.push_back(attr("q_num_heads", k.q_heads));
  if (k.kv_heads) c.attrs.push_back(attr("kv_num_heads", k.kv_heads));
  if (k.causal) c.attrs.push_back(attr("is_causal", int64_t{1}));
  if (k.scale != 0.0f) c.attrs.push_back(attr("scale", k.scale));
  if (k.softcap != 0.0f) c.attrs.push_back(attr("softcap", k.softcap));
  return c;
}

/// Runs check() once per kernel that takes half-precision attention: as tuned, cuDNN's SDPA
/// (FUSEC_CUDNN_SDPA=1), the tensor-core kernel (=0), the grouped kernel at two head counts a block
/// (=0 and FUSEC_ATTN_GROUP) and the streaming kernel (FUSEC_ATTN_MMA=0).
/// Where a kernel does not take the case, the next one in line runs it.
template <typename Check>
void each_half_kernel(Check check) {
  struct Run {
    const char *sdpa, *mma, *group, *name;
  };
  const Run runs[] = {
      {nullptr, nullptr, nullptr, "as tuned"},
      {"1", nullptr, nullptr, "cuDNN SDPA (FUSEC_CUDNN_SDPA=1)"},
      {"0", nullptr, nullptr, "tensor-core kernel (FUSEC_CUDNN_SDPA=0)"},
      {"0", nullptr, "64", "grouped kernel, the whole group a block (FUSEC_ATTN_GROUP=64)"},
      {"0", nullptr, "1", "grouped kernel, one head a block (FUSEC_ATTN_GROUP=1)"},
      {"0", "0", nullptr, "streaming kernel (FUSEC_ATTN_MMA=0)"},
  };
  for (const Run& r : runs) {
    SCOPED_TRACE(r.name);
    if (r.sdpa) ::setenv("FUSEC_CUDNN_SDPA", r.sdpa, 1);
    if (r.mma) ::setenv("FUSEC_ATTN_MMA", r.mma, 1);
    if (r.group) ::setenv("FUSEC_ATTN_GROUP", r.group, 1);
    check();
    ::unsetenv("FUSEC_CUDNN_SDPA");
    ::unsetenv("FUSEC_ATTN_MMA");
    ::unsetenv("FUSEC_ATTN_GROUP");
  }
}

/// `c` on the GPU against the CPU at every precision, through every half-precision kernel.
void all_precisions(const OpCase& c, bool on_gpu = true) {
  for (Precision p : kAll) {
    SCOPED_TRACE(precision_name(p));
    if (p == Precision::FP32)
      expect_gpu_matches_cpu(c, p, -1, on_gpu);
    else
      each_half_kernel([&] { expect_gpu_matches_cpu(c, p, -1, on_gpu); });
  }
}

void all_precisions(const Case& k, uint64_t seed, bool on_gpu = true) { all_precisions(attention(k, seed), on_gpu); }

/// What runs the single Attention node of a graph built from `k` at precision `p`.
std::string kernel_of(const Case& k, Precision p) {
  OpCase c = attention(k, 1);
  GraphBuilder b(c.opset);
  if (!c.domain.empty()) b.graph().opsets[c.domain] = 1;
  std::vector<Value*> ins;
  std::vector<Tensor> feeds;  // the packed form's K and V are left out
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (!c.inputs[i].defined()) {
      ins.push_back(nullptr);
      continue;
    }
    ins.push_back(b.input("in" + std::to_string(i), c.inputs[i].dtype(), shape_of(c.inputs[i].dims())));
    feeds.push_back(c.inputs[i]);
  }
  b.output(b.node_n(c.op, ins, 1, c.attrs, "attention", c.domain)[0]);
  auto g = b.build();
  infer_shapes(*g);
  cuda::CudaOptions o;
  o.precision = p;
  auto exe = cuda::CudaBackend(o).compile_cuda(*g);
  exe->run(feeds);
  for (const auto& pl : exe->placement())
    if (pl.op_type == "Attention") return pl.on_gpu ? pl.kernel : "cpu: " + pl.reason;
  return "none";
}

/// BERT-base's attention as the fusion pass writes it: 3-D, 12 heads, an additive [B,1,1,S] mask.
Case bert_case() {
  Case k;
  k.q = k.k = k.v = {2, 128, 768};
  k.q_heads = k.kv_heads = 12;
  k.mask = {2, 1, 1, 128};
  return k;
}

}  // namespace

TEST(GpuAttention, BertHeads3dWithPaddingMask) {
  FUSEC_REQUIRE_GPU();
  all_precisions(bert_case(), 11);
}

// The merged Q/K/V projection's output read in place: K and V are views into the packed rows.
TEST(GpuAttention, PackedQkv) {
  FUSEC_REQUIRE_GPU();
  Case bert = bert_case();
  bert.packed = true;
  bert.q = {2, 128, 3 * 768};
  all_precisions(bert, 15);
  Case vit;  // ViT-B/16's: 197 tokens (four 64-row blocks, the last of 5 rows), no mask
  vit.packed = true;
  vit.q = {2, 197, 3 * 768};
  vit.q_heads = vit.kv_heads = 12;
  all_precisions(vit, 17);
  Case gqa;  // 8 query heads, 2 kv heads of 64, causal, a length off the tiles
  gqa.packed = true;
  gqa.q = {2, 77, (8 + 2 * 2) * 64};
  gqa.q_heads = 8;
  gqa.kv_heads = 2;
  gqa.causal = true;
  all_precisions(gqa, 16);
  Case swin;  // Swin-T's windows after merge_qkv's head split: 49 tokens, 3 heads of 32, a per-head bias
  swin.packed = true;
  swin.q = {6, 49, 3 * 3 * 32};
  swin.q_heads = swin.kv_heads = 3;
  swin.mask = {1, 3, 49, 49};
  all_precisions(swin, 18);
}

// Packed QKV with rotary tables (fuse_rotary_attention's form): the tensor-core kernel rotates Q
// and K tiles in shared memory as they land; cuDNN's SDPA, the streaming kernel, fp32 and head sizes
// off 16-value halves run after the rotary kernel. Tables per position and per batch, head sizes
// 32 to 128, lengths off the 64-row tiles, masks and causal.
TEST(GpuAttention, PackedQkvRotaryTables) {
  FUSEC_REQUIRE_GPU();
  auto packed = [](int64_t b, int64_t s, int64_t hq, int64_t hkv, int64_t d) {
    Case k;
    k.packed = true;
    k.q = {b, s, (hq + 2 * hkv) * d};
    k.q_heads = hq;
    k.kv_heads = hkv;
    return k;
  };
  Case llama = packed(2, 77, 8, 2, 64);  // GQA, causal and a padding row mask, as Llama's
  llama.causal = true;
  llama.mask = {2, 1, 1, 77};
  llama.table = {1, 77, 1, 64};
  all_precisions(llama, 81);
  Case wide = packed(1, 130, 4, 2, 128);  // D = 128, three key tiles, the last of 2 rows
  wide.table = {1, 130, 1, 128};
  all_precisions(wide, 82);
  Case per_batch = packed(2, 65, 3, 3, 32);  // tables per batch, a full bool mask
  per_batch.table = {2, 65, 1, 32};
  per_batch.mask = {2, 1, 65, 65};
  per_batch.mask_type = DType::Bool;
  all_precisions(per_batch, 83);
  Case halves_off = packed(1, 50, 2, 1, 40);  // halves of 20: not whole 16-byte chunks
  halves_off.table = {1, 50, 1, 40};
  halves_off.causal = true;
  all_precisions(halves_off, 84);

  // Which route runs each: the kernel rotating inside where it can, else the rotary kernel first.
  ::setenv("FUSEC_CUDNN_SDPA", "0", 1);
  EXPECT_NE(kernel_of(llama, Precision::FP16).find("tensor-core causal masked packed-qkv rotary-inside"),
            std::string::npos)
      << kernel_of(llama, Precision::FP16);
  EXPECT_NE(kernel_of(halves_off, Precision::FP16).find("after rotary"), std::string::npos)
      << kernel_of(halves_off, Precision::FP16);
  ::setenv("FUSEC_CUDNN_SDPA", "1", 1);
  const std::string cudnn = kernel_of(llama, Precision::BF16);
  EXPECT_TRUE(cudnn.rfind("cuDNN SDPA bfloat16", 0) == 0 && cudnn.find("after rotary") != std::string::npos) << cudnn;
  ::unsetenv("FUSEC_CUDNN_SDPA");
  EXPECT_NE(kernel_of(llama, Precision::FP32).find("after rotary"), std::string::npos)
      << kernel_of(llama, Precision::FP32);
}

TEST(GpuAttention, SoftCappedScores) {
  FUSEC_REQUIRE_GPU();
  // Gemma 2's cap, small enough here that it bends most scores (Q spread to ±3, heads of 64 and
  // 128): GQA 3-D with a padding mask and the causal rule, 4-D odd lengths, packed QKV with rotary
  // tables, ONNX's own op, a decoder's causal mask staged whole. cuDNN's SDPA has no soft cap:
  // every half-precision run takes fusec's, the tensor-core kernel's capped instances (no mask,
  // the staged and the unstaged full mask, which takes the row mask) or the streaming kernel.
  Case gqa;
  gqa.q = {2, 77, 8 * 64};
  gqa.k = gqa.v = {2, 77, 2 * 64};
  gqa.q_heads = 8;
  gqa.kv_heads = 2;
  gqa.causal = true;
  gqa.mask = {2, 1, 1, 77};
  gqa.softcap = 2.5f;
  all_precisions(gqa, 91);
  Case odd;
  odd.q = odd.k = odd.v = {1, 3, 65, 128};
  odd.softcap = 4.0f;
  odd.mask = {1, 3, 65, 65};
  odd.mask_type = DType::Bool;
  all_precisions(odd, 92);
  Case packed;
  packed.packed = true;
  packed.q = {2, 50, (4 + 2 * 2) * 64};
  packed.q_heads = 4;
  packed.kv_heads = 2;
  packed.table = {1, 50, 1, 64};
  packed.causal = true;
  packed.softcap = 50.0f;
  all_precisions(packed, 93);
  Case standard;
  standard.standard = true;
  standard.q = standard.k = standard.v = {2, 2, 33, 32};
  standard.softcap = 3.0f;
  all_precisions(standard, 94);
  Case decoder;
  decoder.q = {2, 8, 128, 64};
  decoder.k = decoder.v = {2, 2, 128, 64};
  decoder.mask = {2, 1, 128, 128};
  decoder.softcap = 3.0f;
  OpCase dc = attention(decoder, 95);
  Tensor& m = dc.inputs[3];
  for (int64_t i = 0; i < m.numel(); ++i) {
    const int64_t b = i / (128 * 128), row = i / 128 % 128, col = i % 128;
    m.data<float>()[i] = col <= row && !(b == 1 && col >= 100) ? 0.0f : -1e30f;  // causal, batch 1 padded
  }
  all_precisions(dc);
  ::setenv("FUSEC_CUDNN_SDPA", "1", 1);
  EXPECT_EQ(kernel_of(gqa, Precision::FP16).rfind("cuDNN", 0), std::string::npos) << kernel_of(gqa, Precision::FP16);
  ::unsetenv("FUSEC_CUDNN_SDPA");
  for (const Case* k : {&gqa, &odd, &packed}) {
    const std::string kernel = kernel_of(*k, Precision::BF16);
    EXPECT_NE(kernel.find("tensor-core"), std::string::npos) << kernel;
  }
}

TEST(GpuAttention, FourDimensionalOddLengths) {
  FUSEC_REQUIRE_GPU();
  for (int64_t s : {1, 63, 65, 100, 200}) {
    SCOPED_TRACE("seq " + std::to_string(s));
    Case k;
    k.q = k.k = k.v = {1, 3, s, 64};
    all_precisions(k, 20 + s);
  }
}

TEST(GpuAttention, CausalUnequalLengths) {
  FUSEC_REQUIRE_GPU();
  for (auto [sq, sk] : std::vector<std::pair<int64_t, int64_t>>{{70, 130}, {130, 70}, {128, 128}, {1, 33}}) {
    SCOPED_TRACE("Sq " + std::to_string(sq) + " Skv " + std::to_string(sk));
    Case k;
    k.q = {2, 2, sq, 32};
    k.k = k.v = {2, 2, sk, 32};
    k.causal = true;
    all_precisions(k, 40 + sq);
  }
}

TEST(GpuAttention, GroupedQueryHeads3d) {
  FUSEC_REQUIRE_GPU();
  Case k;
  k.q = {2, 77, 8 * 128};
  k.k = k.v = {2, 77, 2 * 128};
  k.q_heads = 8;
  k.kv_heads = 2;
  k.causal = true;
  all_precisions(k, 60);
}

TEST(GpuAttention, BoolAndFloatMasksBroadcast) {
  FUSEC_REQUIRE_GPU();
  for (DType mt : {DType::Bool, DType::Float32})
    for (std::vector<int64_t> md : {std::vector<int64_t>{50, 90}, {2, 1, 50, 90}, {1, 4, 1, 90}, {2, 4, 50, 90}}) {
      SCOPED_TRACE(std::string(dtype_name(mt)) + " mask " + dims_str(md));
      Case k;
      k.q = {2, 4, 50, 48};
      k.k = k.v = {2, 4, 90, 48};
      k.mask = md;
      k.mask_type = mt;
      k.scale = 0.3f;
      all_precisions(k, 80);
    }
}

// MaxViT's block and grid attention once fuse_attention merged its [B, G] batch (attention_batch.h):
// many windows of 49 tokens, heads of 32, a relative-position bias per head broadcast over every
// window, in the 3-D form.
TEST(GpuAttention, WindowsOfFortyNineTokensWithAPerHeadBias) {
  FUSEC_REQUIRE_GPU();
  for (int64_t heads : {int64_t{2}, int64_t{5}}) {
    SCOPED_TRACE(std::to_string(heads) + " heads");
    Case k;
    k.q = k.k = k.v = {37, 49, heads * 32};
    k.q_heads = k.kv_heads = heads;
    k.mask = {1, heads, 49, 49};
    k.scale = 0.18f;
    all_precisions(k, 120);
  }
}

/// Q [2, 4, 70, 64] against K and V of 160 keys (two query blocks, the second partial; three key
/// tiles, the last partial), under each mask shape of `dims`, bool and additive.
void staged_masks(const std::vector<std::vector<int64_t>>& dims, uint64_t seed) {
  for (DType mt : {DType::Bool, DType::Float32})
    for (const auto& md : dims) {
      SCOPED_TRACE(std::string(dtype_name(mt)) + " mask " + dims_str(md));
      Case k;
      k.q = {2, 4, 70, 64};
      k.k = k.v = {2, 4, 160, 64};
      k.mask = md;
      k.mask_type = mt;
      all_precisions(k, seed);
    }
}

// Masks whose key rows fill whole 16-byte chunks: the tensor-core kernel copies each key tile's
// values (a row mask's one row, a full mask's 64 rows of the block) into shared memory beside K and
// V. One mask for all heads, one per head, one broadcast over the batch.
TEST(GpuAttention, RowMasksStagedInSharedMemory) {
  FUSEC_REQUIRE_GPU();
  staged_masks({{2, 1, 1, 160}, {2, 4, 1, 160}, {1, 4, 1, 160}}, 90);
}

TEST(GpuAttention, FullMasksStagedInSharedMemory) {
  FUSEC_REQUIRE_GPU();
  staged_masks({{2, 1, 70, 160}, {2, 4, 70, 160}, {1, 4, 70, 160}}, 95);
}

// A decoder's mask as transformers exports it (GPT-2, Llama): causal and padding in one [B, 1, S, S]
// tensor, Where(And(tril, attention_mask), 0, -FLT_MAX), over grouped heads (8 query heads on 2 key
// heads); batch 1 has its last 40 tokens padded, so its rows see fewer keys than the diagonal allows.
// 136 tokens take the flash kernel; 128 and 104 the grouped kernel too.
TEST(GpuAttention, DecoderCausalPaddingMaskOverGroupedHeads) {
  FUSEC_REQUIRE_GPU();
  for (int64_t s : {136, 128, 104}) {
    SCOPED_TRACE("S " + std::to_string(s));
    Case k;
    k.q = {2, 8, s, 64};
    k.k = k.v = {2, 2, s, 64};
    k.mask = {2, 1, s, s};
    OpCase c = attention(k, 97);
    float* m = c.inputs[3].data<float>();
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < s; ++i)
        for (int j = 0; j < s; ++j) m[(b * s + i) * s + j] = j <= i && j < s - 40 * b ? 0.0f : -FLT_MAX;
    all_precisions(c);
  }
}

// Where a staged full mask is far (-inf, a false bool, a finfo.min-like fill) for the rest of a
// tile, a warp whose rows have all seen a key stops computing it (mma_tile.cuh's warp_tile); a
// warp with a row that has not goes on, so fully masked rows come out as before. Each mask over 12
// heads (GPT-2's layout) and over grouped heads, at lengths on and off the 64-key tiles:
//   - causal with a -1e30 fill and batch 1's last 30 keys padded (whole tiles far for batch 1);
//   - a window of 40 keys behind each row (-1e30; the far keys are at both ends of a row);
//   - causal as a bool mask;
//   - causal with batch 1's first 20 keys padded at -inf: rows 0..19 see no key (zeros), and the
//     warp of rows 16..31 must go past its reach for rows 16..19.
TEST(GpuAttention, DecoderMasksStopAtTheirLastKey) {
  FUSEC_REQUIRE_GPU();
  enum Form { kCausalTail, kWindow, kBoolCausal, kCausalLeftInf };
  for (int64_t s : {128, 200, 72})
    for (Form f : {kCausalTail, kWindow, kBoolCausal, kCausalLeftInf})
      for (auto [hq, hk] : std::vector<std::pair<int64_t, int64_t>>{{12, 12}, {8, 2}}) {
        SCOPED_TRACE("S " + std::to_string(s) + " form " + std::to_string(f) + " heads " + std::to_string(hq) + "/" +
                     std::to_string(hk));
        Case k;
        k.q = {2, hq, s, 64};
        k.k = k.v = {2, hk, s, 64};
        k.mask = {2, 1, s, s};
        k.mask_type = f == kBoolCausal ? DType::Bool : DType::Float32;
        OpCase c = attention(k, 300 + s + f);
        Tensor& m = c.inputs[3];
        for (int b = 0; b < 2; ++b)
          for (int64_t i = 0; i < s; ++i)
            for (int64_t j = 0; j < s; ++j) {
              const int64_t at = (b * s + i) * s + j;
              bool keep = j <= i;
              if (f == kCausalTail) keep = keep && !(b == 1 && j >= s - 30);
              if (f == kWindow) keep = keep && j > i - 40;
              if (f == kCausalLeftInf) keep = keep && !(b == 1 && j < 20);
              if (f == kBoolCausal)
                m.data<uint8_t>()[at] = keep;
              else
                m.data<float>()[at] = keep ? 0.0f : f == kCausalLeftInf ? -INFINITY : -1e30f;
            }
        all_precisions(c);
      }
}

TEST(GpuAttention, HeadSizesPadToTiles) {
  FUSEC_REQUIRE_GPU();
  for (auto [d, dv] : std::vector<std::pair<int64_t, int64_t>>{{8, 8}, {40, 24}, {96, 128}, {128, 72}}) {
    SCOPED_TRACE("D " + std::to_string(d) + " Dv " + std::to_string(dv));
    Case k;
    k.q = {1, 2, 70, d};
    k.k = {1, 2, 90, d};
    k.v = {1, 2, 90, dv};
    all_precisions(k, 100 + d);
  }
}

TEST(GpuAttention, StandardOpset23) {
  FUSEC_REQUIRE_GPU();
  Case k;
  k.standard = true;
  k.q = {2, 40, 4 * 64};
  k.k = k.v = {2, 60, 2 * 64};
  k.q_heads = 4;
  k.kv_heads = 2;
  k.mask = {40, 60};
  all_precisions(k, 120);
}

// Opset 25's sliding window: no CUDA kernel masks by it, so the node runs on the CPU reference at
// every precision (the kernels once ran it and ignored the window: ONNX's local-window node tests
// gave other numbers on the GPU).
TEST(GpuAttention, SlidingWindowRunsOnTheCpu) {
  FUSEC_REQUIRE_GPU();
  Case k;
  k.standard = true;
  k.q = k.k = k.v = {2, 3, 12, 16};
  k.causal = true;
  for (auto window : {std::make_pair(int64_t{3}, int64_t{-1}), std::make_pair(int64_t{-1}, int64_t{2}),
                      std::make_pair(int64_t{4}, int64_t{4})}) {
    OpCase c = attention(k, 150);
    c.opset = 25;
    c.attrs.push_back(attr("left_window_size", window.first));
    c.attrs.push_back(attr("right_window_size", window.second));
    SCOPED_TRACE(std::to_string(window.first) + " " + std::to_string(window.second));
    all_precisions(c, /*on_gpu=*/false);
  }
  // -1 on both sides is no window: the GPU takes it.
  OpCase none = attention(k, 151);
  none.opset = 25;
  none.attrs.push_back(attr("left_window_size", int64_t{-1}));
  all_precisions(none);
}

TEST(GpuAttention, LargeHeadSizeFallsBackToCpu) {
  FUSEC_REQUIRE_GPU();
  // Past 256 (cuDNN's and the streaming kernel's widest): the CPU at every precision.
  Case k;
  k.q = k.k = k.v = {1, 2, 16, 264};
  all_precisions(k, 140, /*on_gpu=*/false);
  for (Precision p : kAll) {
    SCOPED_TRACE(precision_name(p));
    EXPECT_EQ(kernel_of(k, p).rfind("cpu: the CUDA attention kernels take head sizes 1..256", 0), 0u)
        << kernel_of(k, p);
  }
}

// Head sizes past the fast kernels' 128 (Gemma's 256) run on cuDNN's SDPA at half precision: GQA,
// causal, an additive mask, and the packed form with rotary tables (the rotary kernel, then cuDNN).
// At float32, with FUSEC_CUDNN_SDPA=0, with a mask cuDNN does not take (bool) or a soft cap, the
// streaming kernel's 256-wide tile runs them (a head of 160 too, at float32). The soft cap also
// checks that cuDNN's plan cache tells a capped problem from the same uncapped one.
TEST(GpuAttention, HeadSizesOver128RunOnCudnnSdpa) {
  FUSEC_REQUIRE_GPU();
  Case gemma;
  gemma.q = {2, 4, 40, 256};
  gemma.k = gemma.v = {2, 2, 40, 256};
  gemma.mask = {2, 1, 40, 40};
  gemma.causal = true;
  Case packed;
  packed.packed = true;
  packed.q = {2, 24, (4 + 2 * 2) * 256};
  packed.q_heads = 4;
  packed.kv_heads = 2;
  packed.causal = true;
  packed.mask = {2, 1, 1, 24};
  packed.table = {1, 24, 1, 256};
  Case d192 = gemma;  // a head size between the two limits
  d192.q = {2, 4, 40, 192};
  d192.k = d192.v = {2, 2, 40, 192};
  for (Precision p : {Precision::FP16, Precision::BF16}) {
    SCOPED_TRACE(precision_name(p));
    expect_gpu_matches_cpu(attention(gemma, 150), p, -1, true, "cuDNN SDPA");
    expect_gpu_matches_cpu(attention(packed, 151), p, -1, true, "cuDNN SDPA");
    expect_gpu_matches_cpu(attention(d192, 152), p, -1, true, "cuDNN SDPA");
  }
  EXPECT_NE(kernel_of(packed, Precision::FP16).find("after rotary"), std::string::npos)
      << kernel_of(packed, Precision::FP16);
  // The streaming kernel: every precision at fp32, and where cuDNN does not take the case.
  for (const Case* k : {&gemma, &packed, &d192})
    expect_gpu_matches_cpu(attention(*k, 155), Precision::FP32, -1, true, "fused attention float32 streaming");
  ::setenv("FUSEC_CUDNN_SDPA", "0", 1);
  for (Precision p : {Precision::FP16, Precision::BF16})
    expect_gpu_matches_cpu(attention(gemma, 156), p, -1, true, "streaming");
  ::unsetenv("FUSEC_CUDNN_SDPA");
  Case boolmask = gemma;
  boolmask.mask_type = DType::Bool;
  Case capped = packed;
  capped.softcap = 50.0f;
  Case odd;
  odd.q = odd.k = odd.v = {1, 3, 70, 160};
  for (Precision p : kAll) {
    SCOPED_TRACE(precision_name(p));
    expect_gpu_matches_cpu(attention(boolmask, 153), p, -1, true, "streaming");
    expect_gpu_matches_cpu(attention(capped, 154), p, -1, true, "streaming");
    // 160 is a multiple of 8: cuDNN's SDPA takes it at half precision.
    expect_gpu_matches_cpu(attention(odd, 157), p, -1, true, p == Precision::FP32 ? "streaming" : "cuDNN SDPA");
  }
}

TEST(GpuAttention, KernelChoice) {
  FUSEC_REQUIRE_GPU();
  const Case bert = bert_case();
  EXPECT_EQ(kernel_of(bert, Precision::FP32).rfind("fused attention float32", 0), 0u)
      << kernel_of(bert, Precision::FP32);
  // At half precision cuDNN's SDPA (the build has the cuDNN frontend: scripts/setup.sh installs it),
  // the tensor-core kernel or the grouped one, whichever the tuner timed fastest; each can be forced.
  const std::string tuned = kernel_of(bert, Precision::FP16);
  EXPECT_TRUE(tuned.rfind("cuDNN SDPA float16", 0) == 0 || tuned.rfind("fused attention float16 tensor-core", 0) == 0 ||
              tuned.rfind("fused attention float16 grouped, 1 head a block", 0) == 0)
      << tuned;
  ::setenv("FUSEC_CUDNN_SDPA", "1", 1);
  EXPECT_EQ(kernel_of(bert, Precision::FP16).rfind("cuDNN SDPA float16", 0), 0u) << kernel_of(bert, Precision::FP16);
  ::setenv("FUSEC_CUDNN_SDPA", "0", 1);
  EXPECT_EQ(kernel_of(bert, Precision::FP16).rfind("fused attention float16 tensor-core", 0), 0u)
      << kernel_of(bert, Precision::FP16);
  ::setenv("FUSEC_ATTN_MMA", "0", 1);
  EXPECT_EQ(kernel_of(bert, Precision::FP16).rfind("fused attention float16 streaming", 0), 0u)
      << kernel_of(bert, Precision::FP16);
  ::unsetenv("FUSEC_ATTN_MMA");
  ::unsetenv("FUSEC_CUDNN_SDPA");
  // cuDNN takes no bool mask: the own kernels run it, the flash kernel and (at this short sequence)
  // the grouped one racing; without the grouped kernel, the flash kernel, untimed.
  Case boolmask = bert;
  boolmask.mask_type = DType::Bool;
  const std::string own = kernel_of(boolmask, Precision::BF16);
  EXPECT_TRUE(own.rfind("fused attention bfloat16 tensor-core", 0) == 0 ||
              own.rfind("fused attention bfloat16 grouped, 1 head a block", 0) == 0)
      << own;
  ::setenv("FUSEC_ATTN_GROUP", "0", 1);
  EXPECT_EQ(kernel_of(boolmask, Precision::BF16).rfind("fused attention bfloat16 tensor-core", 0), 0u)
      << kernel_of(boolmask, Precision::BF16);
  ::unsetenv("FUSEC_ATTN_GROUP");
  // A head size off the tensor-core kernel's 8-element chunks takes the streaming kernel.
  Case odd;
  odd.q = odd.k = odd.v = {1, 2, 30, 20};
  odd.mask = {1, 1, 1, 30};
  odd.mask_type = DType::Bool;
  EXPECT_EQ(kernel_of(odd, Precision::FP16).rfind("fused attention float16 streaming", 0), 0u)
      << kernel_of(odd, Precision::FP16);
}

// The attention tuner's pick is remembered in the tuning cache and obeyed by a warm plan: a
// remembered "own" runs the tensor-core kernel, "cudnn" cuDNN's SDPA, and a value it cannot read
// is timed again and rewritten.
TEST(GpuAttention, TheTunersPickIsRememberedAndObeyed) {
  FUSEC_REQUIRE_GPU();
  const ScopedTuningCache scoped("attention_tune");
  auto& cache = cuda::TuningCache::global();
  const Case bert = bert_case();
  const std::string cold = kernel_of(bert, Precision::FP16);
  const std::string key = scoped.key_containing("attention2|cudnn ");
  ASSERT_FALSE(key.empty()) << "no attention entry in " << scoped.path();
  const std::string pick = cache.get(key).value_or("");
  // BERT's heads share no keys, so the grouped kernel runs one head a block.
  ASSERT_TRUE(pick == "own" || pick == "cudnn" || pick == "group 1") << pick;
  const char* expected = pick == "own"     ? "fused attention float16 tensor-core"
                         : pick == "cudnn" ? "cuDNN SDPA float16"
                                           : "fused attention float16 grouped, 1 head a block";
  EXPECT_EQ(cold.rfind(expected, 0), 0u) << cold;
  cache.put(key, "own");
  EXPECT_EQ(kernel_of(bert, Precision::FP16).rfind("fused attention float16 tensor-core", 0), 0u);
  cache.put(key, "cudnn");
  EXPECT_EQ(kernel_of(bert, Precision::FP16).rfind("cuDNN SDPA float16", 0), 0u);
  cache.put(key, "group 1");
  EXPECT_EQ(kernel_of(bert, Precision::FP16).rfind("fused attention float16 grouped, 1 head a block", 0), 0u);
  cache.put(key, "garbage");
  kernel_of(bert, Precision::FP16);
  const std::string again = cache.get(key).value_or("");
  EXPECT_TRUE(again == "own" || again == "cudnn" || again == "group 1") << again;
}

// Which cases the grouped kernel takes, and what a forced run is called: Llama's packed, rotated,
// causal GQA at 128 tokens at the whole group (4 heads) or at 2 heads a block; not at 130 keys
// (the flash kernel), nor with a mask per head.
TEST(GpuAttention, GroupedKernelChoice) {
  FUSEC_REQUIRE_GPU();
  Case llama;
  llama.packed = true;
  llama.q = {2, 128, (16 + 2 * 4) * 64};
  llama.q_heads = 16;
  llama.kv_heads = 4;
  llama.causal = true;
  llama.mask = {2, 1, 1, 128};
  llama.table = {1, 128, 1, 64};
  ::setenv("FUSEC_CUDNN_SDPA", "0", 1);
  ::setenv("FUSEC_ATTN_GROUP", "64", 1);
  EXPECT_NE(kernel_of(llama, Precision::FP16).find("grouped, 4 heads a block causal masked packed-qkv rotary-inside"),
            std::string::npos)
      << kernel_of(llama, Precision::FP16);
  ::setenv("FUSEC_ATTN_GROUP", "3", 1);  // the largest divisor of 4 up to 3
  EXPECT_NE(kernel_of(llama, Precision::BF16).find("grouped, 2 heads a block"), std::string::npos)
      << kernel_of(llama, Precision::BF16);
  Case longer = llama;
  longer.q = {2, 130, (16 + 2 * 4) * 64};
  longer.mask = {2, 1, 1, 130};
  longer.table = {1, 130, 1, 64};
  EXPECT_NE(kernel_of(longer, Precision::FP16).find("tensor-core causal"), std::string::npos)
      << kernel_of(longer, Precision::FP16);
  Case per_head;
  per_head.q = {2, 8, 64, 64};
  per_head.k = per_head.v = {2, 2, 64, 64};
  per_head.mask = {2, 8, 64, 64};
  EXPECT_NE(kernel_of(per_head, Precision::FP16).find("tensor-core"), std::string::npos)
      << kernel_of(per_head, Precision::FP16);
  ::unsetenv("FUSEC_ATTN_GROUP");
  ::unsetenv("FUSEC_CUDNN_SDPA");
  all_precisions(attention(llama, 171));
  all_precisions(attention(longer, 172));
}

TEST(GpuAttention, FullyMaskedRowIsZero) {
  FUSEC_REQUIRE_GPU();
  // Query row 3 sees no key: the CPU reference writes zeros there, and so must the GPU.
  Case k;
  k.q = k.k = k.v = {1, 2, 20, 32};
  OpCase c = attention(k, 160);
  Tensor m(DType::Bool, {20, 20});
  for (int64_t i = 0; i < m.numel(); ++i) m.data<uint8_t>()[i] = (i / 20 == 3) ? 0 : ((i * 7) % 5 != 0);
  for (int64_t i = 0; i < 20; ++i) m.data<uint8_t>()[i * 20 + i] = i == 3 ? 0 : 1;  // every other row sees its own key
  c.inputs.push_back(std::move(m));
  all_precisions(c);
}

TEST(GpuAttention, FullyMaskedRowsOfAnAdditiveMaskAreZero) {
  FUSEC_REQUIRE_GPU();
  // transformers' sdpa mask as fuse_attention hands it over (Where(keep, 0, -inf), added; torch's
  // safe-softmax guard is part of the pattern and zeroes the rows that see no key): [B, 1, S, S]
  // floats, batch 0 causal with its first 3 keys padding (query rows 0..2 see no key), batch 1 all
  // padding (no row sees a key). Those rows are zeros on every kernel, cuDNN's SDPA (fp16/bf16,
  // which takes additive masks) included, as on the CPU.
  Case k;
  k.q = k.k = k.v = {2, 4, 40, 64};
  k.mask = {2, 1, 40, 40};
  OpCase c = attention(k, 250);
  float* m = c.inputs[3].data<float>();
  for (int i = 0; i < 40; ++i)
    for (int j = 0; j < 40; ++j) {
      m[i * 40 + j] = j <= i && j >= 3 ? 0.0f : -INFINITY;
      m[1600 + i * 40 + j] = -INFINITY;
    }
  all_precisions(c);
}

TEST(GpuAttention, RowsMaskedWithFltMaxAverageV) {
  FUSEC_REQUIRE_GPU();
  // The dynamo exporter's fill is -FLT_MAX: a row with every key at -FLT_MAX is finite, its softmax
  // uniform, and the row the mean of V (as the graph computes it; fuse_attention keeps that fill).
  // fp32, where -FLT_MAX is representable: the row-broadcast [B, 1, 1, S] mask (tiled kernel) and
  // the full [B, 1, S, S] one (streaming kernel).
  for (std::vector<int64_t> dims : {std::vector<int64_t>{2, 1, 1, 40}, std::vector<int64_t>{2, 1, 40, 40}}) {
    Case k;
    k.q = k.k = k.v = {2, 4, 40, 64};
    k.mask = dims;
    OpCase c = attention(k, 260);
    float* m = c.inputs[3].data<float>();
    const int64_t per_batch = c.inputs[3].numel() / 2;
    for (int64_t i = 0; i < per_batch; ++i) {
      m[i] = i % 40 < 5 ? -FLT_MAX : 0.0f;  // batch 0: keys 0..4 masked
      m[per_batch + i] = -FLT_MAX;          // batch 1: every key
    }
    expect_gpu_matches_cpu(c, Precision::FP32);
  }
}

namespace {

/// BERT-base's attention over packed QKV [16, 128, 3·768] with its [16, 1, 1, 128] float mask, as
/// the factory describes it (addresses only need their alignment here).
cuda::AttentionArgs bert_packed_args() {
  cuda::AttentionArgs a;
  a.dtype = DType::Float32;
  a.batch = 16;
  a.q_heads = a.kv_heads = 12;
  a.q_len = a.kv_len = 128;
  a.head_dim = a.v_head_dim = 64;
  a.qs = a.ks = a.vs = {128 * 2304, 64, 2304};
  a.ys = {128 * 768, 64, 768};
  const uintptr_t base = 1 << 20;
  a.q = reinterpret_cast<const void*>(base);
  a.k = reinterpret_cast<const void*>(base + 768 * 4);
  a.v = reinterpret_cast<const void*>(base + 1536 * 4);
  a.y = reinterpret_cast<void*>(base << 4);
  a.mask = reinterpret_cast<const void*>(base << 5);
  a.mask_dtype = DType::Float32;
  a.mask_stride[0] = 128;
  a.mask_stride[3] = 1;
  a.scale = 0.125f;
  return a;
}

void expect_fp32(const Case& k, uint64_t seed) { expect_gpu_matches_cpu(attention(k, seed), Precision::FP32); }

}  // namespace

TEST(GpuAttention, TiledKernelChoice) {
  if (const char* e = env_switch("FUSEC_ATTN_TILED"); e && std::string(e) == "0") GTEST_SKIP() << "FUSEC_ATTN_TILED=0";
  const cuda::AttentionArgs bert = bert_packed_args();
  EXPECT_STREQ(cuda::attention_variant(bert), "fp32 tiled");
  cuda::AttentionArgs a = bert;
  a.mask = nullptr;
  a.mask_dtype = DType::Undefined;
  a.mask_stride[0] = a.mask_stride[3] = 0;
  EXPECT_STREQ(cuda::attention_variant(a), "fp32 tiled") << "no mask";
  a = bert;
  a.head_dim = a.v_head_dim = 32;
  a.kv_len = 1000;
  a.kv_heads = 4;
  EXPECT_STREQ(cuda::attention_variant(a), "fp32 tiled") << "head 32, long keys, grouped heads";
  // What stays on the streaming kernel.
  a = bert;
  a.causal = true;
  EXPECT_STREQ(cuda::attention_variant(a), "streaming") << "causal";
  a = bert;
  a.mask_stride[2] = 128;
  EXPECT_STREQ(cuda::attention_variant(a), "streaming") << "a mask per query row";
  // At half precision: the tensor-core kernel, unless a head size or stride is off its 8-element
  // chunks, or FUSEC_ATTN_MMA=0.
  a = bert;
  a.dtype = a.mask_dtype = DType::Float16;
  EXPECT_STREQ(cuda::attention_variant(a), "tensor-core") << "fp16";
  a.causal = true;
  a.mask_stride[2] = 128;
  a.kv_heads = 4;
  a.head_dim = 128;
  a.v_head_dim = 96;
  EXPECT_STREQ(cuda::attention_variant(a), "tensor-core") << "fp16, causal, row mask, grouped heads, head 128/96";
  a.head_dim = 60;
  EXPECT_STREQ(cuda::attention_variant(a), "streaming") << "fp16, head 60";
  a.head_dim = 64;
  a.ks.seq = 2300;
  EXPECT_STREQ(cuda::attention_variant(a), "streaming") << "fp16, a K row stride off 8 elements";
  a = bert;
  a.dtype = a.mask_dtype = DType::BFloat16;
  ::setenv("FUSEC_ATTN_MMA", "0", 1);
  EXPECT_STREQ(cuda::attention_variant(a), "streaming") << "bf16 with FUSEC_ATTN_MMA=0";
  ::unsetenv("FUSEC_ATTN_MMA");
  a = bert;
  a.head_dim = a.v_head_dim = 80;
  EXPECT_STREQ(cuda::attention_variant(a), "streaming") << "head 80";
  a = bert;
  a.head_dim = 62;
  EXPECT_STREQ(cuda::attention_variant(a), "streaming") << "head size not in float4s";
  a = bert;
  a.k = static_cast<const char*>(a.k) + 8;
  EXPECT_STREQ(cuda::attention_variant(a), "streaming") << "K not 16-byte aligned";
  a = bert;
  a.ys.seq = 770;
  EXPECT_STREQ(cuda::attention_variant(a), "streaming") << "Y rows not 16-byte aligned";
}

TEST(GpuAttention, TiledFp32Cases) {
  FUSEC_REQUIRE_GPU();
  {
    SCOPED_TRACE("BERT-base heads, no mask");
    Case k = bert_case();
    k.mask.clear();
    expect_fp32(k, 200);
  }
  {
    SCOPED_TRACE("packed QKV, 130 tokens (a partial key chunk and query tile), row mask");
    Case k = bert_case();
    k.packed = true;
    k.q = {2, 130, 3 * 768};
    k.mask = {2, 1, 1, 130};
    expect_fp32(k, 201);
  }
  {
    SCOPED_TRACE("packed QKV, 77 tokens, bool row mask");
    Case k = bert_case();
    k.packed = true;
    k.q = {2, 77, 3 * 768};
    k.mask = {2, 1, 1, 77};
    k.mask_type = DType::Bool;
    expect_fp32(k, 202);
  }
  for (int64_t d : {32, 64})
    for (auto [sq, sk] : std::vector<std::pair<int64_t, int64_t>>{{77, 77}, {70, 130}, {130, 300}, {1, 5}}) {
      SCOPED_TRACE("head " + std::to_string(d) + " Sq " + std::to_string(sq) + " Skv " + std::to_string(sk));
      Case k;
      k.q = {2, 3, sq, d};
      k.k = k.v = {2, 3, sk, d};
      k.mask = {2, 3, 1, sk};  // one row per batch and head
      expect_fp32(k, 210 + d + sk);
    }
  {
    SCOPED_TRACE("grouped heads 8/2, head 48/32 for Q·K/V, no mask");
    Case k;
    k.q = {2, 77, 8 * 48};
    k.k = {2, 77, 2 * 48};
    k.v = {2, 77, 2 * 32};
    k.q_heads = 8;
    k.kv_heads = 2;
    expect_fp32(k, 220);
  }
}

TEST(GpuAttention, TiledExcludedKeyChunks) {
  FUSEC_REQUIRE_GPU();
  // Batch 0 excludes its first 128 keys (whole key chunks, so the running max starts at -inf),
  // batch 1 every key (its rows must be zeros, as the CPU reference writes them).
  Case k;
  k.q = {2, 2, 70, 64};
  k.k = k.v = {2, 2, 200, 64};
  k.mask = {2, 1, 1, 200};
  OpCase c = attention(k, 230);
  float* m = c.inputs[3].data<float>();
  for (int j = 0; j < 200; ++j) {
    if (j < 128) m[j] = -INFINITY;
    m[200 + j] = -INFINITY;
  }
  expect_gpu_matches_cpu(c, Precision::FP32);
}

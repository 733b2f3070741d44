// ai.fusec Rotary (rotary.cu) against the CPU reference at fp32, fp16 and bf16: the head-size form
// on a projection [B, S, H·D] with [1, S, 1, D] tables (as fuse_rotary writes Llama's), the 4-D
// form with per-batch and computed tables, GQA-sized K projections, packed QKV rows where only Q's
// and K's heads rotate, heads whose half is not a multiple of the widest vector, and the
// interleaved and partial forms (GPT-J, Phi), and QK-norm (each rotated head RMS- or
// LayerNorm-normalized first: Qwen3, Persimmon, Gemma 3; or runs of heads as one: OLMo 2).
#include "gpu_test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

const Precision kAll[] = {Precision::FP32, Precision::FP16, Precision::BF16};

/// Values on a 1/64 grid in [-1, 1]: exact in every precision.
Tensor grid(std::vector<int64_t> dims, uint64_t seed) {
  Tensor t = random_tensor(DType::Float32, dims, seed, -1, 1);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::round(t.data<float>()[i] * 64.0f) / 64.0f;
  return t;
}

OpCase rotary(std::vector<int64_t> x, std::vector<int64_t> table, int64_t head_size, uint64_t seed,
              bool tables_constant = true) {
  OpCase c;
  c.op = "Rotary";
  c.domain = "ai.fusec";
  c.inputs = {grid(x, seed), grid(table, seed + 1), grid(table, seed + 2)};
  if (tables_constant) c.constant = {1, 2};
  if (head_size) c.attrs = {attr("head_size", head_size)};
  return c;
}

void all_precisions(const OpCase& c) {
  for (Precision p : kAll) {
    SCOPED_TRACE(precision_name(p));
    expect_gpu_matches_cpu(c, p, -1, true, "rotary");
  }
}

}  // namespace

TEST(GpuRotary, HeadSizeFormOnAProjection) {
  FUSEC_REQUIRE_GPU();
  all_precisions(rotary({2, 128, 32 * 64}, {1, 128, 1, 64}, 64, 10));  // Llama's Q, 16-byte vectors
  all_precisions(rotary({2, 128, 8 * 64}, {1, 128, 1, 64}, 64, 20));   // its GQA K
  all_precisions(rotary({3, 7, 5 * 128}, {1, 7, 1, 128}, 128, 30));
}

TEST(GpuRotary, FourDimFormsAndBroadcasts) {
  FUSEC_REQUIRE_GPU();
  all_precisions(rotary({2, 4, 9, 64}, {1, 1, 9, 64}, 0, 40));
  all_precisions(rotary({2, 4, 9, 32}, {2, 1, 9, 32}, 0, 50, false));  // per-batch positions, computed tables
  all_precisions(rotary({3, 9, 16}, {9, 16}, 0, 60));
}

TEST(GpuRotary, PackedQkvRotatesQueryAndKeyHeadsOnly) {
  FUSEC_REQUIRE_GPU();
  // Llama's packed rows [Q 32 heads | K 8 | V 8] of 64: 40 heads rotate, V's 8 are copied.
  OpCase c = rotary({2, 128, 48 * 64}, {1, 128, 1, 64}, 64, 100);
  c.attrs.push_back(attr("rotated", int64_t{40 * 64}));
  all_precisions(c);
  OpCase odd = rotary({3, 5, 7 * 6}, {1, 5, 1, 6}, 6, 110);  // scalar path, 5 of 7 heads
  odd.attrs.push_back(attr("rotated", int64_t{5 * 6}));
  all_precisions(odd);
}

TEST(GpuRotary, HalvesThatAreNotAVectorMultiple) {
  FUSEC_REQUIRE_GPU();
  all_precisions(rotary({2, 5, 3 * 6}, {1, 5, 1, 6}, 6, 70));    // half 3: scalar path
  all_precisions(rotary({2, 5, 3 * 12}, {1, 5, 1, 12}, 12, 80));  // half 6: 8-byte vectors at fp32, else scalar
  all_precisions(rotary({1, 1, 2}, {1, 1, 2}, 0, 90));
}

TEST(GpuRotary, InterleavedPairs) {
  FUSEC_REQUIRE_GPU();
  // GPT-J/CodeGen/Cohere's rotate_every_two: pairs (2i, 2i + 1), on the projection per head, on a
  // 4-D head view, and a head of 6 (pairs that straddle 8-byte vectors: scalar path).
  OpCase proj = rotary({2, 64, 16 * 64}, {1, 64, 1, 64}, 64, 200);
  proj.attrs.push_back(attr("interleaved", int64_t{1}));
  all_precisions(proj);
  OpCase four = rotary({2, 4, 9, 32}, {2, 1, 9, 32}, 0, 210, false);
  four.attrs.push_back(attr("interleaved", int64_t{1}));
  all_precisions(four);
  OpCase odd = rotary({3, 5, 4 * 6}, {1, 5, 1, 6}, 6, 220);
  odd.attrs.push_back(attr("interleaved", int64_t{1}));
  all_precisions(odd);
}

TEST(GpuRotary, PartialRotationCopiesTheRestOfEachHead) {
  FUSEC_REQUIRE_GPU();
  for (bool interleaved : {false, true}) {
    SCOPED_TRACE(interleaved ? "interleaved" : "half-split");
    // Phi's 32 of 80 and GPT-J's 64 of 256 per head; 24 of 64 on a 4-D view; 6 of 10 (scalar path);
    // packed rows where Q's and K's heads rotate in part and V's are copied.
    struct Case {
      std::vector<int64_t> x, table;
      int64_t head, rot, rotated;
    };
    const Case cases[] = {{{2, 33, 8 * 80}, {1, 33, 1, 32}, 80, 32, 0},
                          {{2, 16, 4 * 256}, {1, 16, 1, 64}, 256, 64, 0},
                          {{2, 3, 9, 64}, {1, 1, 9, 24}, 0, 24, 0},
                          {{3, 5, 7 * 10}, {1, 5, 1, 6}, 10, 6, 0},
                          {{2, 17, 6 * 80}, {1, 17, 1, 32}, 80, 32, 4 * 80}};
    uint64_t seed = interleaved ? 300 : 400;
    for (const Case& k : cases) {
      OpCase c = rotary(k.x, k.table, k.head, seed += 10);
      c.attrs.push_back(attr("rotary_dim", k.rot));
      if (interleaved) c.attrs.push_back(attr("interleaved", int64_t{1}));
      if (k.rotated) c.attrs.push_back(attr("rotated", k.rotated));
      all_precisions(c);
    }
  }
}

TEST(GpuRotary, QkNormNormalizesEachRotatedHeadFirst) {
  FUSEC_REQUIRE_GPU();
  // fuse_qk_norm's rotations: RMS (1) or LayerNorm (2) over each rotated head, then the rotation.
  struct Case {
    const char* what;
    std::vector<int64_t> x, table;
    int64_t head, rotated, rotary_dim, norm;
    std::vector<int64_t> rows;  // the scale's (and bias's) dims
    bool bias;
  };
  const Case cases[] = {
      // Qwen3's packed rows [Q 16 | K 8 | V 8] of 128: a row of scale per rotated head.
      {"Qwen3 packed", {2, 33, 32 * 128}, {1, 33, 1, 128}, 128, 24 * 128, 0, 1, {24, 128}, false},
      {"one row for every head", {2, 17, 8 * 64}, {1, 17, 1, 64}, 64, 0, 0, 1, {64}, false},
      {"4-D, LayerNorm with a bias", {2, 3, 9, 64}, {1, 1, 9, 64}, 0, 0, 0, 2, {64}, true},
      // Persimmon: partial rotation, LayerNorm, packed.
      {"partial, packed, LayerNorm", {2, 17, 6 * 80}, {1, 17, 1, 32}, 80, 4 * 80, 32, 2, {4, 80}, true},
      {"scalar path", {3, 5, 7 * 6}, {1, 5, 1, 6}, 6, 5 * 6, 0, 1, {5, 6}, false},
      // Gemma 3's 256 (16 lanes a head at fp16) and a head wider than a warp's units.
      {"head 256", {2, 16, 4 * 256}, {1, 16, 1, 256}, 256, 3 * 256, 0, 1, {3, 256}, false},
      {"head 1024", {1, 3, 2 * 1024}, {1, 3, 1, 1024}, 1024, 0, 0, 2, {1024}, true},
  };
  uint64_t seed = 500;
  for (const Case& k : cases) {
    for (bool interleaved : {false, true}) {
      SCOPED_TRACE(std::string(k.what) + (interleaved ? ", interleaved" : ""));
      OpCase c = rotary(k.x, k.table, k.head, seed += 10);
      c.attrs.push_back(attr("norm", k.norm));
      c.attrs.push_back(attr("epsilon", 1e-5f));
      if (k.rotated) c.attrs.push_back(attr("rotated", k.rotated));
      if (k.rotary_dim) c.attrs.push_back(attr("rotary_dim", k.rotary_dim));
      if (interleaved) c.attrs.push_back(attr("interleaved", int64_t{1}));
      c.inputs.push_back(grid(k.rows, seed + 3));
      c.constant.insert(3);
      if (k.bias) {
        c.inputs.push_back(grid(k.rows, seed + 4));
        c.constant.insert(4);
      }
      all_precisions(c);
    }
  }
}

TEST(GpuRotary, QkNormOverRunsOfHeads) {
  FUSEC_REQUIRE_GPU();
  // OLMo 2's norm over the whole projection (norm_groups): one run of a row's heads, or Q's and
  // K's runs of packed rows with V's heads copied (GQA: runs of unequal sizes), at every vector
  // width, partial, LayerNorm with a bias.
  struct Case {
    const char* what;
    std::vector<int64_t> x, table;
    int64_t head, rotated, rotary_dim, norm;
    std::vector<int64_t> runs;
    bool bias;
  };
  const Case cases[] = {
      {"one projection", {2, 33, 16 * 64}, {1, 33, 1, 64}, 64, 0, 0, 1, {16}, false},
      {"packed GQA [Q 8 | K 2 | V 2]", {2, 17, 12 * 128}, {1, 17, 1, 128}, 128, 10 * 128, 0, 1, {8, 2}, false},
      {"packed, three runs, LayerNorm", {2, 9, 7 * 64}, {1, 9, 1, 64}, 64, 6 * 64, 0, 2, {3, 1, 2}, true},
      {"partial, odd head", {3, 5, 5 * 10}, {1, 5, 1, 6}, 10, 0, 6, 1, {5}, false},
  };
  uint64_t seed = 700;
  for (const Case& k : cases) {
    for (bool interleaved : {false, true}) {
      SCOPED_TRACE(std::string(k.what) + (interleaved ? ", interleaved" : ""));
      OpCase c = rotary(k.x, k.table, k.head, seed += 10);
      int64_t heads = 0;
      for (int64_t n : k.runs) heads += n;
      c.attrs.push_back(attr("norm", k.norm));
      c.attrs.push_back(attr("epsilon", 1e-5f));
      c.attrs.push_back(attr("norm_groups", k.runs));
      if (k.rotated) c.attrs.push_back(attr("rotated", k.rotated));
      if (k.rotary_dim) c.attrs.push_back(attr("rotary_dim", k.rotary_dim));
      if (interleaved) c.attrs.push_back(attr("interleaved", int64_t{1}));
      c.inputs.push_back(grid({heads, k.head}, seed + 3));
      c.constant.insert(3);
      if (k.bias) {
        c.inputs.push_back(grid({heads, k.head}, seed + 4));
        c.constant.insert(4);
      }
      all_precisions(c);
    }
  }
}

#include "passes/pipeline.h"

#include <algorithm>
#include <chrono>

#include "ir/error.h"
#include "passes/cleanup.h"
#include "passes/canonicalize.h"
#include "passes/channels_last_tokens.h"
#include "passes/compose_movement.h"
#include "passes/constant_folding.h"
#include "passes/fold_batchnorm.h"
#include "passes/fuse_attention.h"
#include "passes/fuse_conv_activation.h"
#include "passes/fuse_elementwise.h"
#include "passes/fuse_expert_matmul.h"
#include "passes/fuse_gated_matmul.h"
#include "passes/fuse_layernorm_gelu.h"
#include "passes/fuse_matmul_bias.h"
#include "passes/fuse_rotary.h"
#include "passes/unpack_projection.h"
#include "passes/fuse_rotary_attention.h"
#include "passes/fuse_skip_layernorm.h"
#include "passes/fuse_squeeze_excite.h"
#include "passes/infer_shapes.h"
#include "passes/fuse_qk_norm.h"
#include "passes/merge_qkv.h"
#include "passes/recognize_gelu.h"
#include "passes/recognize_layernorm.h"
#include "passes/select_rows_early.h"

namespace fusec {

std::vector<std::unique_ptr<Pass>> default_pipeline() {
  std::vector<std::unique_ptr<Pass>> p;
  // 1. Cleanup first: Constant nodes become initializers and no-ops vanish, so every later
  //    pattern sees constants one way and adjacent ops really are adjacent.
  p.push_back(std::make_unique<CleanupPass>());
  // 2. Fold constants (and, with bound shapes, whole Shape->...->Reshape subgraphs) before
  //    matching: fusions need their weights, epsilons and axes as constants.
  p.push_back(std::make_unique<ConstantFoldingPass>());
  // A projection cut per group into Q, K and V (GPT-NeoX's [H, 3·D] rows) becomes one projection
  // each, so that the rotary and attention passes see Llama's form and merge_qkv packs it.
  p.push_back(std::make_unique<UnpackProjectionPass>());
  // One spelling for what torch's two exporters (and others) write differently, once shapes and
  // constant targets are folded: every pattern below then has one form to match, whichever
  // exporter wrote the model (dynamo's Kᵀ through a 3-D view, legacy's Div(1, y) in RMSNorm).
  p.push_back(std::make_unique<CanonicalizePass>());
  // Mixture-of-experts products of weights gathered per row, while the Gather, MatMul and Squeeze
  // are still apart: before compose_movement merges the views the pattern is read from.
  p.push_back(std::make_unique<FuseExpertMatMulPass>());
  // Rotary position embeddings before the movement and attention passes: the head split in front
  // of each moves behind it, where compose_movement and fuse_attention see it, and before
  // fuse_elementwise would take the rotation's Mul/Add into a kernel that still needs the Slices.
  p.push_back(std::make_unique<FuseRotaryPass>());
  // Movement chains composed (and row permutations moved across row-wise products) before
  // fuse_attention: sequence-first attention (nn.MultiheadAttention) then has BERT's head split of
  // packed QKV and its head merge, and fuses in the 3-D form.
  p.push_back(std::make_unique<ComposeMovementPass>());
  // Tokens into and out of a conv through 4-D channels-last permutations, which a CUDA plan stores
  // as views: after compose_movement, which has made patch embeddings GEMMs and composed the
  // chains (it leaves this form alone: it has no more copies than the 3-D one).
  p.push_back(std::make_unique<ChannelsLastTokensPass>());
  // BN/per-channel Mul/Add into Conv/Gemm weights, before activation fusion hides the Conv -> BN edge.
  p.push_back(std::make_unique<FoldBatchNormPass>());
  // Recognizers run after folding (and fold_batchnorm): their epsilons, 0.5/√2 constants, axes and
  // the function body's Shape->Reshape targets must already be constants. Gelu first, so that
  // fusions keyed on an activation (MatMul+Gelu, LayerNorm+Gelu) see one Gelu node.
  p.push_back(std::make_unique<RecognizeGeluPass>());
  // LayerNormalization / SimplifiedLayerNorm from ReduceMean..Sqrt..Div; before the fusions that read them.
  p.push_back(std::make_unique<RecognizeLayerNormPass>());
  // A per-head norm of Q or K (QK-norm) and a scalar on Q in front of a rotation go into or behind
  // the Rotary, and the head split then behind it as fuse_rotary moves it: after the norms are
  // nodes, before fuse_attention, which then reads the projection in place as for Llama.
  p.push_back(std::make_unique<FuseQkNormPass>());
  // Attention after folding (its scale, causal slice and head-split Reshape targets must be
  // constants, so the heads are known) and before the passes that would take its pieces: the
  // MatMul bias fusion would absorb a 1-D constant mask Add into Q·Kᵀ, and the elementwise fusion
  // would merge the scale, the mask and RoPE into one kernel. The Q/K/V projections' bias Adds are
  // not part of the pattern, so their FusedMatMul feeding the 3-D Attention comes after.
  p.push_back(std::make_unique<FuseAttentionPass>());
  // A constant selection of rows (a classifier's [CLS] token) moves above the row-wise ops in front
  // of it, so they compute only those rows: after the recognizers (a LayerNorm or a GELU is one
  // node to move through, not a chain to break up) and after fuse_attention (an attention is not
  // row-wise and is left whole); before the fusions, which then fuse the narrowed ops.
  p.push_back(std::make_unique<SelectRowsEarlyPass>());
  // Residual Add + LayerNorm before LayerNorm + Gelu: a post-LN block's LayerNorm reads a residual sum;
  // a MatMul-bias Add is left alone, so a Linear -> LayerNorm -> Gelu still gets LayerNormGelu.
  p.push_back(std::make_unique<FuseSkipLayerNormPass>());
  // LayerNorm + Gelu last: it needs both recognized, and a LayerNorm already fused with its skip is not one.
  p.push_back(std::make_unique<FuseLayerNormGeluPass>());
  // Conv (BN folded) + residual Add + activation -> FusedConv; after recognize_gelu, so Conv -> Gelu is one node.
  p.push_back(std::make_unique<FuseConvActivationPass>());
  // After the LayerNorm/GELU fusions (a GELU is one node to absorb), before fuse_elementwise takes the Add.
  p.push_back(std::make_unique<FuseMatMulBiasPass>());
  // Q/K/V projections -> one GEMM writing packed QKV for the 3-D Attention: after fuse_attention
  // (the Attention exists) and right after fuse_matmul_bias (each projection is one FusedMatMul
  // whose bias is a constant operand, so three of them concatenate into one).
  p.push_back(std::make_unique<MergeQkvPass>());
  // The rotation of packed QKV's Q and K heads into the attention reading them: after merge_qkv,
  // which writes that rotation as one Rotary over the packed rows.
  p.push_back(std::make_unique<FuseRotaryAttentionPass>());
  // The gated MLP's projections and gating -> GatedMatMul: after fuse_matmul_bias (a projection's
  // bias and a GELU gate are inside its FusedMatMul), before fuse_elementwise takes the gating.
  p.push_back(std::make_unique<FuseGatedMatMulPass>());
  // Squeeze-and-excite blocks -> one node: after fuse_conv_activation (each layer is one FusedConv
  // with its activation inside), before fuse_elementwise would take the broadcast Mul.
  p.push_back(std::make_unique<FuseSqueezeExcitePass>());
  // Last: mops up the elementwise chains the specific fusions left, one kernel per region.
  p.push_back(std::make_unique<FuseElementwisePass>());
  return p;
}

std::vector<std::string> pipeline_pass_names() {
  std::vector<std::string> names;
  for (const auto& p : default_pipeline()) names.push_back(p->name());
  return names;
}

namespace {

/// Whether `what` (a near-miss's description: "MatMul 'a' + MatMul 'b' -> ...") quotes one of
/// `names` as a node's name.
bool names_any(const std::string& what, const std::vector<std::string>& names) {
  for (const auto& n : names)
    if (!n.empty() && what.find("'" + n + "'") != std::string::npos) return true;
  return false;
}

}  // namespace

void merge_near_misses(std::vector<NearMiss>& all, std::vector<NearMiss> sweep, const std::vector<Rewrite>& rewrites) {
  // Near-misses accumulate over sweeps: a pattern that almost matched in sweep 1 may be consumed
  // by a later pass (e.g. elementwise fusion) and be invisible in the final sweep.
  for (auto& m : sweep) {
    bool seen = false;
    for (const auto& k : all) seen |= k.pass == m.pass && k.what == m.what && k.reason == m.reason;
    if (!seen) all.push_back(std::move(m));
  }
  // But one that the same pass went on to rewrite (merge_qkv once a later sweep has made two
  // rotations' tables one constant) was not missed: --explain would report a fusion that happened
  // as one that did not.
  std::erase_if(all, [&](const NearMiss& m) {
    for (const auto& w : rewrites)
      if (w.pass == m.pass && names_any(m.what, w.replaced)) return true;
    return false;
  });
}

OptimizeResult optimize_graph(Graph& g, const PipelineOptions& opts) {
  auto passes = default_pipeline();
  auto names = pipeline_pass_names();
  auto check = [&](const std::vector<std::string>& list, const char* flag) {
    for (const auto& n : list)
      if (std::find(names.begin(), names.end(), n) == names.end()) {
        std::string all;
        for (const auto& x : names) all += (all.empty() ? "" : ", ") + x;
        bad_input(std::string(flag) + ": there is no pass '" + n + "'; the passes are: " + all);
      }
  };
  check(opts.only, "--passes");
  check(opts.skip, "--skip");
  auto enabled = [&](const std::string& n) {
    if (!opts.only.empty() && std::find(opts.only.begin(), opts.only.end(), n) == opts.only.end()) return false;
    return std::find(opts.skip.begin(), opts.skip.end(), n) == opts.skip.end();
  };

  OptimizeResult r;
  for (const auto& p : passes) r.per_pass.push_back({p->name(), 0, 0});
  bool changed = true;
  while (changed && r.iterations < opts.max_iterations) {
    changed = false;
    ++r.iterations;
    PassContext ctx(opts.pass);
    for (size_t i = 0; i < passes.size(); ++i) {
      if (!enabled(passes[i]->name())) continue;
      auto t0 = std::chrono::steady_clock::now();
      size_t before = ctx.rewrites.size();
      bool c = passes[i]->run(g, ctx);
      if (c) {
        // New nodes need types before the next pass matches on them.
        g.topo_sort();
        infer_shapes(g);
      }
      r.per_pass[i].ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      r.per_pass[i].rewrites += static_cast<int>(ctx.rewrites.size() - before);
      changed |= c;
    }
    r.rewrites.insert(r.rewrites.end(), ctx.rewrites.begin(), ctx.rewrites.end());
    merge_near_misses(r.near_misses, std::move(ctx.near_misses), ctx.rewrites);
  }
  return r;
}

}  // namespace fusec

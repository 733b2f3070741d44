// How the CUDA planner picks the memory layout of one node: NCHW as the model has it, or
// channels-last (NHWC) where cuDNN's tensor-core convs want it. A pure function of what the planner
// knows about the node, so that the rule is tested without a GPU (tests/gpu/test_layout_rule.cpp).
//
// The rule, in order:
//   - an op with no channels-last kernel runs NCHW (its input is made NCHW first if it is not);
//   - an op that follows its input (elementwise, reductions, BatchNormalization) runs in whichever
//     layout its input is in: it never asks for a layout change. One that reads several activations
//     (Concat) takes the layout most of their bytes are stored in, so the fewest bytes change
//     layout: DenseNet's concats of conv outputs stay channels-last. An elementwise op follows
//     where every input is the output's dims or layout-free (a per-channel [N,C,1,1] scale, a
//     scalar): the SE block's x * sigmoid(s) stays channels-last, planned over N,H,W,C dims
//     (nhwc_order);
//   - an op whose every output is layout-free (a global pool's [N,C,1,1], a reduction over H and W)
//     also follows its input: changing the layout of a whole activation for a result of a few
//     bytes per channel costs more than anything the other layout could save. The SE blocks of
//     MobileNetV3 and EfficientNet pool an activation that stays NCHW (it also feeds a broadcast
//     Mul), once per block;
//   - any other op with a channels-last kernel (convs, window pools) runs channels-last when its
//     input is 4-D or 5-D (channels_last_rank) in a type that runs channels-last at this precision
//     and every consumer of its output can take channels-last: it starts or continues a
//     channels-last region. A conv whose channels per group are not a multiple of 16 bytes, which
//     cuDNN pads in channels-last on every call, does not count a Concat among those consumers:
//     the Concat runs in either layout, and such a conv runs faster NCHW where nothing else needs
//     it channels-last. A 1x1 conv of such widths is not one of them: fusec's narrow-channel
//     kernel runs it unpadded (conv_pointwise_route.h).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace fusec::cuda {

/// Whether activations of this rank may be stored channels-last: N,C,H,W (2-D convs) and N,C,D,H,W
/// (3-D convs: video models), stored N,H,W,C and N,D,H,W,C.
inline bool channels_last_rank(size_t rank) { return rank == 4 || rank == 5; }

/// A value whose NCHW and NHWC memory coincide ([N,1,H,W], [N,C,1,1], and their 5-D forms), or any
/// value of a rank that is never stored channels-last: it never needs a layout change.
inline bool layout_free(const std::vector<int64_t>& d) {
  if (!channels_last_rank(d.size())) return true;
  int64_t spatial = 1;
  for (size_t i = 2; i < d.size(); ++i) spatial *= d[i];
  return d[1] == 1 || spatial == 1;
}

/// d left-padded with 1s to `rank`, as broadcasting aligns it against an output of that rank
/// (rank(d) <= rank).
inline std::vector<int64_t> pad_to_rank(const std::vector<int64_t>& d, size_t rank) {
  std::vector<int64_t> p(rank - (d.size() < rank ? d.size() : rank), 1);
  p.insert(p.end(), d.begin(), d.end());
  return p;
}

/// Whether an elementwise op of output `out` (4-D or 5-D) computes the same on channels-last
/// memory, planned over nhwc_order() dims: every input, padded to the output's rank, is `out`
/// itself (an activation, stored channels-last) or layout-free (its NCHW bytes are its NHWC bytes).
inline bool elementwise_follows(const std::vector<std::vector<int64_t>>& ins, const std::vector<int64_t>& out) {
  if (!channels_last_rank(out.size())) return false;
  for (const auto& d : ins) {
    if (d.size() > out.size()) return false;
    const auto p = pad_to_rank(d, out.size());
    if (p != out && !layout_free(p)) return false;
  }
  return true;
}

/// N,C,spatial... dims (padded to `rank`) in channels-last memory order, N,spatial...,C: what an
/// elementwise op planned channels-last indexes by.
inline std::vector<int64_t> nhwc_order(const std::vector<int64_t>& d, size_t rank = 4) {
  const auto p = pad_to_rank(d, rank);
  std::vector<int64_t> m{p[0]};
  m.insert(m.end(), p.begin() + 2, p.end());
  m.push_back(p[1]);
  return m;
}

/// The permutation that moves the channel dim last ([0,2,3,1] at rank 4, [0,2,3,4,1] at rank 5),
/// and its inverse, which moves it back to 1.
inline std::vector<int64_t> channels_last_perm(size_t rank) {
  std::vector<int64_t> p{0};
  for (size_t i = 2; i < rank; ++i) p.push_back(static_cast<int64_t>(i));
  p.push_back(1);
  return p;
}
inline std::vector<int64_t> channels_first_perm(size_t rank) {
  std::vector<int64_t> p{0, static_cast<int64_t>(rank) - 1};
  for (size_t i = 1; i + 1 < rank; ++i) p.push_back(static_cast<int64_t>(i));
  return p;
}

/// A Transpose between NCHW dims and N,H,W,C dims is a view of channels-last memory: ConvNeXt's
/// permute to channels-last before its LayerNorm and back after its MLP, and any model written
/// channels-last around convs (the same at rank 5, N,C,D,H,W and N,D,H,W,C).
enum class TransposeView {
  None,
  FromChannelsLast,  // perm [0,2,3,1] of a channels-last activation: its bytes, as a plain [N,H,W,C]
  ToChannelsLast,    // perm [0,3,1,2] of a plain [N,H,W,C]: its bytes, as a channels-last [N,C,H,W]
};

/// Which view a Transpose of `perm` is, given whether its input is stored channels-last and
/// whether its output's type may be (the precision's channels-last types, layout_rule's nhwc_dtype).
inline TransposeView transpose_view(const std::vector<int64_t>& perm, bool in_nhwc, bool out_may_be_nhwc) {
  if (!channels_last_rank(perm.size())) return TransposeView::None;
  if (perm == channels_last_perm(perm.size()) && in_nhwc) return TransposeView::FromChannelsLast;
  if (perm == channels_first_perm(perm.size()) && !in_nhwc && out_may_be_nhwc) return TransposeView::ToChannelsLast;
  return TransposeView::None;
}

/// How an op takes channels-last memory.
enum class ChannelsLast {
  None,         // no channels-last kernel
  Region,       // a channels-last kernel worth changing layout for: starts or continues an NHWC region
  FollowInput,  // runs in whichever layout its input is in
};

/// What the planner knows about a node when it picks its layout.
struct LayoutFacts {
  ChannelsLast kind = ChannelsLast::None;
  std::vector<int64_t> in_dims;                // input 0
  bool in_nhwc = false;                        // input 0 is stored channels-last
  bool nhwc_dtype = false;                     // input 0's storage type runs channels-last at this precision
  std::vector<std::vector<int64_t>> out_dims;  // each present output
  bool consumers_take_nhwc = false;            // every consumer of output 0 can take channels-last
};

/// The layout a follower of several activations takes: channels-last when most of their elements
/// are stored channels-last, the first one's layout on a tie. Each entry is one activation's element
/// count and whether it is stored channels-last.
inline bool majority_channels_last(const std::vector<std::pair<int64_t, bool>>& activations) {
  int64_t nhwc = 0, nchw = 0;
  for (const auto& [elements, channels_last] : activations) (channels_last ? nhwc : nchw) += elements;
  if (nhwc != nchw) return nhwc > nchw;
  return !activations.empty() && activations.front().second;
}

/// Whether to plan the node channels-last (the header comment gives the rule).
inline bool plan_channels_last(const LayoutFacts& f) {
  if (f.kind == ChannelsLast::None) return false;
  if (f.kind == ChannelsLast::FollowInput) return f.in_nhwc;
  if (!channels_last_rank(f.in_dims.size()) || !f.nhwc_dtype) return false;
  bool outputs_free = !f.out_dims.empty();
  for (const auto& d : f.out_dims) outputs_free = outputs_free && layout_free(d);
  if (outputs_free && !layout_free(f.in_dims)) return f.in_nhwc;
  return f.consumers_take_nhwc;
}

}  // namespace fusec::cuda

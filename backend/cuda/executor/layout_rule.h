// How the CUDA planner picks the memory layout of one node: NCHW as the model has it, or
// channels-last (NHWC) where cuDNN's tensor-core convs want it. A pure function of what the planner
// knows about the node, so that the rule is tested without a GPU (tests/gpu/test_layout_rule.cpp).
//
// The rule, in order:
//   - an op with no channels-last kernel runs NCHW (its input is made NCHW first if it is not);
//   - an op that follows its input (elementwise over equal dims, reductions) runs in whichever
//     layout its input is in: it never asks for a layout change;
//   - an op whose every output is layout-free (a global pool's [N,C,1,1], a reduction over H and W)
//     also follows its input: changing the layout of a whole activation for a result of a few
//     bytes per channel costs more than anything the other layout could save. The SE blocks of
//     MobileNetV3 and EfficientNet pool an activation that stays NCHW (it also feeds a broadcast
//     Mul), once per block;
//   - any other op with a channels-last kernel (convs, window pools) runs channels-last when its
//     input is 4-D in a type that runs channels-last at this precision and every consumer of its
//     output can take channels-last: it starts or continues a channels-last region.
#pragma once
#include <cstdint>
#include <vector>

namespace fusec::cuda {

/// A value whose NCHW and NHWC memory coincide ([N,1,H,W], [N,C,1,1]), or any value that is not
/// 4-D: it never needs a layout change.
inline bool layout_free(const std::vector<int64_t>& d) { return d.size() != 4 || d[1] == 1 || d[2] * d[3] == 1; }

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

/// Whether to plan the node channels-last (the header comment gives the rule).
inline bool plan_channels_last(const LayoutFacts& f) {
  if (f.kind == ChannelsLast::None) return false;
  if (f.kind == ChannelsLast::FollowInput) return f.in_nhwc;
  if (f.in_dims.size() != 4 || !f.nhwc_dtype) return false;
  bool outputs_free = !f.out_dims.empty();
  for (const auto& d : f.out_dims) outputs_free = outputs_free && layout_free(d);
  if (outputs_free && !layout_free(f.in_dims)) return f.in_nhwc;
  return f.consumers_take_nhwc;
}

}  // namespace fusec::cuda

// The pieces fuse_attention matches, each on its own: the chain of scale/mask ops between Q·Kᵀ
// and the Softmax, the Q/K/V operands with the head split (and GQA repeat) behind them, the head
// merge after P·V, and the constant masks that are exactly a causal triangle. Each returns what it
// found or says why not; none changes the graph. The rewrite is in fuse_attention.cpp.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace fusec::attention {

/// If `n` multiplies the data input `x` by a constant scalar (Mul(x, c), Mul(c, x), Div(x, c)), the
/// factor; else nullopt. The constant must not change x's shape (numel 1).
std::optional<double> scalar_factor(const Node* n, const Value* x);

/// Follows `v` back through Mul/Div by constant scalars; multiplies `scale` by their factors and
/// appends the nodes to `nodes`. Returns the value before them.
Value* peel_scale(Value* v, double& scale, std::vector<Node*>& nodes);

/// One op between Q·Kᵀ and the Softmax. Regroup is a Reshape, which fuse_attention takes only as
/// the pair that splits the batch into windows and merges it back (Swin's shifted windows).
/// HeadScale is a Mul by a constant per head ([H, 1, 1] against the scores' [.., H, Sq, Skv]: Swin
/// V2's learned temperature), the constant in `mask`. ClampLow is Max(·, −FLT_MAX) right after an
/// added mask (XGLM: a −∞ from two added masks kept at −FLT_MAX). An AddMask may be a Sub of the
/// mask from the scores (`negated`: Funnel's and XLNet's scores − 1e6·(1 − mask)). Tanh is the
/// middle of a soft cap, c·tanh(s / c) (Gemma 2): the scales around it give c and the scale.
struct ChainStep {
  enum Kind { Scale, AddMask, WhereMask, Regroup, HeadScale, ClampLow, Tanh } kind;
  Node* node = nullptr;
  double factor = 1;            // Scale
  Value* mask = nullptr;        // AddMask: the added tensor; WhereMask: the condition
  bool negated = false;         // AddMask: the tensor is subtracted
  bool keep_where_true = true;  // WhereMask: Where(cond, s, fill) (true) or Where(cond, fill, s)
  double fill = 0;              // WhereMask: the constant written at masked positions
};

/// Softmax(·) ◀─ steps ◀─ MatMul(Q', Kᵀ'). `qk` is null when no MatMul is reached; `why` is set
/// when one is reached through an op the pattern does not know (the near-miss reason).
struct ScoreChain {
  Node* qk = nullptr;
  std::vector<ChainStep> steps;  // from the MatMul outward
  std::string why;
};
ScoreChain walk_scores(Node* softmax);

/// torch's _safe_softmax guard after the Softmax, which the exporters write for every SDPA with a
/// mask:  P' = Where(IsNaN(P), 0, P)  (a row with every key masked is NaN after the Softmax; the
/// guard makes it 0, which is what Attention gives there). Found when the Softmax's output `probs`
/// is read by exactly that IsNaN and that Where: the IsNaN reads `probs` and only the Where reads
/// it, the Where's true branch is a constant 0 that does not broadcast P, its false branch is
/// `probs`. `why` is set when an IsNaN or a Where reading `probs` looks like the guard but is not
/// exactly it (the near-miss reason); both nodes are null then.
struct SoftmaxGuard {
  Node* isnan = nullptr;
  Node* where = nullptr;
  std::string why;
};
SoftmaxGuard match_softmax_guard(Value* probs);

/// A Q, K or V operand as the attention reads it.
struct Operand {
  Value* v4 = nullptr;       // [B, H, S, D]; null when the graph has only Kᵀ (Transpose(0,2,3,1) of bshd)
  Value* bshd = nullptr;     // [B, S, H, D] the head split produced, when seen
  Value* v3 = nullptr;       // [B, S, H·D] the head split's Reshape read (the 3-D form can use it)
  int64_t heads = 0;         // H of v4/bshd (for K/V: before a GQA repeat)
  int64_t repeat = 1;        // GQA repeat_kv factor absorbed (K and V)
  std::vector<Node*> nodes;  // transposes, reshapes, repeats, scales walked through
  // K when the graph has only Kᵀ as some other Transpose of a 4-D tensor (a sequence-first
  // [S, B, H, D]: nn.TransformerEncoder's default layout) or as a 4-D tensor of its own (K stored
  // transposed): K = Transpose(k_perm)(k_from), which the rewrite makes (a copy).
  Value* k_from = nullptr;
  std::vector<int64_t> k_perm;
};

/// Q at the first MatMul input (scales already peeled).
Operand match_query(Value* q);
/// K or V as 4-D [B, H, S, D]; absorbs a repeat_kv (Unsqueeze → Expand → Reshape) when `absorb_repeat`.
Operand match_kv(Value* kv, bool absorb_repeat);
/// Kᵀ at the second MatMul input (scales already peeled): Transpose(0,1,3,2) of a 4-D K (scales
/// before it are peeled into `scale`), Transpose(0,2,3,1) of the [B, S, H, D] head split, any
/// other Transpose of a 4-D tensor, or any other computed 4-D tensor (K then a Transpose of that
/// tensor: k_from, k_perm).
std::optional<Operand> match_key_transposed(Value* kt, bool absorb_repeat, double& scale);

/// [B, H, S, D] of an operand (from its 4-D tensor, or its [B, S, H, D] head split).
std::optional<Shape> bhsd(const Operand& o);
/// Whether both dims are the same known size (equal static values, or the same symbol).
bool same_known(const Dim& a, const Dim& b);
/// Whether the 3-D form can read `o`: its head split's [B, S, H·D] input, or, where something else
/// wrote the [B, S, H, D] tensor (RoPE after a per-head RMSNorm: Qwen3, Gemma 3), a view of it.
bool viewable_3d(const Operand& o);
/// `o` as the 3-D form reads it: the head split's input, or a Reshape [0, 0, H·D] of its
/// [B, S, H, D] tensor (a view: no copy), which this adds to `g`.
Value* as_3d(Graph& g, const Operand& o);

/// P·V ──▶ Transpose(0,2,1,3) ──▶ Reshape [B, S, H·Dv] (or [B·S, H·Dv], static): the merge's
/// Reshape, or null.
Node* match_head_merge(Node* pv);

/// True when `t` is, broadcast to [..., sq, skv] with only 1s in front, exactly the upper-left causal
/// pattern: bool true where j <= i (or, for `additive`, 0 where j <= i and <= −10⁴ where j > i).
bool is_causal_constant(const Tensor& t, int64_t sq, int64_t skv, bool additive);
/// True when some query row of the bool mask `t` (broadcast to [..., sq, skv]) has no true entry.
bool has_empty_row(const Tensor& t, int64_t sq, int64_t skv);
/// A fill value that masks a position as well as −∞ does (exp(fill − max) underflows to 0).
inline bool masks_like_neg_inf(double fill) { return fill <= -1e4; }

}  // namespace fusec::attention

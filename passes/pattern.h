// Small helpers every fusion uses to walk a pattern: who produces a value, whether it has a single
// reader, whether it is a constant and which one. Each returns "no" rather than failing, so a
// pass reads as pattern -> guards -> rewrite.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/pass.h"

namespace fusec {

/// The node producing `v` if its op type is `op` (domain ai.onnx or ai.fusec), else nullptr.
Node* producer_of(const Value* v, const std::string& op);
/// The only node reading `v`, if exactly one reads it once and `v` is not a graph output.
Node* sole_consumer(const Value* v);
/// `v`'s single consumer if its op type is `op`.
Node* sole_consumer_of(const Value* v, const std::string& op);
/// True when `v` is read by exactly one node input and is not a graph output.
bool has_single_use(const Value* v);
/// Number of reads of `v` (graph output counts as one).
size_t use_count(const Value* v);

/// `v`'s dims when its shape is known and static, else nullopt.
std::optional<std::vector<int64_t>> known_dims(const Value* v);
/// The constant Reshape target that makes dims `out` of dims `in` whatever their open dims are:
/// each static dim as it is, an open dim equal to in's at the same place as 0 (copy it; not under
/// allowzero, where 0 is an empty dim), and at most one other open dim as -1, which the input's
/// size then fixes. nullopt where no target can: an empty or unknown dim of `out`, two open dims
/// to infer.
std::optional<std::vector<int64_t>> reshape_target(const Shape& in, const Shape& out, bool allowzero = false);
/// `v`'s shape when its rank is known, else nullptr; its dims may be symbolic (a batch the model
/// leaves open) or unknown.
const Shape* known_rank(const Value* v);
/// The axes a reduction (ReduceMean and its kin) reduces over an input of rank `rank`, from its
/// `axes` attribute or constant input (none: every axis), normalized and sorted; nullopt with
/// `why` set when they are not constant, out of range, or none with noop_with_empty_axes.
std::optional<std::vector<int64_t>> reduced_axes(const Node* r, int64_t rank, std::string* why);
/// Whether two dims are the same for every binding: equal static values or the same symbol.
bool same_dim(const Dim& a, const Dim& b);
/// Whether two values have the same shape for every binding (same rank, every dim same_dim) and
/// the same dtype: a batch left open under one name matches itself, an unnamed dim nothing.
bool same_shape_and_type(const Value* a, const Value* b);
/// The initializer data of `v`, or nullptr (Constant nodes are turned into initializers by cleanup).
const Tensor* constant_of(const Value* v);
/// If `v` is a constant whose elements are all equal (any shape), that value.
std::optional<double> uniform_constant(const Value* v);
/// True if `v` is a constant equal to `want` everywhere within a relative tolerance.
bool is_constant_near(const Value* v, double want, double rel_tol = 1e-4);
/// For a binary node with one input `known`, the other input (nullptr if neither matches).
Value* other_input(const Node* n, const Value* known);
/// The ai.onnx opset the graph imports.
int64_t onnx_opset(const Graph& g);
/// Is the node's op `op` in the default domain.
bool is_op(const Node* n, const std::string& op);

/// Removes `nodes` and any values only they used (their outputs must no longer be read).
void erase_nodes(Graph& g, const std::vector<Node*>& nodes);

/// A new value of `dtype` and static `dims`: later rewrites of the same sweep can read its shape
/// before shape inference runs again.
Value* typed_value(Graph& g, const std::string& stem, DType dtype, const std::vector<int64_t>& dims);

/// A new 1-D int64 initializer holding `v` (a Reshape target, axes, pads).
Value* int64_initializer(Graph& g, const std::string& stem, const std::vector<int64_t>& v);

/// A Slice along one axis with step 1: the axis (normalized) and [begin, end) clamped to its
/// extent as ONNX clamps them.
struct AxisSlice {
  int64_t axis = 0, begin = 0, end = 0, step = 1;
};
/// `n` as an AxisSlice when it is a Slice whose starts, ends, axes and steps are one-element
/// constants (steps 1), its data's rank is known and the sliced axis is static (other dims may be
/// symbolic); else nullopt.
std::optional<AxisSlice> axis_slice(const Node* n);
/// The same for any positive step (begin and end clamped to the axis).
std::optional<AxisSlice> strided_axis_slice(const Node* n);

/// A Split's explicit output sizes (its `split` input, or before opset 13 its attribute); empty
/// when it gives none (equal parts); nullopt when the input is not a constant.
std::optional<std::vector<int64_t>> split_sizes(const Node* sp);

}  // namespace fusec

namespace fusec {

/// Makes every reader of `out` read `in` instead, so the node producing `out` can go. If `out` is
/// a graph output (its name must survive), `in`'s producer is made to write `out` directly
/// instead. Returns false when neither is possible (e.g. `in` is a graph input and `out` an output).
bool forward_value(Graph& g, Value* out, Value* in);

/// Where a fused op that standard ONNX has from opset `needed` should be written: "" (ai.onnx,
/// raising the model's opset if every other node keeps its meaning), "ai.fusec" (not portable),
/// or nullopt with `why` set when --portable forbids both.
std::optional<std::string> domain_for_standard_op(Graph& g, const PassOptions& opts, int64_t needed, std::string* why);
/// True if raising the ai.onnx opset to `to` keeps every default-domain node's schema the same.
bool can_raise_opset(const Graph& g, int64_t to, std::string* blocker = nullptr);
/// Declares the ai.fusec domain on the graph (version 1).
void use_fusec_domain(Graph& g);
/// The original node names behind `nodes` (a fused node stands for its fused_from list), in order:
/// what a new fused node records so the profiler can attribute it to the model's own nodes.
std::vector<std::string> fused_origins(const std::vector<Node*>& nodes);

}  // namespace fusec

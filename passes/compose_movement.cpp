// compose_movement: a chain of data-movement ops becomes at most one Slice and one Transpose (with
// free Reshapes around them), and a permutation of a row-wise product's rows moves to its other
// side when the chains there then compose into fewer copies.
//
// torch's nn.MultiheadAttention (ViT, any batch_first=False user of it) runs sequence-first, and
// the exporters write its head split as ten movement ops a layer. dynamo's ViT-B/16:
//
//   x [B,S,E] ─ Transpose(1,0,2) ─ Linear(3E) ─ Reshape [S,B,3,E] ─ Unsqueeze ─ Transpose(3,1,2,0,4)
//     ─ Squeeze ─ Gather(0, i) ─ Reshape [S,B·H,D] ─ Transpose(1,0,2) ─ Reshape [B,H,S,D]   (Q, K, V)
//   P·V [B,H,S,D] ─ Transpose(2,0,1,3) ─ Reshape [S·B,E] ─ Gemm ─ Reshape [S,B,E] ─ Transpose(1,0,2)
//
// Composed, Q is Transpose(0,2,1,3)(Reshape [B,S,H,D](Slice(Linear(x), last axis, [iE, (i+1)E]))),
// BERT's head split of a slice of packed QKV, and P·V goes through Transpose(0,2,1,3) and Reshape
// [B·S, E] to the Gemm: fuse_attention then takes the 3-D form, merge_qkv the packed one, and the
// layer moves no data outside its GEMMs and its attention.
//
// An open batch takes part as one more atom of unknown size (OpenDims below): views merge it with
// static dims and split it off again, and nothing indexes, slices or splits it.
//
// The algebra. A chain's source X has dims; each dim is a list of atoms (mixed-radix digits of its
// index, most significant first). A Transpose permutes the current dims' lists; a Reshape regroups
// the flattened atom sequence into the new sizes, splitting an atom in two where a new dim ends
// inside it (the split holds wherever the atom appears, since it is a digit of X's index); a
// Gather of one index fixes its dim's atoms to that index's digits and drops the dim; Squeeze and
// Unsqueeze are Reshapes. The end value Y is then X with some atoms fixed, the free atoms in Y's
// order. When the fixed atoms of each X dim are its leading ones, that is Slice(X) on those dims;
// atoms adjacent both in X and in Y merge; what is left is Reshape -> Transpose -> Reshape.
//
// A chain rewrites when the copies it makes (Transposes that move data, Gathers, Slices) go down
// for the whole tree of chains from one source: shared steps count once, and every chain of the
// tree must compose. Row-wise products (MatMul / FusedMatMul with a constant 2-D B and no
// residual, Gemm with transA = 0 and a row-vector C) commute with a permutation of their leading
// dims: a Transpose keeping the last axis before one moves after it when the tree of chains after
// it then composes into fewer copies; a permutation after a 2-D one (Reshape -> Transpose) moves
// before it when the chain before it then does.
//
// A patch embedding (ViT's 16x16 stride-16 Conv, whose output is flattened into tokens) is a
// movement and a GEMM: with the kernel equal to the stride, no padding and no dilation, the conv
// is Reshape [N,C,OH,kh,OW,kw] -> Transpose(0,2,4,1,3,5) -> Reshape [N·OH·OW, C·kh·kw] (the
// patches) -> Gemm with the filter as [M, C·kh·kw], and its output [N,M,OH,OW] is that product
// through Reshape [N,OH,OW,M] -> Transpose(0,3,1,2). It is rewritten so where the tokens' chain
// then cancels that Transpose (Reshape [N,M,OH·OW] -> Transpose(0,2,1) does): one copy of the
// input for the patches, none after. cuDNN ran ViT-B/16's (three input channels) at 48 GB/s, 0.23
// ms of a 2.3 ms batch; the GEMM is a few microseconds.
#include "passes/compose_movement.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <unordered_set>

#include "ir/dim_values.h"
#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec {

namespace {

const char* kPass = "compose_movement";

/// Open dims as numbers. Each name of an open dim (the batch, a product of it with static dims:
/// ir/dim_values.h) stands for its own prime far above any static dim, so the algebra below runs on
/// them as it runs on static ones: such an atom never splits (a prime has no factor to split
/// off), it merges with static atoms into the products the views name (12·batch), and a dim is
/// open exactly when it holds one. What is written back turns them into dims again, and a Reshape
/// target into 0 (the input's dim in place) or -1 (at most one).
class OpenDims {
 public:
  std::optional<std::vector<int64_t>> of(const Value* v) {
    if (!v || !v->type.shape) return std::nullopt;
    std::vector<int64_t> d;
    int64_t total = 1;
    for (const Dim& x : *v->type.shape) {
      const auto p = product_of(x);
      if (!p) return std::nullopt;
      int64_t n = p->coef;
      for (const std::string& name : p->names)
        if (__builtin_mul_overflow(n, prime(name), &n)) return std::nullopt;
      if (n <= 0 || __builtin_mul_overflow(total, n, &total) || total > (int64_t{1} << 62)) return std::nullopt;
      d.push_back(n);
    }
    return d;
  }
  bool open(int64_t d) const {
    for (const auto& [name, p] : primes_)
      if (d % p == 0) return true;
    return false;
  }
  Shape shape(const std::vector<int64_t>& dims) const {
    Shape out;
    for (int64_t d : dims) {
      DimProduct p;
      for (const auto& [name, q] : primes_)
        while (d % q == 0) {
          d /= q;
          p.names.push_back(name);
        }
      p.coef = d;
      std::sort(p.names.begin(), p.names.end());
      out.push_back(dim_of(p));
    }
    return out;
  }
  /// The Reshape target from `in` to `to` that holds whatever the open dims are, or nullopt.
  std::optional<std::vector<int64_t>> target(const std::vector<int64_t>& in, const std::vector<int64_t>& to) const {
    return reshape_target(shape(in), shape(to));
  }

 private:
  int64_t prime(const std::string& name) {
    auto it = primes_.find(name);
    if (it != primes_.end()) return it->second;
    auto is_prime = [](int64_t n) {
      for (int64_t k = 2; k * k <= n; ++k)
        if (n % k == 0) return false;
      return true;
    };
    do --next_;
    while (!is_prime(next_));
    return primes_[name] = next_;
  }
  int64_t next_ = int64_t{1} << 24;  // the primes below 2^24, one per name, descending
  std::map<std::string, int64_t> primes_;
};

OpenDims* open_dims = nullptr;  // the running pass's (ComposeMovementPass::run)

/// v's dims, open ones as OpenDims numbers; nullopt for an unknown dim.
std::optional<std::vector<int64_t>> dims_of(const Value* v) { return open_dims->of(v); }

/// A new value of these dims (OpenDims numbers).
Value* typed(Graph& g, const std::string& stem, DType dtype, const std::vector<int64_t>& dims) {
  Value* v = g.add_value(stem);
  v->type.dtype = dtype;
  v->type.shape = open_dims->shape(dims);
  return v;
}

/// One movement op as data.
struct Step {
  enum Kind { Reshape, Transpose, Gather } kind = Reshape;
  std::vector<int64_t> v;  // Reshape: the output dims; Transpose: the perm
  int64_t axis = 0, index = 0;
};

int64_t product(const std::vector<int64_t>& d) {
  return std::accumulate(d.begin(), d.end(), int64_t{1}, [](int64_t a, int64_t b) { return a * b; });
}

bool positive(const std::vector<int64_t>& d) {
  return std::all_of(d.begin(), d.end(), [](int64_t x) { return x > 0; });
}

/// `n` as a step, or nullopt when it is not a movement op of known dims (every dim > 0; an open
/// one as its OpenDims number).
std::optional<Step> step_of(const Node* n) {
  if (!n || !n->domain.empty() || n->outputs.size() != 1 || !n->input(0)) return std::nullopt;
  const auto in = dims_of(n->input(0)), out = dims_of(n->outputs[0]);
  if (!in || !out || !positive(*in) || !positive(*out)) return std::nullopt;
  Step s;
  const std::string& op = n->op_type;
  if (op == "Reshape" || op == "Squeeze" || op == "Unsqueeze" || op == "Flatten") {
    if (product(*in) != product(*out)) return std::nullopt;
    s.v = *out;
    return s;
  }
  if (op == "Transpose") {
    std::vector<int64_t> p = n->attr_ints("perm");
    if (p.empty()) {
      p.resize(in->size());
      std::iota(p.rbegin(), p.rend(), 0);
    }
    if (p.size() != in->size()) return std::nullopt;
    std::vector<int64_t> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i)
      if (sorted[i] != static_cast<int64_t>(i)) return std::nullopt;
    s.kind = Step::Transpose;
    s.v = std::move(p);
    return s;
  }
  if (op == "Gather") {
    const Tensor* idx = constant_of(n->input(1));
    if (!idx || idx->rank() != 0 || idx->numel() != 1) return std::nullopt;
    int64_t axis = n->attr_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(in->size());
    if (axis < 0 || axis >= static_cast<int64_t>(in->size())) return std::nullopt;
    if (open_dims->open((*in)[axis])) return std::nullopt;  // an index into an open dim
    int64_t i = idx->as_int64(0);
    if (i < 0) i += (*in)[axis];
    if (i < 0 || i >= (*in)[axis]) return std::nullopt;
    s.kind = Step::Gather;
    s.axis = axis;
    s.index = i;
    return s;
  }
  return std::nullopt;
}

/// Whether the step moves data: a Gather, or a Transpose that reorders dims larger than 1.
bool copies(const Step& s, const std::vector<int64_t>& in) {
  if (s.kind == Step::Gather) return true;
  if (s.kind != Step::Transpose) return false;
  int64_t last = -1;
  for (int64_t k : s.v) {
    if (in[k] == 1) continue;
    if (k < last) return true;
    last = k;
  }
  return false;
}

/// The atoms of a source and of the value the steps make of it (see the file comment).
struct Composer {
  std::vector<int64_t> size;          // per atom
  std::vector<int64_t> fixed;         // per atom: -1 free, else the digit a Gather chose
  std::vector<std::vector<int>> src;  // the source's dims
  std::vector<std::vector<int>> cur;  // the current value's dims

  explicit Composer(const std::vector<int64_t>& shape) {
    for (int64_t d : shape) {
      std::vector<int> dim;
      if (d != 1) dim.push_back(atom(d));
      src.push_back(dim);
    }
    cur = src;
  }
  int atom(int64_t s) {
    size.push_back(s);
    fixed.push_back(-1);
    return static_cast<int>(size.size()) - 1;
  }
  /// Atom a becomes (hi, size/hi) wherever it appears; returns hi.
  int split(int a, int64_t hi) {
    const int h = atom(hi), l = atom(size[a] / hi);
    for (auto* lists : {&src, &cur})
      for (auto& d : *lists) {
        auto it = std::find(d.begin(), d.end(), a);
        if (it != d.end()) d.insert(d.erase(it), {h, l});
      }
    return h;
  }
  bool apply(const Step& s) {
    switch (s.kind) {
      case Step::Transpose: {
        if (s.v.size() != cur.size()) return false;
        std::vector<std::vector<int>> out;
        for (int64_t k : s.v) out.push_back(cur[k]);
        cur = std::move(out);
        return true;
      }
      case Step::Gather: {
        if (s.axis >= static_cast<int64_t>(cur.size())) return false;
        int64_t i = s.index;
        const std::vector<int>& d = cur[s.axis];
        for (int a : d)
          if (open_dims->open(size[a])) return false;
        for (auto it = d.rbegin(); it != d.rend(); ++it) {
          fixed[*it] = i % size[*it];
          i /= size[*it];
        }
        if (i != 0) return false;
        cur.erase(cur.begin() + s.axis);
        return true;
      }
      case Step::Reshape:
        return reshape(s.v);
    }
    return false;
  }
  bool reshape(const std::vector<int64_t>& to) {
    std::vector<int> flat;
    for (const auto& d : cur) flat.insert(flat.end(), d.begin(), d.end());
    std::vector<std::vector<int>> out;
    size_t pos = 0;
    for (int64_t want : to) {
      std::vector<int> dim;
      int64_t prod = 1;
      while (prod < want) {
        if (pos >= flat.size()) return false;
        const int a = flat[pos];
        if (want % (prod * size[a]) == 0) {
          dim.push_back(a);
          prod *= size[a];
          ++pos;
        } else if (want % prod == 0 && size[a] % (want / prod) == 0) {
          const int64_t hi = want / prod;
          const int h = split(a, hi);
          flat[pos] = h;
          flat.insert(flat.begin() + static_cast<std::ptrdiff_t>(pos) + 1, h + 1);  // split made lo = h + 1
          dim.push_back(h);
          prod *= hi;
          ++pos;
        } else {
          return false;
        }
      }
      if (prod != want) return false;
      out.push_back(std::move(dim));
    }
    if (pos != flat.size()) return false;
    cur = std::move(out);
    return true;
  }
};

/// What a composed chain is: Slice(source) -> Reshape(mid) -> Transpose(perm) -> Reshape(out).
struct Plan {
  std::vector<int64_t> starts, ends, axes;  // the Slice; empty: none
  std::vector<int64_t> sliced;              // the source's dims after the Slice
  std::vector<int64_t> mid;                 // the merged atoms in the source's order
  std::vector<int64_t> perm;                // over mid; empty: identity
  std::vector<int64_t> out;
  int copies() const { return (axes.empty() ? 0 : 1) + (perm.empty() ? 0 : 1); }
};

std::optional<Plan> plan_chain(const std::vector<int64_t>& source, const std::vector<Step>& steps,
                               const std::vector<int64_t>& out) {
  if (!positive(source) || !positive(out) || product(source) == 0) return std::nullopt;
  Composer c(source);
  for (const Step& s : steps)
    if (!c.apply(s)) return std::nullopt;
  if (c.cur.size() != out.size()) return std::nullopt;
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t p = 1;
    for (int a : c.cur[i]) p *= c.size[a];
    if (p != out[i]) return std::nullopt;
  }
  Plan plan;
  plan.out = out;
  std::vector<int> free_src;  // the free atoms in the source's order
  for (size_t j = 0; j < c.src.size(); ++j) {
    const auto& d = c.src[j];
    size_t k = 0;
    int64_t index = 0;
    while (k < d.size() && c.fixed[d[k]] >= 0) index = index * c.size[d[k]] + c.fixed[d[k]], ++k;
    int64_t rest = 1;
    for (size_t m = k; m < d.size(); ++m) {
      if (c.fixed[d[m]] >= 0) return std::nullopt;  // a fixed digit below a free one: no one Slice
      rest *= c.size[d[m]];
      free_src.push_back(d[m]);
    }
    if (k > 0) {
      if (open_dims->open(source[j])) return std::nullopt;  // a Slice of an open dim
      plan.axes.push_back(static_cast<int64_t>(j));
      plan.starts.push_back(index * rest);
      plan.ends.push_back((index + 1) * rest);
    }
    plan.sliced.push_back(k > 0 ? rest : source[j]);
  }
  std::vector<int> target;
  for (const auto& d : c.cur) target.insert(target.end(), d.begin(), d.end());
  if (target.size() != free_src.size()) return std::nullopt;
  std::map<int, size_t> at;  // atom -> position in the target order
  for (size_t i = 0; i < target.size(); ++i) at[target[i]] = i;
  std::map<int, size_t> out_dim;  // atom -> the dim of the end value holding it
  for (size_t i = 0; i < c.cur.size(); ++i)
    for (int a : c.cur[i]) out_dim[a] = i;
  // Groups of atoms consecutive in both orders, in the source's order. Atoms of different dims of
  // the end value stay apart, so the Transpose reads as the head split the fusions match (Kᵀ as
  // Transpose(0,2,3,1) of [B,S,H,D], not Transpose(0,2,1) of [B,S,H·D]); past 6 groups they merge
  // anyway, within what the Transpose kernels take.
  auto group = [&](bool by_out_dim) {
    std::vector<std::pair<size_t, int64_t>> groups;  // (target position of the first atom, size)
    for (size_t i = 0; i < free_src.size(); ++i) {
      const int a = free_src[i];
      const size_t t = at.at(a);
      if (i > 0 && at.at(free_src[i - 1]) + 1 == t && (!by_out_dim || out_dim.at(free_src[i - 1]) == out_dim.at(a))) {
        groups.back().second *= c.size[a];
      } else {
        groups.push_back({t, c.size[a]});
      }
    }
    return groups;
  };
  auto groups = group(true);
  if (groups.size() > 6) groups = group(false);
  std::vector<int64_t> order(groups.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return groups[a].first < groups[b].first; });
  for (const auto& g : groups) plan.mid.push_back(g.second);
  bool identity = true;
  for (size_t i = 0; i < order.size(); ++i) identity = identity && order[i] == static_cast<int64_t>(i);
  if (!identity) plan.perm = order;
  return plan;
}

/// The movement steps from the nearest non-movement value up to `y`, and their nodes (in order).
struct Chain {
  Value* source = nullptr;
  std::vector<Step> steps;
  std::vector<Node*> nodes;
};

Chain chain_to(Value* y) {
  Chain c;
  Value* v = y;
  while (v->producer) {
    auto s = step_of(v->producer);
    if (!s) break;
    c.steps.insert(c.steps.begin(), *s);
    c.nodes.insert(c.nodes.begin(), v->producer);
    v = v->producer->input(0);
  }
  c.source = v;
  return c;
}

bool is_movement(const Node* n) { return step_of(n).has_value(); }

/// The movement nodes reachable from `x` through movement nodes, and the values among their outputs
/// that something else reads (a non-movement node, or the graph's outputs): the tree's chain ends.
struct Tree {
  std::vector<Node*> nodes;
  std::vector<Value*> ends;
};

Tree tree_from(Value* x) {
  Tree t;
  std::vector<Value*> frontier = {x};
  std::set<const Node*> seen;
  while (!frontier.empty()) {
    Value* v = frontier.back();
    frontier.pop_back();
    bool end = v != x && v->is_graph_output;
    for (Node* c : v->consumers) {
      if (c->input(0) == v && is_movement(c)) {
        if (seen.insert(c).second) {
          t.nodes.push_back(c);
          frontier.push_back(c->outputs[0]);
        }
      } else if (v != x) {
        end = true;
      }
    }
    if (end) t.ends.push_back(v);
  }
  return t;
}

int tree_copies(const Tree& t) {
  int n = 0;
  for (const Node* node : t.nodes) n += copies(*step_of(node), *dims_of(node->input(0)));
  return n;
}

/// The nodes `plan` becomes on a source of dims `xs`: each op with the dims it reads.
struct Op {
  std::string type;
  std::vector<int64_t> shape;  // Reshape: the target; Transpose: the perm
  std::vector<int64_t> in;     // the dims it reads
};
std::vector<Op> ops_of(const Plan& plan, const std::vector<int64_t>& xs) {
  std::vector<Op> ops;
  if (!plan.axes.empty()) ops.push_back({"Slice", {}, {}});
  if (plan.mid != plan.sliced) ops.push_back({"Reshape", plan.mid, {}});
  if (!plan.perm.empty()) ops.push_back({"Transpose", plan.perm, {}});
  std::vector<int64_t> before_out = plan.mid;
  if (!plan.perm.empty())
    for (size_t i = 0; i < plan.perm.size(); ++i) before_out[i] = plan.mid[plan.perm[i]];
  if (ops.empty() ? xs != plan.out : before_out != plan.out) ops.push_back({"Reshape", plan.out, {}});
  if (ops.empty()) ops.push_back({"Reshape", plan.out, {}});  // y must be written by something: a free view
  std::vector<int64_t> shape = xs;
  for (Op& op : ops) {
    op.in = shape;
    if (op.type == "Slice") {
      shape = plan.sliced;
    } else if (op.type == "Reshape") {
      shape = op.shape;
    } else {
      std::vector<int64_t> t(shape.size());
      for (size_t k = 0; k < t.size(); ++k) t[k] = shape[op.shape[k]];
      shape = t;
    }
  }
  return ops;
}

/// Whether every Reshape of the plan has a target that holds whatever the open dims are.
bool writable(const Plan& plan, const std::vector<int64_t>& xs) {
  for (const Op& op : ops_of(plan, xs))
    if (op.type == "Reshape" && !open_dims->target(op.in, op.shape)) return false;
  return true;
}

/// Writes `plan` on `x`: the last node writes `y` (whose producer, if any, must be gone already);
/// the others write new values. Returns the nodes added.
std::vector<Node*> emit(Graph& g, Value* x, const Plan& plan, Value* y, const std::string& stem) {
  std::vector<Node*> added;
  Value* v = x;
  const std::vector<Op> ops = ops_of(plan, *dims_of(x));
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    const std::vector<Op>::size_type next = i + 1;
    const std::vector<int64_t> shape = next < ops.size() ? ops[next].in : plan.out;
    Value* out = next == ops.size() ? y : typed(g, stem + "_" + op.type, x->type.dtype, shape);
    const std::string name = g.unique_node_name(stem + "_" + op.type);
    Node* n = nullptr;
    if (op.type == "Slice") {
      n = g.add_node("Slice",
                     {v, int64_initializer(g, name + "_starts", plan.starts),
                      int64_initializer(g, name + "_ends", plan.ends), int64_initializer(g, name + "_axes", plan.axes)},
                     {out}, name);
    } else if (op.type == "Reshape") {
      n = g.add_node("Reshape", {v, int64_initializer(g, name + "_shape", *open_dims->target(op.in, op.shape))}, {out},
                     name);
    } else {
      n = g.add_node("Transpose", {v}, {out}, name);
      n->set_attr("perm", op.shape);
    }
    added.push_back(n);
    v = out;
  }
  return added;
}

/// One run of the pass: its rewriter, and the nodes its rewrites removed (a sweep over a snapshot
/// of the node list skips them). Values nothing uses any more are dropped once, at the end.
struct Sweep {
  Rewriter& r;
  std::unordered_set<const Node*> erased;
  Graph& graph() const { return r.graph(); }
};

/// Removes the nodes of `nodes` that nothing reads any more, repeatedly.
void erase_dead(Sweep& s, std::vector<Node*> nodes) {
  for (bool again = true; again;) {
    again = false;
    for (auto it = nodes.begin(); it != nodes.end();) {
      if (s.erased.count(*it)) {  // removed already (release)
        it = nodes.erase(it);
        continue;
      }
      bool used = false;
      for (const Value* o : (*it)->outputs) used = used || (o && use_count(o) > 0);
      if (used) {
        ++it;
        continue;
      }
      s.graph().remove_node(*it);
      s.erased.insert(*it);
      it = nodes.erase(it);
      again = true;
    }
  }
}

/// Removes the node writing `y` (one of a rewrite's dead nodes), so that a new one can write it.
void release(Sweep& s, Value* y) {
  Node* old = y->producer;
  s.graph().remove_node(old);
  s.erased.insert(old);
}

/// Rewrites every end of `t` (rooted at `source`, optionally seen through a `prefix` step first)
/// from `from`, which stands for the source after the prefix; `plans` are the ends' plans.
void rewrite_ends(Sweep& s, const Tree& t, Value* from, const std::vector<Plan>& plans, const std::string& why,
                  std::vector<Node*> also_dead = {}) {
  Graph& g = s.graph();
  std::vector<std::string> replaced;
  std::vector<Node*> gone = t.nodes;
  gone.insert(gone.end(), also_dead.begin(), also_dead.end());
  std::vector<Node*> moves;  // the new movement nodes stand for the old ones
  for (Node* n : gone) {
    replaced.push_back(n->name);
    if (is_movement(n)) moves.push_back(n);
  }
  const std::vector<std::string> origins = fused_origins(moves);
  std::string result;
  for (size_t i = 0; i < t.ends.size(); ++i) {
    Value* y = t.ends[i];
    const std::string stem = y->producer->name;
    release(s, y);  // y is written by the new chain below
    std::vector<Node*> added = emit(g, from, plans[i], y, stem);
    for (Node* n : added) n->fused_from = origins;
    result = added.back()->name;
  }
  erase_dead(s, gone);
  s.r.rewrote(why, replaced, result);
}

/// Plans every end of `t` from a source of shape `source` after `prefix`; nullopt if one does not
/// compose.
std::optional<std::vector<Plan>> plan_tree(const Tree& t, Value* root, const std::vector<int64_t>& source,
                                           const std::vector<Step>& prefix) {
  std::vector<Plan> plans;
  for (Value* y : t.ends) {
    Chain c = chain_to(y);
    if (c.source != root) return std::nullopt;
    auto out = dims_of(y);
    if (!out) return std::nullopt;
    std::vector<Step> steps = prefix;
    steps.insert(steps.end(), c.steps.begin(), c.steps.end());
    auto p = plan_chain(source, steps, *out);
    if (!p || !writable(*p, source)) return std::nullopt;
    plans.push_back(*p);
  }
  return plans;
}

int plan_copies(const std::vector<Plan>& plans) {
  int n = 0;
  for (const Plan& p : plans) n += p.copies();
  return n;
}

/// A row-wise product: MatMul / FusedMatMul(A, B constant 2-D [, bias]) with no residual, or Gemm
/// with transA = 0, a constant B and no C or a row-vector C. Its rows are A's leading dims.
bool row_wise(const Node* n) {
  if (!n || n->outputs.size() != 1 || !n->input(0)) return false;
  const Tensor* b = constant_of(n->input(1));
  if (!b || b->rank() != 2) return false;
  if (is_op(n, "MatMul")) return n->inputs.size() == 2;
  if (n->op_type == "FusedMatMul" && n->domain == "ai.fusec") return n->inputs.size() < 4 || !n->input(3);
  if (is_op(n, "Gemm")) {
    if (n->attr_int("transA", 0) != 0) return false;
    if (n->inputs.size() < 3 || !n->input(2)) return true;
    auto c = dims_of(n->input(2)), y = dims_of(n->outputs[0]);
    return c && y && (c->size() == 1 || (c->size() == 2 && (*c)[0] == 1));
  }
  return false;
}

/// A copy of row-wise `n` reading `a` (of static dims) and writing a new value.
Node* clone_row_wise(Graph& g, const Node* n, Value* a) {
  std::vector<Value*> ins = n->inputs;
  ins[0] = a;
  std::vector<int64_t> dims = *dims_of(a);
  dims.back() = dims_of(n->outputs[0])->back();
  Value* out = typed(g, n->name + "_rows", n->outputs[0]->type.dtype, dims);
  Node* c = g.add_node(n->op_type, ins, {out}, g.unique_node_name(n->name), n->domain);
  c->attrs = n->attrs;
  c->fused_from = n->fused_from;
  return c;
}

/// Compose the chains of the tree rooted at `x` where that saves copies.
bool compose_tree(Sweep& s, Value* x) {
  if (constant_of(x)) return false;  // constant folding's
  const Tree t = tree_from(x);
  auto xs = dims_of(x);
  if (t.ends.empty() || !xs) return false;
  auto plans = plan_tree(t, x, *xs, {});
  if (!plans || plan_copies(*plans) >= tree_copies(t)) return false;
  const std::string why = std::to_string(t.nodes.size()) + " movement ops from '" + x->name + "' (" +
                          std::to_string(tree_copies(t)) + " copies) -> " + std::to_string(plan_copies(*plans)) +
                          " copies for " + std::to_string(t.ends.size()) + " value(s)";
  rewrite_ends(s, t, x, *plans, why);
  return true;
}

/// The bias Add after a MatMul `n` (before fuse_matmul_bias): Add(y, b) or Add(b, y) with b a
/// constant over the last dim only, y read by it alone; else nullptr.
Node* bias_add_after(const Node* n) {
  Value* y = n->outputs[0];
  if (!is_op(n, "MatMul") || !has_single_use(y) || !is_op(y->consumers[0], "Add")) return nullptr;
  Node* add = y->consumers[0];
  const Value* b = other_input(add, y);
  const Tensor* bt = constant_of(b);
  auto ys = dims_of(y), os = dims_of(add->outputs[0]);
  if (!bt || !ys || !os || *ys != *os || bt->numel() != ys->back() || static_cast<size_t>(bt->rank()) > ys->size())
    return nullptr;
  return add;
}

/// A Transpose keeping the last axis before row-wise `n` (and the bias Add after it, if any) moves
/// after it, where the chains after it then compose into fewer copies than the Transpose and the
/// chains make now.
bool sink_through(Sweep& s, Node* n) {
  if (!row_wise(n) || is_op(n, "Gemm")) return false;
  Node* tr = producer_of(n->input(0), "Transpose");
  if (!tr || !tr->domain.empty() || !has_single_use(tr->outputs[0])) return false;
  auto step = step_of(tr);
  auto zs = dims_of(tr->input(0)), ys = dims_of(n->outputs[0]);
  if (!step || !zs || !ys || zs->size() < 3 || step->v.back() != static_cast<int64_t>(zs->size()) - 1) return false;
  Node* add = bias_add_after(n);
  Value* y = add ? add->outputs[0] : n->outputs[0];
  if (y->is_graph_output) return false;
  for (const Node* c : y->consumers)
    if (c->input(0) != y || !is_movement(c)) return false;  // every reader must take the permutation
  const Tree t = tree_from(y);
  if (t.ends.empty()) return false;
  std::vector<int64_t> source = *zs;
  source.back() = ys->back();
  auto plans = plan_tree(t, y, source, {*step});
  const int before = tree_copies(t) + 1;
  if (!plans || plan_copies(*plans) >= before) return false;
  Graph& g = s.graph();
  Node* moved = clone_row_wise(g, n, tr->input(0));
  Value* from = moved->outputs[0];
  if (add) {
    std::vector<Value*> ins = add->inputs;
    ins[ins[0] == n->outputs[0] ? 0 : 1] = from;
    from = typed(g, add->name + "_rows", add->outputs[0]->type.dtype, *dims_of(from));
    Node* a2 = g.add_node("Add", ins, {from}, g.unique_node_name(add->name));
    a2->fused_from = add->fused_from;
  }
  const std::string why = describe(tr) + " moved after " + describe(n) + ", then " + std::to_string(t.nodes.size()) +
                          " movement ops (" + std::to_string(before) + " copies) -> " +
                          std::to_string(plan_copies(*plans)) + " copies";
  std::vector<Node*> dead = {n, tr};
  if (add) dead.insert(dead.begin(), add);
  rewrite_ends(s, t, from, *plans, why, dead);
  return true;
}

/// A permutation of the rows after a 2-D row-wise `n` (Reshape -> Transpose keeping the last axis
/// -> Reshape, one chain) moves before it, where the chain before it then composes into fewer
/// copies than the two chains make now.
bool hoist_through(Sweep& s, Node* n) {
  if (!row_wise(n)) return false;
  Value *a = n->input(0), *y2 = n->outputs[0];
  auto as = dims_of(a), y2s = dims_of(y2);
  if (!as || !y2s || as->size() != 2 || y2s->size() != 2 || y2->is_graph_output || !has_single_use(a)) return false;
  for (const Node* c : y2->consumers)
    if (c->input(0) != y2 || !is_movement(c)) return false;
  const Tree after = tree_from(y2);
  if (after.ends.size() != 1 || after.nodes.size() != chain_to(after.ends[0]).nodes.size()) return false;
  auto pa = plan_tree(after, y2, *y2s, {});
  if (!pa || !(*pa)[0].axes.empty() || (*pa)[0].perm.empty() || (*pa)[0].mid.size() < 2) return false;
  const Plan& p = (*pa)[0];
  // The row permutation: the last merged atom must be exactly the columns, kept last.
  if (p.mid.back() != (*y2s)[1] || p.perm.back() != static_cast<int64_t>(p.mid.size()) - 1) return false;
  std::vector<int64_t> lead(p.mid.begin(), p.mid.end() - 1), perm = p.perm;
  // The chain before: from its source to `a`, then the same permutation of a's rows.
  Chain before = chain_to(a);
  if (before.nodes.empty() || !dims_of(before.source)) return false;
  for (const Node* m : before.nodes)
    if (!has_single_use(m->outputs[0])) return false;
  std::vector<Step> steps = before.steps;
  Step rs;
  rs.v = lead;
  rs.v.push_back((*as)[1]);
  Step tp;
  tp.kind = Step::Transpose;
  tp.v = perm;
  Step back;
  back.v = *as;
  steps.insert(steps.end(), {rs, tp, back});
  auto pb = plan_chain(*dims_of(before.source), steps, *as);
  if (pb && !writable(*pb, *dims_of(before.source))) return false;
  int old = p.copies();
  for (size_t i = 0; i < before.nodes.size(); ++i) old += copies(before.steps[i], *dims_of(before.nodes[i]->input(0)));
  if (!pb || pb->copies() >= old) return false;
  std::vector<int64_t> rows = *as;  // the product's dims on a'
  rows.back() = y2s->back();
  const auto view_target = open_dims->target(rows, *dims_of(after.ends[0]));
  if (!view_target) return false;
  Graph& g = s.graph();
  // a' = the chain before, with the rows in the order the chain after wants; then the product on
  // it, and the value after it is a free Reshape of the product.
  std::vector<std::string> replaced;
  std::vector<Node*> gone = before.nodes;
  gone.push_back(n);
  gone.insert(gone.end(), after.nodes.begin(), after.nodes.end());
  for (const Node* m : gone) replaced.push_back(m->name);
  const std::vector<std::string> origins = fused_origins(gone);
  Value* a2 = typed(g, a->name + "_rows", a->type.dtype, *as);
  std::vector<Node*> added = emit(g, before.source, *pb, a2, a->name);
  Node* moved = clone_row_wise(g, n, a2);
  Value* y = after.ends[0];
  const std::string last = y->producer->name;
  release(s, y);
  Node* view = g.add_node("Reshape", {moved->outputs[0], int64_initializer(g, last + "_rows_shape", *view_target)}, {y},
                          g.unique_node_name(last));
  for (Node* m : added) m->fused_from = origins;
  view->fused_from = origins;
  const std::string why = "the row permutation after " + describe(n) + " moved before it: " + std::to_string(old) +
                          " copies -> " + std::to_string(pb->copies());
  erase_dead(s, gone);
  s.r.rewrote(why, replaced, moved->name);
  return true;
}

/// A patch embedding (see the file comment) whose output's chains then compose into no more copies
/// than they make now (one more for the patches): rewritten as a GEMM.
bool patch_embedding(Sweep& s, Node* conv) {
  if (!is_op(conv, "Conv") || conv->outputs.size() != 1 || conv->inputs.size() < 2) return false;
  auto xs = dims_of(conv->input(0)), ys = dims_of(conv->outputs[0]);
  const Tensor* w = constant_of(conv->input(1));
  const Tensor* bias = conv->input(2) ? constant_of(conv->input(2)) : nullptr;
  if (!xs || !ys || !w || xs->size() != 4 || w->rank() != 4 || (conv->input(2) && !bias)) return false;
  const int64_t n = (*xs)[0], c = (*xs)[1], h = (*xs)[2], wd = (*xs)[3], m = w->dim(0), kh = w->dim(2), kw = w->dim(3);
  const std::vector<int64_t> k = {kh, kw};
  if (w->dim(1) != c || conv->attr_int("group", 1) != 1 || conv->attr_ints("strides", {1, 1}) != k ||
      conv->attr_ints("kernel_shape", k) != k || conv->attr_ints("dilations", {1, 1}) != std::vector<int64_t>{1, 1} ||
      conv->attr_ints("pads", {0, 0, 0, 0}) != std::vector<int64_t>{0, 0, 0, 0} || kh * kw == 1)
    return false;
  const std::string pad = conv->attr_string("auto_pad", "NOTSET");
  if ((pad != "NOTSET" && pad != "VALID") || h % kh != 0 || wd % kw != 0) return false;
  const int64_t oh = h / kh, ow = wd / kw;
  Value* y = conv->outputs[0];
  if (y->is_graph_output || *ys != std::vector<int64_t>{n, m, oh, ow}) return false;
  for (const Node* cn : y->consumers)
    if (cn->input(0) != y || !is_movement(cn)) return false;
  const Tree t = tree_from(y);
  if (t.ends.empty()) return false;
  Step to_nhwc, to_nchw;
  to_nhwc.v = {n, oh, ow, m};
  to_nchw.kind = Step::Transpose;
  to_nchw.v = {0, 3, 1, 2};
  auto plans = plan_tree(t, y, {n * oh * ow, m}, {to_nhwc, to_nchw});
  if (!plans || plan_copies(*plans) + 1 > tree_copies(t)) return false;
  const auto six_target = open_dims->target(*xs, {n, c, oh, kh, ow, kw});
  const auto patches_target = open_dims->target({n, oh, ow, c, kh, kw}, {n * oh * ow, c * kh * kw});
  if (!six_target || !patches_target) return false;
  Graph& g = s.graph();
  const DType dt = conv->input(0)->type.dtype;
  const std::string stem = conv->name;
  Value* x6 = typed(g, stem + "_patches6", dt, {n, c, oh, kh, ow, kw});
  g.add_node("Reshape", {conv->input(0), int64_initializer(g, stem + "_patches6_shape", *six_target)}, {x6},
             g.unique_node_name(stem + "_patches6"));
  Value* xt = typed(g, stem + "_patches_t", dt, {n, oh, ow, c, kh, kw});
  g.add_node("Transpose", {x6}, {xt}, g.unique_node_name(stem + "_patches_t"))
      ->set_attr("perm", std::vector<int64_t>{0, 2, 4, 1, 3, 5});
  Value* patches = typed(g, stem + "_patches", dt, {n * oh * ow, c * kh * kw});
  g.add_node("Reshape", {xt, int64_initializer(g, stem + "_patches_shape", *patches_target)}, {patches},
             g.unique_node_name(stem + "_patches"));
  Value* w2 = g.add_initializer(conv->input(1)->name + "_rows", w->reshaped({m, c * kh * kw}));
  std::vector<Value*> ins = {patches, w2};
  if (bias) ins.push_back(conv->input(2));
  Value* tokens = typed(g, stem + "_tokens", conv->outputs[0]->type.dtype, {n * oh * ow, m});
  Node* gemm = g.add_node("Gemm", ins, {tokens}, g.unique_node_name(stem + "_gemm"));
  gemm->set_attr("transB", int64_t{1});
  gemm->fused_from = fused_origins({conv});
  const std::string why = describe(conv) + " (kernel = stride " + std::to_string(kh) + "x" + std::to_string(kw) +
                          ") -> the patches' GEMM, then " + std::to_string(t.nodes.size()) + " movement ops (" +
                          std::to_string(tree_copies(t)) + " copies) -> " + std::to_string(plan_copies(*plans)) +
                          " copies and one for the patches";
  rewrite_ends(s, t, tokens, *plans, why, {conv});
  return true;
}

}  // namespace

bool ComposeMovementPass::run(Graph& g, PassContext& ctx) {
  OpenDims dims;
  open_dims = &dims;
  struct Reset {
    ~Reset() { open_dims = nullptr; }
  } reset;
  Rewriter r(g, ctx, kPass);
  // Sweeps over the node list until one rewrites nothing: a rewrite's new nodes are looked at in
  // the next sweep, the nodes it removed are skipped in this one. Every rewrite lowers the number
  // of copies, so this ends. All in one run: fuse_attention, next in the pipeline, must see every
  // layer composed.
  for (bool changed = true; changed;) {
    changed = false;
    Sweep s{r, {}};
    for (Node* n : g.node_list())
      if (!s.erased.count(n) && (patch_embedding(s, n) || sink_through(s, n) || hoist_through(s, n))) changed = true;
    std::set<const Value*> roots;
    for (Node* n : g.node_list()) {
      if (s.erased.count(n) || !is_movement(n)) continue;
      Value* x = chain_to(n->outputs[0]).source;
      if (roots.insert(x).second && compose_tree(s, x)) changed = true;
    }
  }
  if (r.changed()) {
    g.remove_unused_values();
    g.topo_sort();  // the new chains were appended after their readers
  }
  return r.changed();
}

}  // namespace fusec

// CPU kernel interface: a kernel reads its inputs and writes into outputs the executor has
// already allocated with the shapes the op's schema inferred.
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ir/error.h"
#include "ir/ops/op_families.h"
#include "ir/op_schema.h"
#include "ir/tensor.h"

namespace fusec::cpu {

/// What a kernel keeps from one run of its step to the next, made on first use: a weight packed for
/// the GEMM, an If's compiled branches. The executor gives each step one, and says which of its
/// inputs are constant (the graph's initializers: the same tensor, at the same address, on every
/// run). An entry may be derived only from those inputs and the node's attributes; anything else it
/// depends on (an input's shape) it must check on every use.
class StepCache {
 public:
  struct Entry {
    virtual ~Entry() = default;
  };
  /// The executable's bytes left for entries, shared by its steps.
  using Budget = std::shared_ptr<std::atomic<size_t>>;

  StepCache(std::vector<bool> constant_inputs, Budget budget)
      : constant_(std::move(constant_inputs)), budget_(std::move(budget)) {}

  bool constant_input(size_t i) const { return i < constant_.size() && constant_[i]; }

  /// The entry, of type E, that make() returns on the first call (once, whatever the threads; if
  /// make() throws, there is none and the next call tries again).
  template <class E, class Make>
  E& get(Make&& make) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!entry_) entry_ = make();
    auto* e = dynamic_cast<E*>(entry_.get());
    if (!e) internal_error("a step's cache holds another kernel's entry");
    return *e;
  }

  /// Takes `bytes` from the executable's budget for copies of weights; false (and nothing taken)
  /// when they do not fit, and the kernel then works without the copy.
  bool take(size_t bytes) {
    size_t left = budget_->load();
    while (bytes <= left)
      if (budget_->compare_exchange_weak(left, left - bytes)) {
        held_ += bytes;
        return true;
      }
    return false;
  }
  /// Returns what take() gave, when the entry did not come to hold it after all.
  void give_back(size_t bytes) {
    held_ -= bytes;
    *budget_ += bytes;
  }
  /// Bytes this step's entry holds (what take() gave it).
  size_t held() const { return held_.load(); }

 private:
  std::vector<bool> constant_;
  Budget budget_;
  std::mutex mutex_;
  std::unique_ptr<Entry> entry_;
  std::atomic<size_t> held_{0};
};

class KernelContext : public NodeAttrs {
 public:
  KernelContext(const Node& node, const OpSchema& schema, int64_t opset, std::vector<const Tensor*> inputs,
                std::vector<Tensor*> outputs, StepCache* cache = nullptr)
      : NodeAttrs(node, schema),
        opset_(opset),
        inputs_(std::move(inputs)),
        outputs_(std::move(outputs)),
        cache_(cache) {}

  int64_t opset() const { return opset_; }
  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }
  bool has_input(size_t i) const { return i < inputs_.size() && inputs_[i]; }
  bool has_output(size_t i) const { return i < outputs_.size() && outputs_[i]; }
  const Tensor& input(size_t i) const {
    if (!has_input(i)) fail("input " + std::to_string(i) + " is required");
    return *inputs_[i];
  }
  Tensor& output(size_t i) const {
    if (!has_output(i)) fail("output " + std::to_string(i) + " is required");
    return *outputs_[i];
  }
  /// The step's cache; null outside an executable (evaluate_node, constant folding).
  StepCache* cache() const { return cache_; }
  /// cache() when input i is constant, else null: the cache to keep what is made from input i in.
  StepCache* cache_for_input(size_t i) const {
    return cache_ && has_input(i) && cache_->constant_input(i) ? cache_ : nullptr;
  }

 private:
  int64_t opset_;
  std::vector<const Tensor*> inputs_;
  std::vector<Tensor*> outputs_;
  StepCache* cache_;
};

using Kernel = std::function<void(KernelContext&)>;

/// What a kernel promises about its outputs. The executor places outputs in a reused arena (or,
/// where shapes are dynamic, in fresh storage) and zeroes that memory first, so a kernel may leave
/// elements untouched (Writes::Some, the default).
/// Writes::Every: the kernel writes every element of every output it is given, whatever the
/// inputs and attributes, so the zeroing is skipped (a full extra write of each output: ~10% of
/// BERT-base's run as given on two cores; fresh storage is then Tensor::uninitialized).
/// tests/cpu/test_writes_every.cpp runs each such kernel on poisoned outputs and fails for one
/// without a case there.
/// Writes::Itself: the kernel sets each output tensor it is given (ctx.output(i) = ...), whatever
/// its shape; the executor neither infers nor allocates them first (If and Loop, whose bodies decide
/// their outputs' shapes; NonZero, Unique and NonMaxSuppression, whose data does, and whose
/// inference would have to compute the whole result to size it).
enum class Writes { Some, Every, Itself };

class KernelRegistry {
 public:
  /// Every CPU kernel (built once, on first use).
  static const KernelRegistry& global();
  void add(const std::string& op_type, Kernel k, const std::string& domain = "", Writes writes = Writes::Some);
  const Kernel* find(const std::string& domain, const std::string& op_type) const;
  /// How the kernel of (domain, op_type) writes its outputs; Writes::Some when there is none.
  Writes writes(const std::string& domain, const std::string& op_type) const;
  /// (domain, op_type) of every kernel registered with `writes`.
  std::vector<std::pair<std::string, std::string>> registered_as(Writes writes) const;
  /// (domain, op_type) of every kernel, domain canonical (ir/op_key.h), sorted. A kernel serves
  /// every opset its op's schemas cover (it reads ctx.opset() where versions differ), so no
  /// range is kept here.
  std::vector<std::pair<std::string, std::string>> ops() const;

 private:
  struct Entry {
    Kernel kernel;
    Writes writes = Writes::Some;
  };
  std::map<std::pair<std::string, std::string>, Entry> kernels_;
};

// One function per kernel family file in backend/cpu/kernels/, from the one list of families.
#define FUSEC_DECLARE_KERNELS(family) void register_##family##_kernels(KernelRegistry& r);
FUSEC_OP_FAMILIES(FUSEC_DECLARE_KERNELS)
#undef FUSEC_DECLARE_KERNELS

/// True when every output the node writes has zero elements: a kernel then has nothing to do, and
/// is not called (its scratch, sized by the inputs' other dims, could be enormous: LayerNorm over
/// [0, 3, 2^32] would broadcast its scale to 2^32 elements for no output at all).
inline bool nothing_to_compute(const std::vector<Tensor*>& outputs) {
  bool any = false;
  for (const Tensor* t : outputs) {
    if (!t) continue;
    if (t->numel() != 0) return false;
    any = true;
  }
  return any;
}

/// Runs one node on the CPU: infers output shapes from the actual inputs, allocates the outputs
/// and calls the kernel. Used by the executor's dynamic path and by shape-value propagation.
std::vector<Tensor> evaluate_node(const Node& node, int64_t opset, const std::vector<const Tensor*>& inputs);

}  // namespace fusec::cpu

#include "backend/cpu/kernel.h"

#include "ir/error.h"

namespace fusec::cpu {

void KernelRegistry::add(const std::string& op_type, Kernel k, const std::string& domain, Writes writes) {
  kernels_[{canonical_domain(domain), op_type}] = {std::move(k), writes};
}

const Kernel* KernelRegistry::find(const std::string& domain, const std::string& op_type) const {
  auto it = kernels_.find({canonical_domain(domain), op_type});
  return it == kernels_.end() ? nullptr : &it->second.kernel;
}

Writes KernelRegistry::writes(const std::string& domain, const std::string& op_type) const {
  auto it = kernels_.find({canonical_domain(domain), op_type});
  return it == kernels_.end() ? Writes::Some : it->second.writes;
}

std::vector<std::pair<std::string, std::string>> KernelRegistry::registered_as(Writes writes) const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [key, entry] : kernels_)
    if (entry.writes == writes) out.push_back(key);
  return out;
}

std::vector<std::pair<std::string, std::string>> KernelRegistry::ops() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [key, entry] : kernels_) out.push_back(key);
  return out;
}

const KernelRegistry& KernelRegistry::global() {
  static const KernelRegistry reg = [] {
    KernelRegistry r;
#define FUSEC_REGISTER_KERNELS(family) register_##family##_kernels(r);
    FUSEC_OP_FAMILIES(FUSEC_REGISTER_KERNELS)
#undef FUSEC_REGISTER_KERNELS
    return r;
  }();
  return reg;
}

std::vector<Tensor> evaluate_node(const Node& node, int64_t opset, const std::vector<const Tensor*>& inputs) {
  const OpSchema* schema = OpRegistry::global().find(node.domain, node.op_type, opset);
  const Kernel* kernel = KernelRegistry::global().find(node.domain, node.op_type);
  if (!schema || !kernel) bad_input_at("no CPU kernel for this op at opset " + std::to_string(opset), node.ref());
  std::vector<TypeInfo> types(inputs.size());
  std::vector<const TypeInfo*> type_ptrs(inputs.size(), nullptr);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i]) continue;
    types[i].dtype = inputs[i]->dtype();
    types[i].shape = shape_of(inputs[i]->dims());
    type_ptrs[i] = &types[i];
  }
  std::vector<Tensor> outs(node.outputs.size());
  const Writes writes = KernelRegistry::global().writes(node.domain, node.op_type);
  if (writes == Writes::Itself) {
    std::vector<Tensor*> out_ptrs(node.outputs.size(), nullptr);
    for (size_t i = 0; i < node.outputs.size(); ++i)
      if (node.outputs[i]) out_ptrs[i] = &outs[i];
    KernelContext kctx(node, *schema, opset, inputs, out_ptrs);
    (*kernel)(kctx);
    for (size_t i = 0; i < node.outputs.size(); ++i)
      if (node.outputs[i] && outs[i].dtype() == DType::Undefined)
        internal_error("the kernel left output " + std::to_string(i) + " unset" + node.ref());
    return outs;
  }
  InferContext ictx(node, *schema, opset, type_ptrs, inputs);
  schema->infer(ictx);
  std::vector<Tensor*> out_ptrs(node.outputs.size(), nullptr);
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    if (!node.outputs[i]) continue;
    const TypeInfo& t = ictx.outputs[i];
    if (t.dtype == DType::Undefined || !t.shape || !is_static(*t.shape))
      internal_error("inference left output " + std::to_string(i) + " unknown at run time" + node.ref());
    outs[i] = writes == Writes::Every ? Tensor::uninitialized(t.dtype, static_dims(*t.shape))
                                      : Tensor(t.dtype, static_dims(*t.shape));
    out_ptrs[i] = &outs[i];
  }
  if (nothing_to_compute(out_ptrs)) return outs;
  KernelContext kctx(node, *schema, opset, inputs, out_ptrs);
  (*kernel)(kctx);
  return outs;
}

}  // namespace fusec::cpu

#include "backend/cuda/core/cuda_op.h"

namespace fusec::cuda {

void CudaOpRegistry::add(const std::string& op_type, OpFactory f, const std::string& domain) {
  factories_[{canonical_domain(domain), op_type}] = std::move(f);
}

const OpFactory* CudaOpRegistry::find(const std::string& domain, const std::string& op_type) const {
  auto it = factories_.find({canonical_domain(domain), op_type});
  return it == factories_.end() ? nullptr : &it->second;
}

void CudaOpRegistry::add_channels_last(const std::string& op_type, OpFactory f, const std::string& domain,
                                       ChannelsLast kind) {
  channels_last_[{canonical_domain(domain), op_type}] = std::move(f);
  channels_last_kind_[{canonical_domain(domain), op_type}] = kind;
}

ChannelsLast CudaOpRegistry::channels_last_kind(const std::string& domain, const std::string& op_type) const {
  auto it = channels_last_kind_.find({canonical_domain(domain), op_type});
  return it == channels_last_kind_.end() ? ChannelsLast::None : it->second;
}

const OpFactory* CudaOpRegistry::find_channels_last(const std::string& domain, const std::string& op_type) const {
  auto it = channels_last_.find({canonical_domain(domain), op_type});
  return it == channels_last_.end() ? nullptr : &it->second;
}

std::vector<std::pair<std::string, std::string>> CudaOpRegistry::ops() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [k, f] : factories_) out.push_back(k);
  return out;
}

std::vector<std::pair<std::string, std::string>> CudaOpRegistry::channels_last_ops() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [k, f] : channels_last_) out.push_back(k);
  return out;
}

const CudaOpRegistry& CudaOpRegistry::global() {
  static const CudaOpRegistry reg = [] {
    CudaOpRegistry r;
    register_view_ops(r);
    register_elementwise_ops(r);
    register_gemm_ops(r);
    register_expert_matmul_ops(r);
    register_conv_ops(r);
    register_normalization_ops(r);
    register_softmax_ops(r);
    register_attention_ops(r);
    register_rotary_ops(r);
    register_reduce_ops(r);
    register_pool_ops(r);
    register_squeeze_excite_ops(r);
    register_movement_ops(r);
    register_recurrent_ops(r);
    register_grid_sample_ops(r);
    return r;
  }();
  return reg;
}

}  // namespace fusec::cuda

#include "backend/cpu/kernels/common.h"

namespace fusec::cpu {

void register_reduce_kernels(KernelRegistry& r) {}

}  // namespace fusec::cpu

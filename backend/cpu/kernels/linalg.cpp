#include "backend/cpu/kernels/common.h"

namespace fusec::cpu {

void register_linalg_kernels(KernelRegistry& r) {}

}  // namespace fusec::cpu

#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"

namespace fusec {

void register_reduce_schemas(OpRegistry& r) {}

}  // namespace fusec

#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"

namespace fusec {

void register_shape_schemas(OpRegistry& r) {}

}  // namespace fusec

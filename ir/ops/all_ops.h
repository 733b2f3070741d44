#pragma once
#include "ir/ops/op_families.h"

namespace fusec {

class OpRegistry;

// One function per op family file in ir/ops/; each adds its ops' schemas.
#define FUSEC_DECLARE_SCHEMAS(family) void register_##family##_schemas(OpRegistry& r);
FUSEC_OP_FAMILIES(FUSEC_DECLARE_SCHEMAS)
#undef FUSEC_DECLARE_SCHEMAS

inline void register_all_op_schemas(OpRegistry& r) {
#define FUSEC_REGISTER_SCHEMAS(family) register_##family##_schemas(r);
  FUSEC_OP_FAMILIES(FUSEC_REGISTER_SCHEMAS)
#undef FUSEC_REGISTER_SCHEMAS
}

}  // namespace fusec

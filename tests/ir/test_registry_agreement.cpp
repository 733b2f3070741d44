// The op schema registry (ir/ops/) and the CPU kernel registry (backend/cpu/kernels/) must agree:
// the CPU backend is the reference every other backend and every optimization is checked against,
// so an op fusec accepts (it has a schema) must run there, and a kernel without a schema can never
// be reached. Both key an op by (canonical domain, op_type) (ir/op_key.h). Only schemas carry an
// opset range; a CPU kernel serves every opset its op's schemas cover (it reads ctx.opset() where
// versions differ), so the ranges are checked here among the schemas of each op.
// tests/gpu/test_registry_agreement_gpu.cpp checks the CUDA registry against both.
#include <gtest/gtest.h>

#include <algorithm>

#include "backend/cpu/kernel.h"
#include "ir/op_key.h"
#include "ir/op_schema.h"
#include "registry_agreement.h"

using namespace fusec;
using namespace fusec::test;

namespace {

// Ops with a schema but no CPU kernel, each with the reason. Empty: every op fusec accepts runs
// on the CPU reference. An entry here must say why the op cannot have one; a new schema without a
// kernel fails EverySchemaHasACpuKernel until it has a kernel or an entry.
const std::map<OpKey, const char*> kSchemasWithoutCpuKernel = {};

// CPU kernels with no schema, each with the reason. Empty: a kernel without a schema is
// unreachable (import refuses the op, evaluate_node() needs the schema's inference).
const std::map<OpKey, const char*> kCpuKernelsWithoutSchema = {};

std::vector<OpKey> cpu_ops() { return cpu::KernelRegistry::global().ops(); }

std::vector<OpKey> schema_op_list() {
  const std::set<OpKey> s = schema_ops();
  return {s.begin(), s.end()};
}

}  // namespace

TEST(RegistryAgreement, CanonicalDomain) {
  EXPECT_EQ(canonical_domain(""), "");
  EXPECT_EQ(canonical_domain("ai.onnx"), "");
  EXPECT_EQ(canonical_domain("ai.fusec"), "ai.fusec");
  EXPECT_EQ(canonical_domain("com.microsoft"), "com.microsoft");
  // Both spellings of the default domain find the same entry in both registries.
  const auto& schemas = OpRegistry::global();
  const auto& kernels = cpu::KernelRegistry::global();
  EXPECT_EQ(schemas.find("", "Relu", 14), schemas.find("ai.onnx", "Relu", 14));
  EXPECT_NE(schemas.find("ai.onnx", "Relu", 14), nullptr);
  EXPECT_EQ(kernels.find("", "Relu"), kernels.find("ai.onnx", "Relu"));
  EXPECT_NE(kernels.find("ai.onnx", "Relu"), nullptr);
}

TEST(RegistryAgreement, EntriesUseTheCanonicalDomain) {
  for (const OpSchema* s : OpRegistry::global().all())
    EXPECT_EQ(s->domain, canonical_domain(s->domain)) << "schema of " << s->op_type;
  for (const OpKey& k : cpu_ops()) EXPECT_EQ(k.first, canonical_domain(k.first)) << "CPU kernel " << k.second;
}

TEST(RegistryAgreement, EverySchemaHasACpuKernel) {
  const std::vector<OpKey> kernels = cpu_ops();
  ASSERT_GT(schema_op_list().size(), 100u) << "the schema registry is (nearly) empty: nothing to compare";
  ASSERT_GT(kernels.size(), 100u) << "the CPU kernel registry is (nearly) empty: nothing to compare";
  const std::string gaps =
      unexpected_gaps(schema_op_list(), {kernels.begin(), kernels.end()}, kSchemasWithoutCpuKernel);
  EXPECT_EQ(gaps, "") << "ops with a schema (ir/ops/) but no CPU kernel (backend/cpu/kernels/); add the "
                         "kernel, or an entry with its reason to kSchemasWithoutCpuKernel:\n"
                      << gaps;
}

TEST(RegistryAgreement, EveryCpuKernelHasASchema) {
  const std::string gaps = unexpected_gaps(cpu_ops(), schema_ops(), kCpuKernelsWithoutSchema);
  EXPECT_EQ(gaps, "") << "CPU kernels (backend/cpu/kernels/) with no schema (ir/ops/) under the same "
                         "name and domain:\n"
                      << gaps;
}

TEST(RegistryAgreement, AllowListsHaveNoStaleEntries) {
  const std::vector<OpKey> kernels = cpu_ops();
  const std::string a = stale_entries(schema_op_list(), {kernels.begin(), kernels.end()}, kSchemasWithoutCpuKernel);
  EXPECT_EQ(a, "") << "kSchemasWithoutCpuKernel lists ops that now have a kernel or no schema:\n" << a;
  const std::string b = stale_entries(kernels, schema_ops(), kCpuKernelsWithoutSchema);
  EXPECT_EQ(b, "") << "kCpuKernelsWithoutSchema lists kernels that now have a schema or are gone:\n" << b;
}

TEST(RegistryAgreement, SchemaOpsetRangesAreConsistent) {
  // Per op: each range is non-empty and starts at opset 1 or later in a domain fusec implements,
  // below the newest opset it implements there (else no model could reach it); ranges of one op
  // do not overlap (find() takes the first match, so an overlap would hide a schema); and each
  // range's ends find that very schema.
  const auto& reg = OpRegistry::global();
  std::map<OpKey, std::vector<const OpSchema*>> by_op;
  for (const OpSchema* s : reg.all()) by_op[{s->domain, s->op_type}].push_back(s);
  for (const auto& [key, list] : by_op) {
    const std::string name = op_name(key);
    const int64_t newest = newest_supported_opset(key.first);
    EXPECT_GT(newest, 0) << name << ": domain '" << key.first << "' is not one fusec implements";
    for (const OpSchema* s : list) {
      const std::string range = name + " [" + std::to_string(s->min_opset) + ", " + std::to_string(s->max_opset) + "]";
      EXPECT_GE(s->min_opset, 1) << range;
      EXPECT_LE(s->min_opset, s->max_opset) << range;
      EXPECT_LE(s->min_opset, newest) << range << " starts after the newest opset fusec implements";
      EXPECT_EQ(reg.find(key.first, key.second, s->min_opset), s) << range << ": its first opset finds another schema";
      EXPECT_EQ(reg.find(key.first, key.second, std::min(s->max_opset, newest)), s)
          << range << ": its last opset finds another schema";
      for (const OpSchema* t : list)
        if (t != s)
          EXPECT_TRUE(s->max_opset < t->min_opset || t->max_opset < s->min_opset)
              << range << " overlaps [" << t->min_opset << ", " << t->max_opset << "]";
    }
  }
}

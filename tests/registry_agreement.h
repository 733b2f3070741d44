// Helpers of the registry-agreement tests (tests/ir/test_registry_agreement.cpp, CPU;
// tests/gpu/test_registry_agreement_gpu.cpp, CUDA): an op is keyed by (canonical domain, op_type),
// as every registry keys it (ir/op_key.h).
#pragma once
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ir/op_schema.h"

namespace fusec::test {

using OpKey = std::pair<std::string, std::string>;  // (canonical domain, op_type)

/// "Relu", "ai.fusec.FusedConv": how docs and errors name an op.
inline std::string op_name(const OpKey& k) { return (k.first.empty() ? "" : k.first + ".") + k.second; }

/// Every op that has at least one schema.
inline std::set<OpKey> schema_ops() {
  std::set<OpKey> out;
  for (const OpSchema* s : OpRegistry::global().all()) out.insert({s->domain, s->op_type});
  return out;
}

/// The ops of `ops` missing from `have` and not in `allowed` (an explicit list of known gaps,
/// each with its reason), one per line; "" when there are none.
inline std::string unexpected_gaps(const std::vector<OpKey>& ops, const std::set<OpKey>& have,
                                   const std::map<OpKey, const char*>& allowed) {
  std::string out;
  for (const OpKey& k : ops)
    if (!have.count(k) && !allowed.count(k)) out += "  " + op_name(k) + "\n";
  return out;
}

/// Entries of `allowed` that are no longer gaps (the op is in `have`, or no longer in `ops`): a
/// stale entry would let the gap come back unnoticed, so the list must shrink with the code.
inline std::string stale_entries(const std::vector<OpKey>& ops, const std::set<OpKey>& have,
                                 const std::map<OpKey, const char*>& allowed) {
  const std::set<OpKey> listed(ops.begin(), ops.end());
  std::string out;
  for (const auto& [k, why] : allowed)
    if (have.count(k) || !listed.count(k)) out += "  " + op_name(k) + " (" + why + ")\n";
  return out;
}

}  // namespace fusec::test

// fusec.optimize/1 (docs/schemas/optimize.schema.json): the optimized graph's size (nodes, model
// bytes, each op type's count) and its verification against the original (ok, max errors).
#include <algorithm>
#include <map>

#include "profiler/compare_detail.h"

namespace fusec::compare::detail {

namespace {

struct OutputError {
  double max_abs = 0, max_rel = 0;
};

std::map<std::string, OutputError> output_errors(const Report& r, const nlohmann::json& ver) {
  std::map<std::string, OutputError> out;
  const auto& outs = array_at(r, ver, "outputs", "verification");
  for (size_t i = 0; i < outs.size(); ++i) {
    std::string where = "verification.outputs[" + std::to_string(i) + "]";
    out[string_at(r, outs[i], "name", where)] = {number_at(r, outs[i], "max_abs", where),
                                                 number_at(r, outs[i], "max_rel", where)};
  }
  return out;
}

}  // namespace

void match_optimize(const Report& base, const Report& next, Comparison& c) {
  same(c, "model", model_name(string_at(base, base.j, "model")), model_name(string_at(next, next.j, "model")));
  auto portable = [](const Report& r) { return bool_at(r, r.j, "portable") ? "true" : "false"; };
  same(c, "portable", portable(base), portable(next));
  c.label = model_name(string_at(next, next.j, "model")) + (bool_at(next, next.j, "portable") ? ", --portable" : "");

  const auto& bn = object_at(base, base.j, "nodes");
  const auto& nn = object_at(next, next.j, "nodes");
  add_row(c, "graph", "nodes", Kind::Count, number_at(base, bn, "after", "nodes"),
          number_at(next, nn, "after", "nodes"));
  // null when verification failed and nothing was written.
  add_row(c, "graph", "model size", Kind::Bytes,
          optional_number(base, object_at(base, base.j, "model_bytes"), "after", "model_bytes"),
          optional_number(next, object_at(next, next.j, "model_bytes"), "after", "model_bytes"));

  // Every op type either graph has after optimizing (0 where the other has none): context, since
  // one fusion fewer moves counts between op types; the verdict is on the node total.
  const auto& bops = object_at(base, base.j, "ops");
  const auto& nops = object_at(next, next.j, "ops");
  std::map<std::string, std::pair<double, double>> ops;
  for (auto it = bops.begin(); it != bops.end(); ++it)
    ops[it.key()].first = number_at(base, it.value(), "after", "ops." + it.key());
  for (auto it = nops.begin(); it != nops.end(); ++it)
    ops[it.key()].second = number_at(next, it.value(), "after", "ops." + it.key());
  for (const auto& [op, counts] : ops)
    if (counts.first != 0 || counts.second != 0) add_row(c, "ops", op, Kind::Info, counts.first, counts.second, false);

  // Rewrites per pass: why the counts above changed (shown where they differ, never a verdict).
  auto rewrites = [](const Report& r) {
    std::map<std::string, double> m;
    const auto& ps = array_at(r, r.j, "passes");
    for (size_t i = 0; i < ps.size(); ++i) {
      std::string where = "passes[" + std::to_string(i) + "]";
      m[string_at(r, ps[i], "name", where)] = number_at(r, ps[i], "rewrites", where);
    }
    return m;
  };
  auto brw = rewrites(base), nrw = rewrites(next);
  std::map<std::string, std::pair<std::optional<double>, std::optional<double>>> passes;
  for (const auto& [p, n] : brw) passes[p].first = n;
  for (const auto& [p, n] : nrw) passes[p].second = n;
  for (const auto& [p, n] : passes) add_row(c, "rewrites", p, Kind::Info, n.first, n.second, false);

  // Verification: the flag, then the worst errors over all outputs (headline), then per output.
  const auto& bv = object_at(base, base.j, "verification");
  const auto& nv = object_at(next, next.j, "verification");
  double b_runs = number_at(base, bv, "runs", "verification"), n_runs = number_at(next, nv, "runs", "verification");
  if (b_runs == 0 || n_runs == 0) {
    Row& r = add_row(c, "verification", "ok", Kind::Flag, std::nullopt, std::nullopt);
    r.note = "not verified (--no-check) in " + std::string(b_runs == 0 ? (n_runs == 0 ? "either" : "base") : "new");
    return;
  }
  add_row(c, "verification", "ok", Kind::Flag, bool_at(base, bv, "ok", "verification") ? 1.0 : 0.0,
          bool_at(next, nv, "ok", "verification") ? 1.0 : 0.0);
  // Errors below a tenth of the tolerance are rounding noise (a reassociated sum), not a change.
  double abs_floor = 0.1 * number_at(base, bv, "atol", "verification");
  double rel_floor = 0.1 * number_at(base, bv, "rtol", "verification");
  auto be = output_errors(base, bv), ne = output_errors(next, nv);
  auto worst = [](const std::map<std::string, OutputError>& m, double OutputError::*f) {
    double w = 0;
    for (const auto& [_, e] : m) w = std::max(w, e.*f);
    return w;
  };
  add_row(c, "verification", "max abs error", Kind::Error, worst(be, &OutputError::max_abs),
          worst(ne, &OutputError::max_abs))
      .floor = abs_floor;
  add_row(c, "verification", "max rel error", Kind::Error, worst(be, &OutputError::max_rel),
          worst(ne, &OutputError::max_rel))
      .floor = rel_floor;
  if (be.size() + ne.size() <= 2) return;  // one output: the worst is that output
  std::map<std::string, std::pair<const OutputError*, const OutputError*>> outs;
  for (const auto& [name, e] : be) outs[name].first = &e;
  for (const auto& [name, e] : ne) outs[name].second = &e;
  for (const auto& [name, pair] : outs) {
    auto [b, n] = pair;
    add_row(c, "output " + name, "max abs error", Kind::Error, b ? std::optional(b->max_abs) : std::nullopt,
            n ? std::optional(n->max_abs) : std::nullopt, false)
        .floor = abs_floor;
    add_row(c, "output " + name, "max rel error", Kind::Error, b ? std::optional(b->max_rel) : std::nullopt,
            n ? std::optional(n->max_rel) : std::nullopt, false)
        .floor = rel_floor;
  }
}

}  // namespace fusec::compare::detail

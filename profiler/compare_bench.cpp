// fusec.bench/2 (docs/schemas/bench.schema.json): variants matched by name (as_given, optimized);
// per variant the latency samples, the node count, and the memory the run planned.
#include <unordered_map>

#include "profiler/compare_detail.h"

namespace fusec::compare::detail {

namespace {

/// A report's variants by name, in the report's order (the first of two with one name wins).
/// One pass and a hash lookup per name: a search per name was quadratic, far too slow for 20,000
/// variants.
struct Variants {
  std::vector<std::string> names;
  std::unordered_map<std::string, const nlohmann::json*> by_name;
  explicit Variants(const Report& r) {
    const auto& vs = array_at(r, r.j, "variants");
    for (size_t i = 0; i < vs.size(); ++i) {
      std::string name = string_at(r, vs[i], "name", "variants[" + std::to_string(i) + "]");
      if (by_name.emplace(name, &vs[i]).second) names.push_back(std::move(name));
    }
  }
  const nlohmann::json* find(const std::string& name) const {
    auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : it->second;
  }
};

}  // namespace

void match_bench(const Report& base, const Report& next, Comparison& c) {
  auto text = [](const Report& r, const char* key) { return string_at(r, r.j, key); };
  auto integer = [](const Report& r, const char* key) {
    return std::to_string(static_cast<long long>(number_at(r, r.j, key)));
  };
  same(c, "model", model_name(text(base, "model")), model_name(text(next, "model")));
  same(c, "device", text(base, "device"), text(next, "device"));
  same(c, "device_name", text(base, "device_name"), text(next, "device_name"));
  // Written by fusec since compare exists; two CPUs with the same thread count are told apart by it.
  if (base.j.contains("cpu_model") && next.j.contains("cpu_model"))
    same(c, "cpu_model", text(base, "cpu_model"), text(next, "cpu_model"));
  same(c, "precision", text(base, "precision"), text(next, "precision"));
  same(c, "batch", integer(base, "batch"), integer(next, "batch"));
  same(c, "timing", text(base, "timing"), text(next, "timing"));
  c.label = model_name(text(next, "model")) + ", " + text(next, "device_name") + ", " + text(next, "precision") +
            ", batch " + integer(next, "batch");

  // Which passes the optimized variant ran (bench --passes/--skip): context for its rows.
  auto pipeline = [](const Report& r) -> std::string {
    auto it = r.j.find("pipeline");
    if (it == r.j.end() || !it->is_object()) return "all passes";
    std::string s;
    for (const char* key : {"passes", "skip"}) {
      auto l = it->find(key);
      if (l == it->end() || !l->is_array() || l->empty()) continue;
      s += std::string(key == std::string("passes") ? "only " : "skip ");
      for (size_t i = 0; i < l->size(); ++i) {
        if (i) s += ',';
        s += (*l)[i].is_string() ? (*l)[i].get<std::string>() : (*l)[i].dump();
      }
    }
    return s.empty() ? "all passes" : s;
  };
  if (pipeline(base) != pipeline(next))
    c.notes.push_back("optimized variant's pipeline: base " + pipeline(base) + ", new " + pipeline(next));

  const Variants base_variants(base), next_variants(next);
  std::vector<std::string> names = base_variants.names;
  for (const auto& n : next_variants.names)
    if (!base_variants.find(n)) names.push_back(n);
  for (const auto& name : names) {
    const nlohmann::json* b = base_variants.find(name);
    const nlohmann::json* n = next_variants.find(name);
    std::string where = "variants[" + name + "]";
    auto num = [&](const Report& r, const nlohmann::json* v, const char* key) -> std::optional<double> {
      if (!v) return std::nullopt;
      return number_at(r, *v, key, where);
    };
    auto mem = [&](const Report& r, const nlohmann::json* v, const char* key, bool required) -> std::optional<double> {
      if (!v) return std::nullopt;
      const auto& m = object_at(r, *v, "memory", where);
      return required ? std::optional<double>(number_at(r, m, key, where + ".memory"))
                      : optional_number(r, m, key, where + ".memory");
    };

    const size_t latency_row = c.rows.size();
    Row& lat = add_row(c, name, "latency", Kind::Timing, std::nullopt, std::nullopt);
    if (b) {
      lat.base_samples = numbers_at(base, *b, "samples_ms", where);
      lat.base = number_at(base, object_at(base, *b, "latency_ms", where), "median", where + ".latency_ms");
    }
    if (n) {
      lat.next_samples = numbers_at(next, *n, "samples_ms", where);
      lat.next = number_at(next, object_at(next, *n, "latency_ms", where), "median", where + ".latency_ms");
    }
    const auto nodes_base = num(base, b, "nodes"), nodes_next = num(next, n, "nodes");
    const auto weights_base = mem(base, b, "weight_bytes", true), weights_next = mem(next, n, "weight_bytes", true);
    add_row(c, name, "nodes", Kind::Count, nodes_base, nodes_next);
    add_row(c, name, "activations", Kind::Bytes, mem(base, b, "peak_activation_bytes", true),
            mem(next, n, "peak_activation_bytes", true));
    add_row(c, name, "weights", Kind::Bytes, weights_base, weights_next, false);
    // The model as given, unchanged between the reports, is a control: only the machine moves it.
    if (name == "as_given" && b && n && text(base, "model") == text(next, "model") && nodes_base == nodes_next &&
        weights_base == weights_next)
      c.rows[latency_row].control = true;
    // GPU runs: library scratch and what the device lost to the run.
    for (auto [key, label] :
         {std::pair{"workspace_bytes", "workspace"}, std::pair{"device_in_use_bytes", "device memory"}}) {
      auto bv = mem(base, b, key, false), nv = mem(next, n, key, false);
      if (bv || nv) add_row(c, name, label, Kind::Bytes, bv, nv, false);
    }
    auto cpu_nodes = [&](const Report& r, const nlohmann::json* v) -> std::optional<double> {
      if (!v) return std::nullopt;
      return static_cast<double>(array_at(r, *v, "cpu_nodes", where).size());
    };
    auto bc = cpu_nodes(base, b), nc = cpu_nodes(next, n);
    if ((bc && *bc > 0) || (nc && *nc > 0)) add_row(c, name, "nodes on CPU", Kind::Count, bc, nc);
  }
}

}  // namespace fusec::compare::detail

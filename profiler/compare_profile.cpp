// fusec.profile/1 (profiler/report.cpp, docs/schemas/profile.schema.json): per mode the run's
// latency samples and launches; the graph's nodes, kernels and modelled bytes; per node (by name)
// and per GPU kernel (by node, name and ordinal) the per-iteration time. Node and kernel timings
// are tested at alpha / their number (Bonferroni): a model with 200 nodes does not raise a false
// alarm on one of them every other run.
#include <map>

#include "profiler/compare_detail.h"

namespace fusec::compare::detail {

namespace {

struct Timed {
  std::vector<double> samples;
  double median = 0;
  std::string op;  // nodes: a node of the same name running another op is another node
};

/// name → samples of each node, or of each GPU kernel (keyed by name, node and ordinal).
std::map<std::string, Timed> timed_entries(const Report& r, const char* list, bool kernels) {
  std::map<std::string, Timed> out;
  const auto& a = array_at(r, r.j, list);
  for (size_t i = 0; i < a.size(); ++i) {
    std::string where = std::string(list) + "[" + std::to_string(i) + "]";
    std::string key = string_at(r, a[i], "name", where);
    if (kernels) {
      if (string_at(r, a[i], "kind", where) != "kernel") continue;  // GPU kernels; host records are the nodes
      const auto& node = a[i].contains("node") && a[i]["node"].is_string() ? a[i]["node"].get<std::string>() : "";
      key += " (" + (node.empty() ? std::string("no node") : node) + " #" +
             std::to_string(static_cast<long long>(number_at(r, a[i], "ordinal", where))) + ")";
    }
    out[key] = {numbers_at(r, a[i], "samples_ms", where), number_at(r, a[i], "median_ms", where),
                kernels ? std::string() : string_at(r, a[i], "op_type", where)};
  }
  return out;
}

/// Count of kernel-like records per run (GPU kernels, or the CPU's host records), excluding copies.
double kernel_count(const Report& r) {
  const auto& a = array_at(r, r.j, "kernels");
  double n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    std::string kind = string_at(r, a[i], "kind", "kernels[" + std::to_string(i) + "]");
    n += kind == "kernel" || kind == "host";
  }
  return n;
}

std::string list_some(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 5; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > 5) s += ", ... (" + std::to_string(names.size()) + " in all)";
  return s;
}

/// Timing rows for entries present on both sides; the unmatched ones as one note per side.
void timed_rows(Comparison& c, const std::string& what, const std::map<std::string, Timed>& b,
                const std::map<std::string, Timed>& n, double run_ms) {
  std::vector<std::string> only_base, only_next, changed;
  auto matched = [&](const std::string& name, const Timed& bt) {
    auto it = n.find(name);
    return it != n.end() && it->second.op == bt.op;
  };
  int both = 0;
  for (const auto& [name, bt] : b) {
    if (matched(name, bt))
      ++both;
    else if (n.count(name))
      changed.push_back(name + " (" + bt.op + " -> " + n.at(name).op + ")");
    else
      only_base.push_back(name);
  }
  for (const auto& [name, _] : n)
    if (!b.count(name)) only_next.push_back(name);
  for (const auto& [name, bt] : b) {
    if (!matched(name, bt)) continue;
    auto it = n.find(name);
    Row& r = add_row(c, what + " " + name, "time", Kind::Timing, bt.median, it->second.median, false);
    r.base_samples = bt.samples;
    r.next_samples = it->second.samples;
    r.multiplicity = both;
    r.detail = true;
    r.run_ms = run_ms;
  }
  if (!only_base.empty()) c.notes.push_back(what + "s only in base: " + list_some(only_base));
  if (!only_next.empty()) c.notes.push_back(what + "s only in new: " + list_some(only_next));
  if (!changed.empty()) c.notes.push_back(what + "s whose op changed (not compared): " + list_some(changed));
}

}  // namespace

void match_profile(const Report& base, const Report& next, Comparison& c) {
  auto text = [](const Report& r, const char* key) { return string_at(r, r.j, key); };
  auto dev = [](const Report& r, const char* key) { return string_at(r, object_at(r, r.j, "device"), key, "device"); };
  auto batch = [](const Report& r) { return std::to_string(static_cast<long long>(number_at(r, r.j, "batch"))); };
  same(c, "model", model_name(text(base, "model")), model_name(text(next, "model")));
  same(c, "device", dev(base, "kind"), dev(next, "kind"));
  same(c, "device_name", dev(base, "name"), dev(next, "name"));
  // On the CPU the peaks' device names the CPU model ("cpu: <model> x2 threads"): two CPUs with one
  // thread count are not one machine. (On a GPU it holds the UUID: any H100 may compare with another.)
  auto cpu_of = [](const Report& r) -> std::optional<std::string> {
    auto p = r.j.find("peaks");
    if (p == r.j.end() || !p->is_object() || !p->contains("device") || !(*p)["device"].is_string()) return std::nullopt;
    return (*p)["device"].get<std::string>();
  };
  if (dev(base, "kind") == "cpu" && dev(next, "kind") == "cpu" && cpu_of(base) && cpu_of(next))
    same(c, "cpu_model", *cpu_of(base), *cpu_of(next));
  same(c, "precision", text(base, "precision"), text(next, "precision"));
  same(c, "batch", batch(base), batch(next));
  // A profile of the model as given against one of the optimized model is what a fusion buys (or
  // a lost fusion costs): compared, with a note.
  if (text(base, "variant") != text(next, "variant"))
    c.notes.push_back("variant: base " + text(base, "variant") + ", new " + text(next, "variant"));
  c.label = model_name(text(next, "model")) + " (" + text(next, "variant") + "), " + dev(next, "name") + ", " +
            text(next, "precision") + ", batch " + batch(next);

  // Per mode (cpu; on the GPU graph replay and stream launches): the run's latency and launches.
  auto modes = [](const Report& r) {
    std::map<std::string, const nlohmann::json*> m;
    const auto& a = array_at(r, r.j, "modes");
    for (size_t i = 0; i < a.size(); ++i) m[string_at(r, a[i], "name", "modes[" + std::to_string(i) + "]")] = &a[i];
    return m;
  };
  auto bm = modes(base), nm = modes(next);
  for (const auto& [name, b] : bm) {
    auto it = nm.find(name);
    std::string where = "modes[" + name + "]";
    Row& lat = add_row(c, name, "latency", Kind::Timing, std::nullopt, std::nullopt);
    lat.base_samples = numbers_at(base, *b, "samples_ms", where);
    lat.base = number_at(base, object_at(base, *b, "wall_ms", where), "median", where + ".wall_ms");
    std::optional<double> nl, nc;
    if (it != nm.end()) {
      lat.next_samples = numbers_at(next, *it->second, "samples_ms", where);
      lat.next = number_at(next, object_at(next, *it->second, "wall_ms", where), "median", where + ".wall_ms");
      nl = number_at(next, *it->second, "launches", where);
      nc = number_at(next, *it->second, "copies", where);
    }
    add_row(c, name, "launches", Kind::Count, number_at(base, *b, "launches", where), nl);
    add_row(c, name, "copies", Kind::Count, number_at(base, *b, "copies", where), nc, false);
  }
  for (const auto& [name, _] : nm)
    if (!bm.count(name)) c.notes.push_back("mode " + name + " only in new");

  // The graph: nodes, kernels, and the bytes the cost model says a run moves (a lost fusion moves more).
  add_row(c, "graph", "nodes", Kind::Count, static_cast<double>(array_at(base, base.j, "nodes").size()),
          static_cast<double>(array_at(next, next.j, "nodes").size()));
  add_row(c, "graph", "kernels", Kind::Count, kernel_count(base), kernel_count(next));
  auto moved = [](const Report& r) {
    const auto& t = object_at(r, r.j, "totals");
    return number_at(r, t, "bytes_read", "totals") + number_at(r, t, "bytes_written", "totals");
  };
  add_row(c, "graph", "bytes moved", Kind::Bytes, moved(base), moved(next));
  add_row(c, "graph", "FLOPs", Kind::Info, number_at(base, object_at(base, base.j, "totals"), "flops", "totals"),
          number_at(next, object_at(next, next.j, "totals"), "flops", "totals"), false);

  // Op types' node counts: context for the node total.
  auto op_nodes = [](const Report& r) {
    std::map<std::string, double> m;
    const auto& a = array_at(r, r.j, "op_types");
    for (size_t i = 0; i < a.size(); ++i) {
      std::string where = "op_types[" + std::to_string(i) + "]";
      m[string_at(r, a[i], "op_type", where)] = number_at(r, a[i], "nodes", where);
    }
    return m;
  };
  auto bo = op_nodes(base), no = op_nodes(next);
  std::map<std::string, std::pair<double, double>> ops;
  for (const auto& [op, n] : bo) ops[op].first = n;
  for (const auto& [op, n] : no) ops[op].second = n;
  for (const auto& [op, n] : ops) add_row(c, "ops", op, Kind::Info, n.first, n.second, false);

  // Per node and kernel: a slowdown counts when it is also a share of the whole run (the first mode's).
  double run_ms = 0;
  for (const Row& r : c.rows)
    if (r.metric == "latency" && r.base) {
      run_ms = *r.base;
      break;
    }
  timed_rows(c, "node", timed_entries(base, "nodes", false), timed_entries(next, "nodes", false), run_ms);
  timed_rows(c, "kernel", timed_entries(base, "kernels", true), timed_entries(next, "kernels", true), run_ms);
}

}  // namespace fusec::compare::detail

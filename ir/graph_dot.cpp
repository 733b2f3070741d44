#include "ir/graph_dot.h"

#include <map>
#include <set>
#include <sstream>

namespace fusec {

namespace {

// Light fills (ColorBrewer Set3/Pastel1), readable under black text; one per fusion group, cycled.
const char* const kPalette[] = {"#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
                                "#b3de69", "#fccde5", "#bc80bd", "#ccebc5", "#ffed6f", "#decbe4"};
constexpr size_t kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

/// A DOT double-quoted string's contents: quotes and backslashes escaped, "\n" kept as a line break.
std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

/// "n12": a DOT node id (appended, not "n" + to_string: GCC 12 warns falsely on that form).
std::string dot_id(const char* prefix, int n) {
  std::string s = prefix;
  s += std::to_string(n);
  return s;
}

std::string op_name(const Node& n) {
  return (n.domain.empty() || n.domain == "ai.onnx" ? "" : n.domain + ".") + n.op_type;
}

std::string shape_of_value(const Value* v) {
  if (!v || !v->type.shape) return "";
  return shape_str(*v->type.shape);
}

/// What each optimized node stands for: the original nodes it absorbed (itself when it kept its
/// name and op and absorbed nothing).
struct Groups {
  std::map<std::string, size_t> color_of_original;  // original node -> palette index
  std::map<const Node*, size_t> color_of_fused;     // optimized node -> palette index
  std::set<std::string> represented;                // original nodes some optimized node stands for
};

Groups fusion_groups(const Graph& original, const Graph& optimized) {
  std::map<std::string, const Node*> orig;
  for (const auto& n : original.nodes()) orig[n->name] = n.get();
  Groups g;
  size_t next = 0;
  for (const auto& n : optimized.nodes()) {
    if (n->fused_from.empty()) {
      g.represented.insert(n->name);
      continue;
    }
    // A fusion: more than one original, or one original whose op changed (a recognized pattern).
    bool changed = n->fused_from.size() > 1;
    if (!changed) {
      auto it = orig.find(n->fused_from[0]);
      changed = it == orig.end() || op_name(*it->second) != op_name(*n);
    }
    for (const auto& f : n->fused_from) g.represented.insert(f);
    if (!changed) continue;
    size_t c = next++ % kPaletteSize;
    g.color_of_fused[n.get()] = c;
    for (const auto& f : n->fused_from) g.color_of_original.emplace(f, c);
  }
  return g;
}

/// `title` on top; one box per node, ellipses for graph inputs and outputs.
template <typename Style>
std::string to_dot(const Graph& g, const std::string& title, Style style) {
  std::ostringstream o;
  o << "digraph \"" << esc(title) << "\" {\n"
    << "  graph [rankdir=TB, fontname=\"Helvetica\", label=\"" << esc(title) << "\", labelloc=t, fontsize=18];\n"
    << "  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=\"Helvetica\", fontsize=11];\n"
    << "  edge [fontname=\"Helvetica\", fontsize=9, color=\"#555555\"];\n";
  std::map<const Value*, std::string> source;  // value -> DOT id of what produces it
  int id = 0;
  for (const Value* v : g.inputs) {
    if (v->is_initializer()) continue;
    std::string nid = dot_id("in", id++);
    source[v] = nid;
    o << "  " << nid << " [shape=ellipse, style=filled, fillcolor=\"#e8e8e8\", label=\""
      << esc(v->name + "\n" + shape_of_value(v)) << "\"];\n";
  }
  std::map<const Node*, std::string> node_id;
  for (const auto& n : g.nodes()) {
    std::string nid = dot_id("n", id++);
    node_id[n.get()] = nid;
    for (const Value* v : n->outputs)
      if (v) source[v] = nid;
  }
  for (const auto& n : g.nodes()) {
    int weights = 0;
    for (const Value* v : n->inputs) weights += v && v->is_initializer();
    std::ostringstream label;
    label << op_name(*n) << "\n" << n->name;
    if (!n->outputs.empty() && n->outputs[0]) label << "\n" << shape_of_value(n->outputs[0]);
    if (weights) label << "\n+" << weights << (weights == 1 ? " weight" : " weights");
    o << "  " << node_id[n.get()] << " [" << style(*n, label.str()) << "];\n";
  }
  for (const auto& n : g.nodes())
    for (const Value* v : n->inputs) {
      if (!v || v->is_initializer()) continue;
      auto it = source.find(v);
      if (it == source.end()) continue;
      o << "  " << it->second << " -> " << node_id[n.get()] << " [label=\"" << esc(shape_of_value(v)) << "\"];\n";
    }
  for (const Value* v : g.outputs) {
    std::string nid = dot_id("out", id++);
    o << "  " << nid << " [shape=ellipse, style=filled, fillcolor=\"#e8e8e8\", label=\""
      << esc(v->name + "\n" + shape_of_value(v)) << "\"];\n";
    auto it = source.find(v);
    if (it != source.end()) o << "  " << it->second << " -> " << nid << ";\n";
  }
  o << "}\n";
  return o.str();
}

}  // namespace

DotPair graphs_to_dot(const Graph& original, const Graph& optimized) {
  Groups groups = fusion_groups(original, optimized);
  std::map<std::string, const Node*> orig;
  for (const auto& n : original.nodes()) orig[n->name] = n.get();

  DotPair d;
  d.before = to_dot(original, "before: " + std::to_string(original.nodes().size()) + " nodes",
                    [&](const Node& n, const std::string& label) {
                      std::string attrs = "label=\"" + esc(label) + "\"";
                      if (auto it = groups.color_of_original.find(n.name); it != groups.color_of_original.end())
                        return attrs + ", fillcolor=\"" + kPalette[it->second] + "\"";
                      if (!groups.represented.count(n.name))
                        return attrs + ", style=\"rounded,dashed\", color=\"#999999\", fontcolor=\"#777777\"";
                      return attrs;
                    });
  d.after = to_dot(optimized, "after: " + std::to_string(optimized.nodes().size()) + " nodes",
                   [&](const Node& n, const std::string& label) {
                     auto it = groups.color_of_fused.find(&n);
                     if (it == groups.color_of_fused.end()) return "label=\"" + esc(label) + "\"";
                     // The absorbed nodes, by name and op (at most 8, then how many more).
                     std::string absorbed = "absorbed " + std::to_string(n.fused_from.size()) + ":";
                     for (size_t i = 0; i < n.fused_from.size() && i < 8; ++i) {
                       auto o = orig.find(n.fused_from[i]);
                       absorbed += "\n" + n.fused_from[i] + (o == orig.end() ? "" : " (" + op_name(*o->second) + ")");
                     }
                     if (n.fused_from.size() > 8)
                       absorbed += "\n... " + std::to_string(n.fused_from.size() - 8) + " more";
                     return "label=\"" + esc(label + "\n" + absorbed) + "\", fillcolor=\"" + kPalette[it->second] +
                            "\", penwidth=2";
                   });
  return d;
}

}  // namespace fusec

#include "passes/rewrite.h"

#include "passes/pattern.h"

namespace fusec {

bool Rewriter::near_miss(const std::string& what, const std::string& why) {
  ctx_.near_miss(pass_, what, why);
  return false;
}

void Rewriter::rewrote(std::string what, std::vector<std::string> replaced, std::string result) {
  ctx_.rewrite(pass_, std::move(what), std::move(replaced), std::move(result));
  changed_ = true;
}

Replaced Rewriter::remove(const std::vector<Node*>& nodes) {
  Replaced r;
  r.origins = fused_origins(nodes);
  for (Node* n : nodes) {
    r.names.push_back(n->name);
    r.listed += (r.listed.empty() ? "" : " + ") + describe(n);
  }
  for (Node* n : nodes) {
    removed_.insert(n);
    g_.remove_node(n);
  }
  return r;
}

Node* Rewriter::add(const std::string& op, std::vector<Value*> inputs, std::vector<Value*> outputs,
                    const std::string& name, const std::string& domain, std::vector<std::string> origins) {
  Node* n = g_.add_node(op, std::move(inputs), std::move(outputs), name, domain);
  n->fused_from = std::move(origins);
  if (domain == "ai.fusec") use_fusec_domain(g_);
  return n;
}

Replaced Rewriter::absorb(Node* keep, const std::vector<Node*>& chain) {
  std::vector<Node*> all = {keep};
  all.insert(all.end(), chain.begin(), chain.end());
  std::vector<std::string> origins = fused_origins(all);
  Value* out = chain.back()->outputs[0];
  Replaced r = remove(chain);
  g_.set_output(keep, 0, out);  // keep's own output loses its producer
  keep->fused_from = std::move(origins);
  return r;
}

}  // namespace fusec

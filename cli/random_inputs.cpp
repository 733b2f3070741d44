#include "cli/random_inputs.h"

#include <cstdio>

#include "ir/error.h"
#include "passes/verify.h"

namespace fusec {

namespace {

std::vector<Tensor> draw(const Graph& g, uint64_t seed, int64_t int_end, const std::map<std::string, Tensor>& given) {
  std::vector<Tensor> in;
  for (const Value* v : g.inputs) {
    auto it = given.find(v->name);
    in.push_back(it != given.end() ? it->second : random_input(*v, seed, int_end));
  }
  return in;
}

bool draws_an_integer(const Graph& g, const std::map<std::string, Tensor>& given) {
  for (const Value* v : g.inputs)
    if (is_integer(v->type.dtype) && !given.count(v->name)) return true;
  return false;
}

}  // namespace

std::vector<Tensor> random_inputs_that_run(const Graph& g, uint64_t seed,
                                           const std::function<void(const std::vector<Tensor>&)>& first_run,
                                           const std::map<std::string, Tensor>& given) {
  std::vector<Tensor> in = draw(g, seed, 64, given);
  std::string refused;
  try {
    first_run(in);
    return in;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::BadInput || !draws_an_integer(g, given)) throw;
    refused = e.what();
  }
  in = draw(g, seed, 2, given);
  first_run(in);  // an error here is the model's own on 0/1: it stands alone
  std::fprintf(stderr,
               "fusec: note: the model refused random integer inputs in [0, 64) (%s); they were drawn from {0, 1} "
               "instead\n",
               refused.c_str());
  return in;
}

}  // namespace fusec

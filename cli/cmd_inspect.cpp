// fusec inspect: what a model holds and whether fusec can run it.
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "cli/common.h"
#include "backend/gpu_plugin.h"
#include "ir/cost.h"

namespace fusec::cli {

namespace {

struct InspectArgs {
  std::string model, json_path;
  ShapeOptions shapes;
};

std::string type_text(const Value& v) {
  return std::string(dtype_name(v.type.dtype)) + "[" + (v.type.shape ? shape_str(*v.type.shape) : "?") + "]";
}

int inspect(const InspectArgs& a) {
  claim_output(a.json_path, "--json");
  auto g = load_model(a.model, a.shapes);
  nlohmann::ordered_json j;
  j["schema"] = "fusec.inspect/1";
  j["model"] = a.model;
  j["producer"] = g->meta.producer_name + (g->meta.producer_version.empty() ? "" : " " + g->meta.producer_version);
  j["ir_version"] = g->meta.ir_version;
  for (const auto& [d, v] : g->opsets) j["opsets"][d.empty() ? "ai.onnx" : d] = v;
  auto io = [&](const std::vector<Value*>& vs) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (auto* v : vs)
      arr.push_back({{"name", v->name},
                     {"dtype", dtype_name(v->type.dtype)},
                     {"shape", v->type.shape ? shape_str(*v->type.shape) : "unknown"}});
    return arr;
  };
  j["inputs"] = io(g->inputs);
  j["outputs"] = io(g->outputs);
  std::map<std::string, int> hist;
  for (const auto& n : g->nodes()) hist[(n->domain.empty() ? "" : n->domain + ".") + n->op_type]++;
  j["nodes"] = g->nodes().size();
  j["op_histogram"] = hist;
  double params = 0, param_bytes = 0;
  for (auto* v : g->initializers()) {
    params += static_cast<double>(v->initializer->numel());
    param_bytes += static_cast<double>(v->initializer->nbytes());
  }
  j["parameters"] = params;
  j["parameter_bytes"] = param_bytes;
  GraphCost cost = graph_cost(*g);
  bool cost_known = cost.nodes_unknown == 0;
  j["flops"] = cost_known ? nlohmann::ordered_json(cost.total.flops) : nlohmann::ordered_json(nullptr);
  j["bytes_read"] = cost_known ? nlohmann::ordered_json(cost.total.bytes_read) : nlohmann::ordered_json(nullptr);
  j["bytes_written"] = cost_known ? nlohmann::ordered_json(cost.total.bytes_written) : nlohmann::ordered_json(nullptr);
  auto unsupported = cpu::CpuBackend().unsupported(*g);
  j["unsupported"] = nlohmann::ordered_json::array();
  for (const auto& u : unsupported)
    j["unsupported"].push_back({{"node", u.node}, {"op", u.op_type}, {"domain", u.domain}, {"reason", u.reason}});

  std::printf("model      %s\n", a.model.c_str());
  std::printf("producer   %s\n", j["producer"].get<std::string>().c_str());
  std::string ops;
  for (const auto& [d, v] : g->opsets)
    ops += (ops.empty() ? "" : ", ") + (d.empty() ? "ai.onnx" : d) + " " + std::to_string(v);
  std::printf("ir         %lld, opsets: %s\n", static_cast<long long>(g->meta.ir_version), ops.c_str());
  std::printf("inputs\n");
  for (auto* v : g->inputs) std::printf("  %-30s %s\n", v->name.c_str(), type_text(*v).c_str());
  std::printf("outputs\n");
  for (auto* v : g->outputs) std::printf("  %-30s %s\n", v->name.c_str(), type_text(*v).c_str());
  std::printf("nodes      %zu\n", g->nodes().size());
  std::vector<std::pair<std::string, int>> sorted(hist.begin(), hist.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](auto& x, auto& y) { return x.second > y.second; });
  for (const auto& [op, n] : sorted) std::printf("  %-30s %d\n", op.c_str(), n);
  std::printf("parameters %s (%s)\n", human_count(params).c_str(), human_bytes(param_bytes).c_str());
  if (cost_known)
    std::printf("flops      %s (%s read, %s written, per inference at the shapes above)\n",
                human_count(cost.total.flops).c_str(), human_bytes(cost.total.bytes_read).c_str(),
                human_bytes(cost.total.bytes_written).c_str());
  else
    std::printf("flops      unknown: %zu nodes lack static shapes or a cost (bind shapes with --batch/--shape)\n",
                cost.nodes_unknown);
  if (unsupported.empty()) {
    std::printf("runnable   yes: every node has a CPU kernel\n");
  } else {
    std::printf("runnable   no: %zu node%s fusec cannot run\n", unsupported.size(), unsupported.size() == 1 ? "" : "s");
    for (const auto& u : unsupported)
      std::printf("  %-30s %-20s %s\n", u.node.c_str(), u.op_type.c_str(), u.reason.c_str());
  }
  if (gpu_backend_built()) {
    // Which nodes have no CUDA kernel family at all (they would run on the CPU reference with
    // copies on a GPU). Whether a family takes a given node (its dtype, attributes) is only known
    // when planning on the GPU: `fusec bench --device cuda` lists those.
    std::vector<std::string> no_kernel;
    for (const auto& n : g->nodes())
      if (!gpu_has_kernel_family(n->domain, n->op_type)) no_kernel.push_back(n->name + " (" + n->op_type + ")");
    if (no_kernel.empty()) {
      std::printf("cuda       every op has a CUDA kernel family\n");
    } else {
      std::printf("cuda       %zu node%s without a CUDA kernel would run on the CPU:", no_kernel.size(),
                  no_kernel.size() == 1 ? "" : "s");
      for (size_t i = 0; i < no_kernel.size() && i < 10; ++i) std::printf("%s %s", i ? "," : "", no_kernel[i].c_str());
      std::printf("%s\n", no_kernel.size() > 10 ? ", ..." : "");
    }
    j["cuda_cpu_nodes"] = no_kernel;
  }
  if (!a.json_path.empty()) write_text_file(a.json_path, json_text(j, 2) + "\n");
  return 0;
}

}  // namespace

void add_inspect(CLI::App& app, std::function<int()>& action) {
  auto args = std::make_shared<InspectArgs>();
  auto* sub = app.add_subcommand("inspect", "Show I/O, ops, parameters, FLOPs and what fusec cannot run");
  sub->add_option("model", args->model, "ONNX model file")->required();
  args->shapes.add_to(*sub);
  sub->add_option("--json", args->json_path, "Also write the report as JSON (schema fusec.inspect/1)");
  sub->callback([args, &action] { action = [args] { return inspect(*args); }; });
}

}  // namespace fusec::cli

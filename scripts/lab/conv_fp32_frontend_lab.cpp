// A lab, not production: do the cuDNN graph API's engines (through the cuDNN frontend, every
// engine config heuristics modes A and B and the fallback list offer, tensor-core engines
// deselected so the math stays strict fp32) run ResNet-50's convolutions faster than the legacy
// API's algorithms fusec times today? For each conv shape (batch 16, NCHW fp32, conv + bias + ReLU
// as one graph, like fusec's fused call) it prints the number of plans that built, the best
// time and its engine name. Compare with conv_fp32_lab's "nchw" column.
//   bash scripts/lab/build_conv_fp32_lab.sh   (builds both labs into build-gpu/lab/)
#include <cudnn_frontend.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "lab_util.h"

namespace fe = cudnn_frontend;

namespace {

struct Conv {
  const char* name;
  int cin, cout, hw, k, stride;
};

const Conv kConvs[] = {
    {"conv1 7x7 s2", 3, 64, 224, 7, 2},           {"l1 c2 3x3 64", 64, 64, 56, 3, 1},
    {"l1 c3 64>256", 64, 256, 56, 1, 1},          {"l2.0 c2 3x3 s2", 128, 128, 56, 3, 2},
    {"l2 ds 256>512 s2", 256, 512, 56, 1, 2},     {"l2 c2 3x3 128", 128, 128, 28, 3, 1},
    {"l3.0 c2 3x3 s2", 256, 256, 28, 3, 2},       {"l3 ds 512>1024 s2", 512, 1024, 28, 1, 2},
    {"l3 c2 3x3 256", 256, 256, 14, 3, 1},        {"l4.0 c2 3x3 s2", 512, 512, 14, 3, 2},
    {"l4 ds 1024>2048 s2", 1024, 2048, 14, 1, 2}, {"l4 c2 3x3 512", 512, 512, 7, 3, 1},
};
constexpr int64_t kBatch = 16;

void* dev_random(size_t n, unsigned seed) {
  void* p = nullptr;
  CK(cudaMalloc(&p, n * 4));
  fill_random(p, n, seed);
  return p;
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, cuDNN %zu, frontend %d, batch %lld, strict fp32 (tensor-core engines deselected)\n", prop.name,
              cudnnGetVersion(), CUDNN_FRONTEND_VERSION, static_cast<long long>(kBatch));
  cudnnHandle_t h;
  CK(cudnnCreate(&h));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  CK(cudnnSetStream(h, s));
  std::printf("%-20s %6s %6s %9s  %s\n", "conv", "GFLOP", "plans", "best ms", "engine");
  for (const Conv& c : kConvs) {
    const int64_t pad = c.k / 2, out = (c.hw + 2 * pad - c.k) / c.stride + 1;
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT)
        .set_intermediate_data_type(fe::DataType_t::FLOAT);
    auto X = g->tensor(fe::graph::Tensor_attributes()
                           .set_name("X")
                           .set_uid(1)
                           .set_dim({kBatch, c.cin, c.hw, c.hw})
                           .set_stride({int64_t(c.cin) * c.hw * c.hw, int64_t(c.hw) * c.hw, c.hw, 1}));
    auto W = g->tensor(fe::graph::Tensor_attributes()
                           .set_name("W")
                           .set_uid(2)
                           .set_dim({c.cout, c.cin, c.k, c.k})
                           .set_stride({int64_t(c.cin) * c.k * c.k, int64_t(c.k) * c.k, c.k, 1}));
    auto B = g->tensor(fe::graph::Tensor_attributes()
                           .set_name("B")
                           .set_uid(3)
                           .set_dim({1, c.cout, 1, 1})
                           .set_stride({c.cout, 1, 1, 1}));
    auto conv = g->conv_fprop(X, W,
                              fe::graph::Conv_fprop_attributes()
                                  .set_padding({pad, pad})
                                  .set_stride({c.stride, c.stride})
                                  .set_dilation({1, 1}));
    auto biased = g->pointwise(conv, B, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::ADD));
    auto Y = g->pointwise(biased, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::RELU_FWD));
    Y->set_output(true)
        .set_uid(4)
        .set_dim({kBatch, c.cout, out, out})
        .set_stride({int64_t(c.cout) * out * out, out * out, out, 1});
    fe::error_t e = g->validate();
    if (!e.is_bad()) e = g->build_operation_graph(h);
    if (!e.is_bad()) e = g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::B, fe::HeurMode_t::FALLBACK});
    // Filters the plans just created (strict fp32: no TF32 tensor cores, no reduced precision).
    if (!e.is_bad())
      g->deselect_numeric_notes({fe::NumericalNote_t::TENSOR_CORE, fe::NumericalNote_t::DOWN_CONVERT_INPUTS,
                                 fe::NumericalNote_t::REDUCED_PRECISION_REDUCTION,
                                 fe::NumericalNote_t::NONDETERMINISTIC});
    if (!e.is_bad()) e = g->check_support(h);
    if (!e.is_bad()) e = g->build_plans(h, fe::BuildPlanPolicy_t::ALL);
    const double gflop = 2.0 * kBatch * c.cout * out * out * c.cin * c.k * c.k / 1e9;
    if (e.is_bad()) {
      std::printf("%-20s %6.2f  failed: %s\n", c.name, gflop, e.get_message().c_str());
      continue;
    }
    void* x = dev_random(size_t(kBatch) * c.cin * c.hw * c.hw, 1);
    void* w = dev_random(size_t(c.cout) * c.cin * c.k * c.k, 2);
    void* b = dev_random(c.cout, 3);
    void* y = dev_random(size_t(kBatch) * c.cout * out * out, 4);
    std::unordered_map<int64_t, void*> pack = {{1, x}, {2, w}, {3, b}, {4, y}};
    const int64_t n = g->get_execution_plan_count();
    float best = -1;
    std::string best_name;
    int built = 0;
    for (int64_t i = 0; i < n; ++i) {
      int64_t ws = 0;
      if (g->get_workspace_size_plan_at_index(i, ws).is_bad() || ws > (int64_t(512) << 20)) continue;
      void* wsp = nullptr;
      if (ws && cudaMalloc(&wsp, ws) != cudaSuccess) continue;
      if (g->execute_plan_at_index(h, pack, wsp, i).is_bad() || cudaStreamSynchronize(s) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(wsp);
        continue;
      }
      ++built;
      const float plan_best = fastest(round_times([&] { (void)g->execute_plan_at_index(h, pack, wsp, i); }, s, 3, 10));
      if (best < 0 || plan_best < best) {
        best = plan_best;
        (void)g->get_plan_name_at_index(i, best_name);
      }
      cudaFree(wsp);
    }
    std::printf("%-20s %6.2f %6d %9.4f  %s (%.1f TFLOP/s)\n", c.name, gflop, built, best, best_name.c_str(),
                best > 0 ? gflop / best : 0.0);
    for (void* p : {x, w, b, y}) cudaFree(p);
  }
  return 0;
}

// The profiler's arithmetic on hand-made records whose answers are known: medians per node and
// kernel position, busy time as a union of intervals, idle share, the roofline verdict, what a
// fusion saved, the trace, and the peaks cache.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "ir/graph_builder.h"
#include "ir/cost.h"
#include "passes/infer_shapes.h"
#include "profiler/peaks.h"
#include "profiler/report.h"

using namespace fusec;
using namespace fusec::profiler;

namespace {

/// x[1M] -> Relu -> MatMul with w[1024,1024] (as [1024,1024] after a Reshape-free layout).
std::unique_ptr<Graph> two_nodes() {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Dim(1024), Dim(1024)});
  Value* r = b.node("Relu", {x}, {}, "relu");
  Value* w = b.initializer("w", Tensor(DType::Float32, {1024, 1024}));
  b.output(b.node("MatMul", {r, w}, {}, "mm"));
  auto g = b.build();
  infer_shapes(*g);
  return g;
}

Record rec(int iteration, int step, uint64_t start_us, uint64_t end_us, const char* name,
           RecordKind kind = RecordKind::Kernel) {
  Record r;
  r.kind = kind;
  r.name = name;
  r.iteration = iteration;
  r.step = step;
  r.start_ns = start_us * 1000;
  r.end_ns = end_us * 1000;
  return r;
}

Peaks test_peaks() {
  Peaks p;
  p.bandwidth_bytes_per_s = 1e12;  // 1 TB/s
  p.flops_per_s = {{"fp32", 10e12}, {"fp16", 100e12}};
  return p;
}

Collected collected(const Graph& g) {
  Collected c;
  c.device_kind = "cuda";
  c.graph = &g;
  for (const auto& n : g.nodes()) c.steps.push_back({n->name, "kernel", n.get()});
  c.modes.push_back({"cuda_graph", {1.0, 1.2, 0.9}});
  // Three iterations: relu one kernel (10 us, then 12, then 10), mm two kernels and a memset.
  for (int it = 0; it < 3; ++it) {
    uint64_t t0 = 1000 * static_cast<uint64_t>(it);
    c.records.push_back(rec(it, 0, t0, t0 + (it == 1 ? 12 : 10), "relu_kernel"));
    c.records.push_back(rec(it, 1, t0 + 20, t0 + 25, "memset", RecordKind::Memset));
    c.records.push_back(rec(it, 1, t0 + 25, t0 + 125, "gemm_main"));
    c.records.push_back(rec(it, 1, t0 + 120, t0 + 130, "gemm_epilogue"));  // overlaps the GEMM by 5 us
  }
  c.records.push_back(rec(-1, 0, 0, 5, "warmup"));  // outside the iterations: ignored
  return c;
}

}  // namespace

TEST(ProfileAnalysis, MediansPositionsAndWholeRunFigures) {
  auto g = two_nodes();
  Collected c = collected(*g);
  Analysis a = analyze(c, test_peaks(), Precision::FP32, DType::Undefined);
  ASSERT_EQ(a.iterations, 3);
  ASSERT_EQ(a.nodes.size(), 2u);
  EXPECT_NEAR(a.nodes[0].median_ms, 0.010, 1e-12);
  EXPECT_NEAR(a.nodes[1].median_ms, 0.115, 1e-12);  // 5 + 100 + 10 us
  EXPECT_EQ(a.nodes[1].records_per_iteration, 3);
  ASSERT_EQ(a.kernels.size(), 4u);  // relu, memset, gemm_main, gemm_epilogue, in launch order
  EXPECT_EQ(a.kernels[2].name, "gemm_main");
  EXPECT_EQ(a.kernels[2].ordinal, 1);
  EXPECT_EQ(a.kernels[2].samples_ms.size(), 3u);
  const ModeSummary& m = a.modes[0];
  EXPECT_EQ(m.launches, 3);
  EXPECT_EQ(m.copies, 1);
  EXPECT_NEAR(m.device_ms, 0.125, 1e-12);  // 10 + 5 + 100 + 10
  EXPECT_NEAR(m.busy_ms, 0.120, 1e-12);    // [0,10] + [20,130]
  EXPECT_NEAR(m.span_ms, 0.130, 1e-12);
  EXPECT_NEAR(m.idle_share, 10.0 / 130.0, 1e-9);
  EXPECT_NEAR(m.wall.median_ms, 1.0, 1e-12);
  EXPECT_EQ(m.unattributed, 0);
}

TEST(ProfileAnalysis, RooflineVerdictUsesTheRightPeak) {
  auto g = two_nodes();
  Analysis a = analyze(collected(*g), test_peaks(), Precision::FP16, DType::Float16);
  const NodeProfile& relu = a.nodes[0];
  ASSERT_TRUE(relu.cost);
  // fp16 storage: 2 MiB read + 2 MiB written in 10 us.
  EXPECT_DOUBLE_EQ(relu.cost->bytes_read, 2.0 * 1024 * 1024);
  EXPECT_EQ(relu.bound, "memory");
  EXPECT_EQ(relu.peak, "bandwidth");
  EXPECT_NEAR(relu.bytes_per_s, 4.0 * 1024 * 1024 / 10e-6, 1);
  EXPECT_NEAR(relu.pct_of_peak, 100.0 * relu.bytes_per_s / 1e12, 1e-9);
  const NodeProfile& mm = a.nodes[1];
  EXPECT_EQ(mm.bound, "compute");
  EXPECT_EQ(mm.peak, "fp16");  // a tensor-core op at --precision fp16
  EXPECT_NEAR(mm.flops_per_s, 2.0 * 1024 * 1024 * 1024 / 115e-6, 1e3);
  EXPECT_NEAR(mm.roofline_ms, 2.0 * 1024 * 1024 * 1024 / 100e12 * 1e3, 1e-9);
  EXPECT_NEAR(a.node_ms, 0.125, 1e-12);
}

TEST(ProfileAnalysis, UnattributedRecordsAreCounted) {
  auto g = two_nodes();
  Collected c = collected(*g);
  c.records.push_back(rec(0, -1, 500, 510, "stray"));
  Analysis a = analyze(c, test_peaks(), Precision::FP32, DType::Undefined);
  int stray = 0;
  for (const auto& k : a.kernels) stray += k.step < 0;
  EXPECT_EQ(stray, 1);
  EXPECT_EQ(a.modes[0].unattributed, 0);  // the median iteration has none
  c.records.push_back(rec(1, -1, 1500, 1510, "stray"));
  EXPECT_EQ(analyze(c, test_peaks(), Precision::FP32, DType::Undefined).modes[0].unattributed, 1);
}

TEST(ProfileAnalysis, CompareUnfusedCreditsEachFusion) {
  Analysis given, opt;
  auto node = [](const char* name, const char* op, double ms, int records, double bytes,
                 std::vector<std::string> from = {}) {
    NodeProfile n;
    n.name = name;
    n.op_type = op;
    n.kind = "kernel";
    n.median_ms = ms;
    n.records_per_iteration = records;
    n.cost = Cost{0, bytes / 2, bytes / 2};
    n.fused_from = std::move(from);
    return n;
  };
  given.nodes = {node("conv", "Conv", 1.0, 1, 100), node("bn", "BatchNormalization", 0.5, 1, 80),
                 node("relu", "Relu", 0.4, 1, 80), node("shape", "Shape", 0.0, 0, 0), node("fc", "Gemm", 0.3, 1, 50)};
  opt.nodes = {node("conv", "FusedConv", 1.1, 1, 100, {"conv", "bn", "relu"}), node("fc", "Gemm", 0.3, 1, 50)};
  UnfusedComparison u = compare_unfused(given, opt);
  EXPECT_EQ(u.nodes_before, 5);
  EXPECT_EQ(u.nodes_after, 2);
  EXPECT_EQ(u.kernels_before, 4);
  EXPECT_EQ(u.kernels_after, 2);
  ASSERT_EQ(u.fusions.size(), 1u);  // fc is untouched
  const FusionRow& f = u.fusions[0];
  EXPECT_EQ(f.node, "conv");
  EXPECT_EQ(f.kernels_before, 3);
  EXPECT_EQ(f.kernels_after, 1);
  EXPECT_NEAR(f.ms_before - f.ms_after, 0.8, 1e-12);
  EXPECT_DOUBLE_EQ(f.bytes_before - f.bytes_after, 160);
  ASSERT_EQ(u.removed.originals, std::vector<std::string>{"shape"});
}

TEST(ProfileReport, JsonAndTraceCarryEveryRecord) {
  auto g = two_nodes();
  Collected c = collected(*g);
  Analysis a = analyze(c, test_peaks(), Precision::FP32, DType::Undefined);
  ReportMeta meta;
  meta.model = "m.onnx";
  meta.variant = "optimized";
  meta.device_kind = "cuda";
  meta.device_name = "test GPU";
  auto j = report_json(meta, test_peaks(), c, a, nullptr, nullptr);
  EXPECT_EQ(j["schema"], "fusec.profile/1");
  EXPECT_EQ(j["nodes"].size(), 2u);
  EXPECT_EQ(j["kernels"].size(), 4u);
  EXPECT_EQ(j["modes"][0]["samples_ms"].size(), 3u);
  auto t = nlohmann::json::parse(chrome_trace(meta, c, a));
  int slices = 0, node_ranges = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "X") continue;
    EXPECT_GE(e["ts"].get<double>(), 0.0);
    if (e["cat"] == "node")
      ++node_ranges;
    else
      ++slices;
  }
  EXPECT_EQ(slices, 12);      // 4 records x 3 iterations; the warm-up record is left out
  EXPECT_EQ(node_ranges, 6);  // 2 nodes x 3 iterations
}

TEST(ProfilePeaks, CacheRoundTripAndDamage) {
  auto dir = std::filesystem::temp_directory_path() / ("fusec_peaks_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "sub" / "peaks.json").string();
  ::setenv("FUSEC_PEAKS_CACHE", path.c_str(), 1);
  EXPECT_EQ(peaks_cache_path(), path);
  EXPECT_FALSE(load_cached_peaks("dev"));
  int measured = 0;
  auto measure = [&] {
    ++measured;
    Peaks p = test_peaks();
    p.device = "dev";
    return p;
  };
  std::string warning;
  Peaks first = cached_or_measured("dev", false, measure, &warning);
  EXPECT_EQ(first.source, "measured");
  EXPECT_EQ(first.cache_path, path);
  EXPECT_TRUE(warning.empty()) << warning;
  Peaks second = cached_or_measured("dev", false, measure, &warning);
  EXPECT_EQ(measured, 1);
  EXPECT_EQ(second.source, "cache");
  EXPECT_DOUBLE_EQ(second.flops_per_s.at("fp16"), 100e12);
  EXPECT_EQ(second.measured_at, first.measured_at);
  cached_or_measured("dev", true, measure, &warning);  // --remeasure-peaks
  EXPECT_EQ(measured, 2);
  { std::ofstream(path) << "{ not json"; }
  EXPECT_FALSE(load_cached_peaks("dev"));
  cached_or_measured("dev", false, measure, &warning);
  EXPECT_EQ(measured, 3);
  EXPECT_TRUE(load_cached_peaks("dev"));
  ::unsetenv("FUSEC_PEAKS_CACHE");
  std::filesystem::remove_all(dir);
}

TEST(ProfileCost, FusedConvCountsEachInputOnce) {
  // Y = Relu(Conv(X, W, B) + Z): the profiler's bytes are X + W + B + Z read and Y written.
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Dim(2), Dim(8), Dim(16), Dim(16)});
  Value* w = b.initializer("w", Tensor(DType::Float32, {32, 8, 1, 1}));
  Value* bias = b.initializer("b", Tensor(DType::Float32, {32}));
  Value* z = b.input("z", DType::Float32, {Dim(2), Dim(32), Dim(16), Dim(16)});
  auto outs = b.node_n("FusedConv", {x, w, bias, z}, 1, {attr("activation", std::string("Relu"))}, "fc", "ai.fusec");
  b.output(outs[0]);
  auto g = b.build();
  infer_shapes(*g);
  auto cost = node_cost(*g, *g->nodes()[0]);
  ASSERT_TRUE(cost);
  const double X = 2 * 8 * 16 * 16 * 4, W = 32 * 8 * 4, B = 32 * 4, Z = 2 * 32 * 16 * 16 * 4;
  EXPECT_DOUBLE_EQ(cost->bytes_read, X + W + B + Z);
  EXPECT_DOUBLE_EQ(cost->bytes_written, Z);
  auto half = node_cost(*g, *g->nodes()[0], DType::Float16);
  EXPECT_DOUBLE_EQ(half->bytes_read, (X + W + B + Z) / 2);
}

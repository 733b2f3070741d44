// fusec compare's engine on hand-made reports: schema checks, identity refusal, each metric kind's
// verdict, and the formats.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "ir/error.h"
#include "profiler/compare.h"

namespace fusec::compare {
namespace {

using json = nlohmann::json;

std::vector<double> samples(double median, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z(0, 0.01);
  std::vector<double> s;
  for (int i = 0; i < n; ++i) s.push_back(median * (1 + z(rng)));
  return s;
}

json bench_variant(const std::string& name, double median, int nodes, double activations, uint64_t seed) {
  auto s = samples(median, 40, seed);
  return {{"name", name},
          {"nodes", nodes},
          {"build_ms", 1.0},
          {"iterations", s.size()},
          {"latency_ms",
           {{"min", 0},
            {"mean", median},
            {"median", median},
            {"p90", 0},
            {"p95", 0},
            {"p99", 0},
            {"max", 0},
            {"stddev", 0}}},
          {"cv", 0.01},
          {"high_variance", false},
          {"throughput_per_s", 1.0},
          {"memory", {{"peak_activation_bytes", activations}, {"weight_bytes", 1000}, {"planned", true}}},
          {"cpu_nodes", json::array()},
          {"samples_ms", s}};
}

json bench_report(double opt_median, int opt_nodes, double opt_activations, uint64_t seed = 1) {
  return {{"schema", "fusec.bench/2"},
          {"model", "models/m.onnx"},
          {"device", "cpu"},
          {"device_name", "cpu (2 threads)"},
          {"precision", "fp32"},
          {"batch", 4},
          {"warmup", 1},
          {"timing", "host_clock"},
          {"speedup_median", 1.0},
          {"variants",
           {bench_variant("as_given", 2.0, 20, 4096, seed),
            bench_variant("optimized", opt_median, opt_nodes, opt_activations, seed + 100)}}};
}

const Row& row(const Comparison& c, const std::string& group, const std::string& metric) {
  for (const auto& r : c.rows)
    if (r.group == group && r.metric == metric) return r;
  throw std::runtime_error("no row " + group + " / " + metric);
}

Comparison cmp(const json& base, const json& next, bool allow = false, Thresholds t = {}) {
  return compare_reports(base, "base.json", next, "new.json", t, allow);
}

std::string bad_input_message(const json& base, const json& next, bool allow = false) {
  try {
    cmp(base, next, allow);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    return e.what();
  }
  ADD_FAILURE() << "expected a BadInput error";
  return "";
}

TEST(Compare, BenchAgainstItselfIsUnchanged) {
  auto c = cmp(bench_report(1.0, 10, 2048), bench_report(1.0, 10, 2048));
  EXPECT_EQ(c.regressions, 0);
  EXPECT_EQ(c.improvements, 0);
  for (const auto& r : c.rows) EXPECT_EQ(r.verdict, Verdict::Same) << r.group << " " << r.metric;
  EXPECT_NEAR(*row(c, "optimized", "latency").p_value, 1.0, 1e-12);
}

TEST(Compare, BenchRegressionsInLatencyNodesAndMemory) {
  auto c = cmp(bench_report(1.0, 10, 2048), bench_report(1.5, 14, 4096, 7));
  EXPECT_EQ(row(c, "optimized", "latency").verdict, Verdict::Worse);
  EXPECT_LT(*row(c, "optimized", "latency").p_value, 1e-6);
  EXPECT_NEAR(row(c, "optimized", "latency").delta, 0.5, 0.02);
  EXPECT_EQ(row(c, "optimized", "nodes").verdict, Verdict::Worse);
  EXPECT_EQ(row(c, "optimized", "activations").verdict, Verdict::Worse);
  EXPECT_EQ(row(c, "as_given", "latency").verdict, Verdict::Same);  // same distribution, other seed
  EXPECT_EQ(c.regressions, 3);
  // The other way round, all three improved.
  auto back = cmp(bench_report(1.5, 14, 4096, 7), bench_report(1.0, 10, 2048));
  EXPECT_EQ(back.regressions, 0);
  EXPECT_EQ(back.improvements, 3);
  // A 4% latency change is below the default 5% threshold, whatever its p-value.
  auto small = cmp(bench_report(1.0, 10, 2048), bench_report(1.04, 10, 2048, 9));
  EXPECT_EQ(row(small, "optimized", "latency").verdict, Verdict::Same);
  EXPECT_LT(*row(small, "optimized", "latency").p_value, 0.01);
  Thresholds t;
  t.timing = 0.02;
  EXPECT_EQ(
      row(cmp(bench_report(1.0, 10, 2048), bench_report(1.04, 10, 2048, 9), false, t), "optimized", "latency").verdict,
      Verdict::Worse);
}

// The as-given model, the same graph in both reports, is a control: when it moves, the machine
// changed speed between the runs. The verdicts stand (a slower backend slows it too); a note says so.
TEST(Compare, AMovedControlIsNotedAsMachineDrift) {
  auto scaled = [](json r, double f) {
    for (auto& v : r["variants"]) {
      for (auto& x : v["samples_ms"]) x = x.get<double>() * f;
      v["latency_ms"]["median"] = v["latency_ms"]["median"].get<double>() * f;
    }
    return r;
  };
  auto has_drift = [](const Comparison& c) {
    return std::any_of(c.notes.begin(), c.notes.end(), [](const std::string& n) {
      return n.find("as_given ran the same graph in both reports, yet its latency moved +60.0%") == 0;
    });
  };
  const json base = bench_report(1.0, 10, 2048);
  auto c = cmp(base, scaled(base, 1.6));
  EXPECT_TRUE(row(c, "as_given", "latency").control);
  EXPECT_EQ(row(c, "as_given", "latency").verdict, Verdict::Worse);
  EXPECT_EQ(row(c, "optimized", "latency").verdict, Verdict::Worse);
  EXPECT_TRUE(has_drift(c)) << (c.notes.empty() ? "" : c.notes.back());
  EXPECT_EQ(c.notes.back(), c.drift_note);
  // Evaluated again with timings not comparable (fusec check, another machine's baseline): the
  // control has no verdict, so the note goes, and it is never there twice.
  c.timings_comparable = false;
  evaluate(c);
  EXPECT_TRUE(c.notes.empty());
  c.timings_comparable = true;
  evaluate(c);
  evaluate(c);
  EXPECT_EQ(std::count(c.notes.begin(), c.notes.end(), c.drift_note), 1);
  // A steady control: no note. Another as-given graph (a node more): not a control.
  EXPECT_TRUE(cmp(base, bench_report(1.6, 10, 2048, 3)).notes.empty());
  json other = scaled(base, 1.6);
  other["variants"][0]["nodes"] = 21;
  auto o = cmp(base, other);
  EXPECT_FALSE(row(o, "as_given", "latency").control);
  EXPECT_FALSE(has_drift(o));
}

TEST(Compare, MemoryAndCountThresholds) {
  Thresholds t;
  t.memory = 0.10;
  t.count = 0.5;
  auto c = cmp(bench_report(1.0, 10, 2000), bench_report(1.0, 14, 2150), false, t);
  EXPECT_EQ(row(c, "optimized", "activations").verdict, Verdict::Same);  // +7.5% < 10%
  EXPECT_EQ(row(c, "optimized", "nodes").verdict, Verdict::Same);        // +40% < 50%
  c = cmp(bench_report(1.0, 10, 2000), bench_report(1.0, 16, 2300), false, t);
  EXPECT_EQ(row(c, "optimized", "activations").verdict, Verdict::Worse);
  EXPECT_EQ(row(c, "optimized", "nodes").verdict, Verdict::Worse);
}

TEST(Compare, VariantOnlyInOneReport) {
  json base = bench_report(1.0, 10, 2048), next = bench_report(1.0, 10, 2048);
  next["variants"].erase(1);
  auto c = cmp(base, next);
  EXPECT_EQ(c.regressions, 0);
  EXPECT_EQ(row(c, "optimized", "nodes").note, "only in base");
  EXPECT_FALSE(row(c, "optimized", "nodes").next.has_value());
}

TEST(Compare, RefusesDifferentRunsAndSaysWhatDiffers) {
  json other = bench_report(1.0, 10, 2048);
  other["batch"] = 16;
  other["device_name"] = "cuda:0 NVIDIA H100 80GB HBM3 (sm_90)";
  std::string msg = bad_input_message(bench_report(1.0, 10, 2048), other);
  EXPECT_NE(msg.find("batch '4' vs '16'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("device_name 'cpu (2 threads)' vs 'cuda:0 NVIDIA H100"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--allow-different"), std::string::npos) << msg;
  auto c = cmp(bench_report(1.0, 10, 2048), other, true);
  EXPECT_EQ(c.differences.size(), 2u);
  EXPECT_NE(format_text(c).find("note: batch differs"), std::string::npos);
  // A model in another folder is the same model; another file name is not.
  json moved = bench_report(1.0, 10, 2048);
  moved["model"] = "/elsewhere/m.onnx";
  EXPECT_TRUE(cmp(bench_report(1.0, 10, 2048), moved).differences.empty());
  moved["model"] = "/elsewhere/n.onnx";
  EXPECT_NE(bad_input_message(bench_report(1.0, 10, 2048), moved).find("model 'm.onnx' vs 'n.onnx'"),
            std::string::npos);
}

TEST(Compare, SchemaErrorsNameTheFile) {
  json b = bench_report(1.0, 10, 2048);
  json newer = b;
  newer["schema"] = "fusec.bench/3";
  std::string msg = bad_input_message(b, newer);
  EXPECT_NE(msg.find("'new.json' is a fusec.bench/3 report, newer than this fusec reads (fusec.bench/2)"),
            std::string::npos)
      << msg;
  json older = b;
  older["schema"] = "fusec.bench/1";
  EXPECT_NE(bad_input_message(older, b).find("'base.json' is a fusec.bench/1 report, older"), std::string::npos);
  EXPECT_NE(bad_input_message(json{{"schema", "fusec.inspect/1"}}, b).find("compare reads fusec.bench/2"),
            std::string::npos);
  EXPECT_NE(bad_input_message(json::array(), b).find("no \"schema\" field"), std::string::npos);
  EXPECT_NE(bad_input_message(json{{"schema", "bench"}}, b).find("not of the form"), std::string::npos);
  json opt = {{"schema", "fusec.optimize/1"}};
  EXPECT_NE(bad_input_message(b, opt).find("compare two reports of one kind"), std::string::npos);
  json broken = b;
  broken["variants"][1]["samples_ms"] = "fast";
  EXPECT_NE(bad_input_message(b, broken).find("'new.json': variants[optimized].samples_ms is missing or not an array"),
            std::string::npos);
}

json optimize_report(int nodes, bool ok, double max_rel, double bytes = 1000) {
  return {{"schema", "fusec.optimize/1"},
          {"model", "m.onnx"},
          {"output", "m.opt.onnx"},
          {"portable", false},
          {"ops", {{"Conv", {{"before", 4}, {"after", 0}}}, {"ai.fusec.FusedConv", {{"before", 0}, {"after", nodes}}}}},
          {"nodes", {{"before", 12}, {"after", nodes}}},
          {"model_bytes", {{"before", 1200}, {"after", bytes}}},
          {"iterations", 2},
          {"passes", {{{"name", "fuse_conv_activation"}, {"rewrites", 4}, {"ms", 0.1}}}},
          {"rewrites", json::array()},
          {"near_misses", json::array()},
          {"verification",
           {{"runs", 3},
            {"rtol", 1e-4},
            {"atol", 1e-5},
            {"ok", ok},
            {"outputs", {{{"name", "y"}, {"max_abs", max_rel}, {"max_rel", max_rel}, {"ok", ok}}}}}}};
}

TEST(Compare, OptimizeReports) {
  auto same = cmp(optimize_report(4, true, 1e-7), optimize_report(4, true, 3e-7));
  EXPECT_EQ(same.regressions, 0) << format_text(same);  // both errors below a tenth of the tolerance
  auto worse = cmp(optimize_report(4, true, 1e-7), optimize_report(6, false, 5e-3, 1200));
  EXPECT_EQ(row(worse, "graph", "nodes").verdict, Verdict::Worse);
  EXPECT_EQ(row(worse, "graph", "model size").verdict, Verdict::Worse);
  EXPECT_EQ(row(worse, "verification", "ok").verdict, Verdict::Worse);
  EXPECT_EQ(row(worse, "verification", "max rel error").verdict, Verdict::Worse);
  EXPECT_EQ(row(worse, "ops", "ai.fusec.FusedConv").kind, Kind::Info);  // context, never a verdict
  EXPECT_EQ(worse.regressions, 5);                                      // nodes, size, ok, max abs, max rel
  // Errors above the floor that grow less than 2x are the same; more than 2x is worse.
  EXPECT_EQ(cmp(optimize_report(4, true, 2e-5), optimize_report(4, true, 3.9e-5)).regressions, 0);
  EXPECT_EQ(cmp(optimize_report(4, true, 2e-5), optimize_report(4, true, 4.1e-5)).regressions, 2);
  json portable = optimize_report(4, true, 1e-7);
  portable["portable"] = true;
  EXPECT_NE(bad_input_message(optimize_report(4, true, 1e-7), portable).find("portable"), std::string::npos);
}

TEST(Compare, Formats) {
  auto c = cmp(bench_report(1.0, 10, 2048), bench_report(1.5, 14, 4096, 7));
  std::string text = format_text(c);
  EXPECT_NE(text.find("REGRESSION"), std::string::npos);
  EXPECT_NE(text.find("3 regressions, 0 improvements"), std::string::npos);
  std::string md = format_markdown(c);
  EXPECT_NE(md.find("| optimized | latency |"), std::string::npos) << md;
  EXPECT_NE(md.find("**regression**"), std::string::npos);
  auto j = to_json(c);
  EXPECT_EQ(j["schema"], "fusec.compare/1");
  EXPECT_EQ(j["regressions"], 3);
  EXPECT_EQ(j["rows"][4]["group"], "optimized");
  EXPECT_EQ(j["rows"][4]["verdict"], "worse");
}

json profile_node(const std::string& name, const std::string& op, double median, uint64_t seed) {
  return {{"name", name}, {"op_type", op}, {"median_ms", median}, {"samples_ms", samples(median, 40, seed)}};
}

/// A CPU profile: a run of 1 ms made of node "big" (0.5 ms), `small` (0.004 ms) and "other".
json profile_report(double big_ms, double small_ms, const std::string& small_op = "Relu", uint64_t seed = 1) {
  json nodes = {profile_node("big", "Conv", big_ms, seed), profile_node("small", small_op, small_ms, seed + 1),
                profile_node("other", "Add", 0.3, seed + 2)};
  json kernels = json::array();
  for (const auto& n : nodes)
    kernels.push_back({{"name", n["name"]},
                       {"kind", "host"},
                       {"node", n["name"]},
                       {"ordinal", 0},
                       {"median_ms", n["median_ms"]},
                       {"samples_ms", n["samples_ms"]}});
  double run = big_ms + small_ms + 0.3;
  return {{"schema", "fusec.profile/1"},
          {"model", "m.onnx"},
          {"variant", "optimized"},
          {"device", {{"kind", "cpu"}, {"name", "cpu (2 threads)"}, {"threads", 2}}},
          {"precision", "fp32"},
          {"batch", 1},
          {"totals", {{"flops", 100}, {"bytes_read", 1000}, {"bytes_written", 200}, {"node_ms", run}}},
          {"modes",
           {{{"name", "cpu"},
             {"wall_ms", {{"median", run}}},
             {"launches", 3},
             {"copies", 0},
             {"samples_ms", samples(run, 40, seed + 3)}}}},
          {"nodes", nodes},
          {"kernels", kernels},
          {"op_types",
           {{{"op_type", "Conv"}, {"nodes", 1}},
            {{"op_type", small_op}, {"nodes", 1}},
            {{"op_type", "Add"}, {"nodes", 1}}}}};
}

TEST(Compare, ProfileNodesCountWhenTheyMatterToTheRun) {
  auto same = cmp(profile_report(0.5, 0.004), profile_report(0.5, 0.004, "Relu", 11));
  EXPECT_EQ(same.regressions, 0) << format_text(same);
  EXPECT_EQ(row(same, "node big", "time").multiplicity, 3);
  // "small" 50% slower is 0.2% of the run: significant, but not a regression of the run.
  auto tiny = cmp(profile_report(0.5, 0.004), profile_report(0.5, 0.006));
  EXPECT_EQ(row(tiny, "node small", "time").verdict, Verdict::Same);
  EXPECT_NE(row(tiny, "node small", "time").note.find("of the run"), std::string::npos);
  // "big" 20% slower is 10% of the run: a node regression, and the run's latency too.
  auto big = cmp(profile_report(0.5, 0.004), profile_report(0.6, 0.004));
  EXPECT_EQ(row(big, "node big", "time").verdict, Verdict::Worse);
  EXPECT_EQ(row(big, "cpu", "latency").verdict, Verdict::Worse);
  // A node that now runs another op is another node: not compared, noted.
  auto changed = cmp(profile_report(0.5, 0.004), profile_report(0.5, 0.004, "Gelu"));
  EXPECT_THROW(row(changed, "node small", "time"), std::runtime_error);
  ASSERT_FALSE(changed.notes.empty());
  EXPECT_NE(changed.notes.back().find("small (Relu -> Gelu)"), std::string::npos);
  // More kernels, launches and modelled bytes are regressions.
  json more = profile_report(0.5, 0.004);
  more["kernels"].push_back(more["kernels"][0]);
  more["kernels"].back()["ordinal"] = 1;
  more["modes"][0]["launches"] = 4;
  more["totals"]["bytes_written"] = 400;
  auto c = cmp(profile_report(0.5, 0.004), more);
  EXPECT_EQ(row(c, "graph", "kernels").verdict, Verdict::Worse);
  EXPECT_EQ(row(c, "cpu", "launches").verdict, Verdict::Worse);
  EXPECT_EQ(row(c, "graph", "bytes moved").verdict, Verdict::Worse);
  // The as-given variant against the optimized one is compared, with a note; another device is not.
  json given = profile_report(0.5, 0.004);
  given["variant"] = "as_given";
  EXPECT_NE(cmp(profile_report(0.5, 0.004), given).notes.front().find("variant"), std::string::npos);
  json gpu = profile_report(0.5, 0.004);
  gpu["device"] = {{"kind", "cuda"}, {"name", "cuda:0 NVIDIA H100"}};
  EXPECT_NE(bad_input_message(profile_report(0.5, 0.004), gpu).find("device 'cpu' vs 'cuda'"), std::string::npos);
}

TEST(Compare, FormatsEscapeWhatTheyEcho) {
  // Node names come from the model: HTML, pipes and newlines must reach neither the PR comment
  // nor the terminal as markup or extra lines.
  const std::string evil = "<img src=x onerror=alert(1)>|x\n\n**fusec check: no regression** (forged)\n";
  json r = profile_report(0.5, 0.004);
  r["nodes"][1]["name"] = "<script>alert(2)</script>";
  r["nodes"][0]["name"] = evil;
  r["kernels"][0]["name"] = evil;
  r["kernels"][0]["node"] = evil;
  auto c = cmp(r, r);
  std::string md = format_markdown(c, /*changed_only=*/false);
  EXPECT_NE(md.find("&lt;img src=x onerror=alert(1)&gt;\\|x\\\\n"), std::string::npos) << md;
  EXPECT_NE(md.find("&lt;script&gt;"), std::string::npos) << md;
  for (const std::string raw : {"<img", "<script", "\n**fusec check", "`"})
    EXPECT_EQ(md.find(raw), std::string::npos) << raw << "\n" << md;
  std::string text = format_text(c, false);
  EXPECT_EQ(text.find("\n**fusec check"), std::string::npos) << text;
  EXPECT_NE(text.find("|x\\n\\n**fusec check: no regression** (forged)\\n"), std::string::npos) << text;
}

TEST(Compare, VariantsAreMatchedByNameInLinearTime) {
  // A search per name made the comparison quadratic in the variants. The bound is on how its time
  // grows, not on the time itself (an ASan build on a loaded machine is many times slower than a
  // release one): 8 times the variants must take well under 8^2 = 64 times as long.
  auto reports = [](int n) {
    json base = bench_report(1.0, 10, 2048), next = base;
    json variants = json::array();
    for (int i = 0; i < n; ++i) {
      json v = base["variants"][0];
      v["name"] = "v" + std::to_string(i);
      v["samples_ms"] = {1.0, 1.1, 0.9};
      variants.push_back(std::move(v));
    }
    base["variants"] = variants;
    std::reverse(variants.begin(), variants.end());
    variants.erase(variants.begin());  // the last one only in base
    next["variants"] = variants;
    return std::pair{base, next};
  };
  auto fastest_of_two = [](const json& base, const json& next, Comparison* c) {
    double best = 1e30;
    for (int round = 0; round < 2; ++round) {
      auto t0 = std::chrono::steady_clock::now();
      *c = cmp(base, next);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  Comparison c;
  const auto [small_base, small_next] = reports(2000);
  const double t_small = fastest_of_two(small_base, small_next, &c);
  const auto [base, next] = reports(16000);
  const double t_large = fastest_of_two(base, next, &c);
  EXPECT_LT(t_large, 24 * t_small) << t_small << " s for 2,000 variants, " << t_large << " s for 16,000";
  EXPECT_EQ(row(c, "v123", "nodes").next, 20);
  EXPECT_EQ(row(c, "v15999", "nodes").note, "only in base");
  EXPECT_EQ(c.rows.front().group, "v0");  // the base's order
}

TEST(Compare, ParsePercent) {
  EXPECT_DOUBLE_EQ(parse_percent("5%", "--threshold"), 0.05);
  EXPECT_DOUBLE_EQ(parse_percent("0", "--threshold"), 0);
  EXPECT_DOUBLE_EQ(parse_percent("12.5%", "--threshold"), 0.125);
  EXPECT_THROW(parse_percent("5", "--threshold"), Error);
  EXPECT_THROW(parse_percent("-1%", "--threshold"), Error);
  EXPECT_THROW(parse_percent("five%", "--threshold"), Error);
  EXPECT_THROW(parse_percent("", "--threshold"), Error);
}

}  // namespace
}  // namespace fusec::compare

// The HTML pages on hand-made reports: what goes on the roofline, escaping, the measured timeline.
// (tests/cli/test_html.py renders real ones in headless Chromium.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "profiler/html_report.h"

using namespace fusec;
using namespace fusec::profiler;
using json = nlohmann::json;

namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

json node(int step, const std::string& name, const std::string& op, json flops, json bytes, double ms) {
  return {
      {"step", step},    {"name", name},     {"op_type", op},   {"kind", "node"},      {"fused_from", json::array()},
      {"median_ms", ms}, {"records", 1},     {"flops", flops},  {"bytes_read", bytes}, {"bytes_written", 0},
      {"intensity", 0},  {"bound", nullptr}, {"pct_of_peak", 0}};
}

json report() {
  json r = {{"schema", "fusec.profile/1"},
            {"model", "m<&>.onnx"},
            {"device", {{"kind", "cpu"}, {"name", "cpu \"test\""}}},
            {"precision", "fp32"},
            {"batch", 1},
            {"peaks", {{"bandwidth_bytes_per_s", 1e10}, {"flops_per_s", {{"fp32", 1e11}}}, {"measured_at", "now"}}},
            {"modes", json::array({{{"name", "cpu"}, {"wall_ms", {{"median", 1.0}, {"cv", 0.01}}}}})}};
  r["nodes"] = json::array({node(0, "conv <1> & \"x\"", "Conv", 1e6, 1e4, 0.5),  // on the roofline
                            node(1, "reshape", "Reshape", 0, 1e4, 0.01),         // no FLOPs
                            node(2, "custom", "Custom", nullptr, nullptr, 0.2),  // no cost
                            node(3, "never ran", "Relu", 1e3, 1e3, 0)});         // no time
  r["kernels"] = json::array();
  for (int i = 0; i < 4; ++i)
    r["kernels"].push_back({{"index", i},
                            {"name", r["nodes"][i]["name"]},
                            {"kind", "host"},
                            {"node", r["nodes"][i]["name"]},
                            {"step", i},
                            {"median_ms", r["nodes"][i]["median_ms"]}});
  r["op_types"] = json::array({{{"op_type", "Conv"}, {"nodes", 1}, {"ms", 0.5}, {"share", 0.7}}});
  return r;
}

}  // namespace

TEST(HtmlReport, PointsAreNodesWithACostAndATime) {
  json r = report();
  EXPECT_TRUE(on_roofline(r["nodes"][0]));
  EXPECT_FALSE(on_roofline(r["nodes"][1]));
  EXPECT_FALSE(on_roofline(r["nodes"][2]));
  EXPECT_FALSE(on_roofline(r["nodes"][3]));
  EXPECT_EQ(roofline_points(r), 1);
  std::string page = profile_html(r);
  EXPECT_EQ(count(page, "class=\"point\""), 1u);
  EXPECT_NE(page.find("data-points=\"1\""), std::string::npos);
  EXPECT_EQ(count(page, "class=\"span\""), 4u);  // one timeline bar per kernel
}

TEST(HtmlReport, EscapesEveryString) {
  std::string page = profile_html(report());
  EXPECT_EQ(page.find("conv <1>"), std::string::npos);
  EXPECT_EQ(page.find("m<&>"), std::string::npos);
  EXPECT_NE(page.find("conv &lt;1&gt; &amp; &quot;x&quot;"), std::string::npos);
  EXPECT_NE(page.find("m&lt;&amp;&gt;.onnx"), std::string::npos);
  EXPECT_NE(page.find("cpu &quot;test&quot;"), std::string::npos);
  // Self-contained: nothing to fetch.
  EXPECT_EQ(page.find("<script src"), std::string::npos);
  EXPECT_EQ(page.find("<link"), std::string::npos);
}

TEST(HtmlReport, SurvivesAMinimalReport) {
  std::string page = profile_html(json{{"schema", "fusec.profile/1"}});
  EXPECT_NE(page.find("data-ready"), std::string::npos);  // the script is there
  EXPECT_EQ(count(page, "class=\"point\""), 0u);
}

TEST(HtmlReport, MeasuredTimelineUsesStartOffsetsOfTheMedianIteration) {
  Collected c;
  c.modes.push_back({"cpu", {3.0, 1.0, 2.0}});  // median wall: iteration 2
  auto rec = [](int it, int step, uint64_t start, uint64_t end) {
    Record r;
    r.kind = RecordKind::Host;
    r.iteration = it;
    r.step = step;
    r.start_ns = start;
    r.end_ns = end;
    return r;
  };
  c.records = {rec(2, 1, 5'000'000, 6'000'000), rec(2, 0, 1'000'000, 2'000'000), rec(1, 0, 0, 10),
               rec(2, 1, 7'000'000, 7'500'000)};
  Analysis a;
  for (auto [step, ord] : {std::pair{0, 0}, {1, 0}, {1, 1}}) {
    KernelProfile k;
    k.step = step;
    k.ordinal = ord;
    a.kernels.push_back(k);
  }
  Timeline t = measured_timeline(c, a);
  EXPECT_EQ(t.iteration, 2);
  ASSERT_EQ(t.spans.size(), 3u);
  EXPECT_EQ(t.spans[0].kernel, 0);
  EXPECT_DOUBLE_EQ(t.spans[0].start_ms, 0.0);
  EXPECT_EQ(t.spans[1].kernel, 1);
  EXPECT_DOUBLE_EQ(t.spans[1].start_ms, 4.0);
  EXPECT_EQ(t.spans[2].kernel, 2);  // the step's second record is its second kernel
  EXPECT_DOUBLE_EQ(t.spans[2].start_ms, 6.0);
  EXPECT_DOUBLE_EQ(t.spans[2].ms, 0.5);
}

TEST(HtmlReport, CompareShowsVerdictsAndBothReportsPoints) {
  compare::Comparison c;
  c.family = "fusec.profile";
  c.base_path = "base.json";
  c.next_path = "new.json";
  c.label = "m <x>";
  compare::Row row;
  row.group = "node <a>";
  row.metric = "time";
  row.kind = compare::Kind::Count;
  row.base = 1;
  row.next = 2;
  c.rows.push_back(row);
  compare::evaluate(c);
  json b = report(), n = report();
  std::string page = compare_html(c, &b, &n);
  EXPECT_EQ(count(page, "class=\"point base\""), 1u);
  EXPECT_EQ(count(page, "class=\"point new\""), 1u);
  EXPECT_NE(page.find("node &lt;a&gt;"), std::string::npos);
  EXPECT_NE(page.find("REGRESSION"), std::string::npos);
  EXPECT_NE(page.find("data-regressions=\"1\""), std::string::npos);
  std::string table_only = compare_html(c, nullptr, nullptr);
  EXPECT_EQ(table_only.find("class=\"point"), std::string::npos);
}

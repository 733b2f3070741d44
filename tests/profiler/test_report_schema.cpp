// profiler/report_schema.h: the schemas built into fusec are docs/schemas/ (every keyword they use
// is one the validator implements), the committed baselines are valid, and each kind of mistake in
// a report is found.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "ir/error.h"
#include "ir/json_text.h"
#include "profiler/report_schema.h"

namespace fusec::profiler {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json load(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_json(ss.str(), p.string());
}

TEST(ReportSchema, BuiltInSchemasAreDocsSchemas) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(fs::path(FUSEC_SOURCE_DIR) / "docs" / "schemas")) {
    json doc = load(e.path());
    const json* built = builtin_schema(doc.at("$id").get<std::string>());
    ASSERT_NE(built, nullptr) << e.path();
    EXPECT_EQ(*built, doc) << e.path() << " differs from the copy built into fusec: re-run cmake";
    EXPECT_NO_THROW(schema_errors(json::object(), *built, 100)) << e.path() << " uses a keyword the validator lacks";
    ++n;
  }
  EXPECT_GE(n, 3);
  EXPECT_EQ(builtin_schema("fusec.bench/1"), nullptr);
}

TEST(ReportSchema, CommittedBaselinesAreValid) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(fs::path(FUSEC_SOURCE_DIR) / "examples" / "ci" / "baselines" / "cpu")) {
    json r = load(e.path());
    const json* s = builtin_schema(r.at("schema").get<std::string>());
    ASSERT_NE(s, nullptr) << e.path();
    EXPECT_EQ(schema_errors(r, *s), std::vector<std::string>{}) << e.path();
    ++n;
  }
  EXPECT_EQ(n, 12);
}

TEST(ReportSchema, FindsEachKindOfMistake) {
  json r = load(fs::path(FUSEC_SOURCE_DIR) / "examples/ci/baselines/cpu/mlp_small.bench.json");
  const json& s = *builtin_schema("fusec.bench/2");
  auto first_error = [&](json bad) {
    auto errors = schema_errors(bad, s);
    return errors.empty() ? std::string("(valid)") : errors[0];
  };
  json bad = r;
  bad.erase("variants");
  EXPECT_EQ(first_error(bad), "variants: is missing");
  bad = r;
  bad["variants"][0]["nodes"] = "many";
  EXPECT_EQ(first_error(bad), "variants[0].nodes: is a string, not integer");
  bad = r;
  bad["variants"][0]["nodes"] = 1.5;
  EXPECT_EQ(first_error(bad), "variants[0].nodes: is a number, not integer");
  bad = r;
  bad["variants"][0]["samples_ms"][1] = nullptr;  // what nlohmann writes for NaN
  EXPECT_EQ(first_error(bad), "variants[0].samples_ms[1]: is null, not number");
  bad = r;
  bad["precision"] = "fp8";
  EXPECT_EQ(first_error(bad), "precision: \"fp8\" is not one of [\"fp32\",\"tf32\",\"fp16\",\"bf16\"]");
  bad = r;
  bad["schema"] = "fusec.bench/3";
  EXPECT_EQ(first_error(bad), "schema: \"fusec.bench/3\" is not \"fusec.bench/2\"");
  bad = r;
  bad["variants"] = json::array();
  EXPECT_EQ(first_error(bad), "variants: has 0 items, fewer than 1");
  bad = r;
  bad["variants"][0]["latency_ms"]["extra"] = "x";  // additionalProperties: number
  EXPECT_EQ(first_error(bad), "variants[0].latency_ms.extra: is a string, not number");
  EXPECT_EQ(first_error(json::array()), "(the whole report): is an array, not object");
  EXPECT_EQ(schema_errors(json::array(), s, 100).size(), 1u);
}

TEST(ReportSchema, UnknownKeywordIsAnInternalError) {
  json s = {{"type", "object"}, {"patternProperties", json::object()}};
  try {
    schema_errors(json::object(), s);
    FAIL() << "an unimplemented keyword was ignored";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Internal);
    EXPECT_NE(std::string(e.what()).find("patternProperties"), std::string::npos);
  }
}

TEST(ReportSchema, RefsAndPropertyNames) {
  json s = {{"$defs", {{"pos", {{"type", "number"}, {"exclusiveMinimum", 0}}}}},
            {"type", "object"},
            {"propertyNames", {{"enum", {"a", "b"}}}},
            {"additionalProperties", {{"$ref", "#/$defs/pos"}}}};
  EXPECT_TRUE(schema_errors(json{{"a", 1}, {"b", 2.5}}, s).empty());
  EXPECT_EQ(schema_errors(json{{"a", 0}}, s), std::vector<std::string>{"a: 0 breaks exclusiveMinimum 0"});
  EXPECT_EQ(schema_errors(json{{"c", 1}}, s).at(0), "c (its name): \"c\" is not one of [\"a\",\"b\"]");
}

}  // namespace
}  // namespace fusec::profiler

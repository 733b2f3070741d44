// ir/json_text.h: the depth limit every JSON reader goes through, numbers a double cannot hold,
// and writing names that are not UTF-8.
#include <gtest/gtest.h>

#include "ir/error.h"
#include "ir/json_text.h"

namespace fusec {
namespace {

std::string nested(int depth, const std::string& inner = "") {
  return std::string(static_cast<size_t>(depth), '[') + inner + std::string(static_cast<size_t>(depth), ']');
}

std::string error_of(const std::string& text) {
  try {
    parse_json(text, "report 'r.json'");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    return e.what();
  }
  ADD_FAILURE() << "no error for " << text.substr(0, 80);
  return "";
}

TEST(ParseJson, DepthLimit) {
  EXPECT_NO_THROW(parse_json(nested(kJsonMaxDepth), "x"));
  EXPECT_EQ(error_of(nested(kJsonMaxDepth + 1)),
            "report 'r.json' nests arrays and objects deeper than 64 levels (byte 65)");
  // 100k levels (what overflowed dump()'s stack) is refused before anything is built.
  EXPECT_NE(error_of("{\"a\": " + nested(100000) + "}").find("deeper than 64 levels (byte 70)"), std::string::npos);
  std::string objects;
  for (int i = 0; i <= kJsonMaxDepth; ++i) objects += "{\"k\":";
  objects += "1" + std::string(kJsonMaxDepth + 1, '}');
  EXPECT_NE(error_of(objects).find("deeper than 64 levels"), std::string::npos);
}

TEST(ParseJson, BracketsInStringsDoNotCount) {
  std::string s = "{\"name\": \"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"}";
  nlohmann::json j = parse_json(s, "x");
  EXPECT_EQ(j["name"].get<std::string>().size(), 2001u);
}

TEST(ParseJson, NumbersOutsideADoubleAreBadInput) {
  EXPECT_EQ(error_of("{\"samples_ms\": [1e999, 2]}"),
            "report 'r.json' holds a number outside the range of a double (1e999)");
  EXPECT_NE(error_of("[-1e400]").find("(-1e400)"), std::string::npos);
  EXPECT_EQ(parse_json("[1e-999, 18446744073709551616]", "x")[0].get<double>(), 0.0);  // underflow is 0
}

TEST(ParseJson, NotJson) {
  EXPECT_EQ(error_of("{\"a\": NaN}"), "report 'r.json' is not JSON (byte 7)");
  EXPECT_NE(error_of("").find("is not JSON"), std::string::npos);
  std::string why;
  EXPECT_FALSE(try_parse_json(nested(65), &why));
  EXPECT_NE(why.find("deeper than"), std::string::npos);
  EXPECT_TRUE(try_parse_json("{\"a\": [1, 2]}"));
}

TEST(JsonText, NamesThatAreNotUtf8AreEscaped) {
  nlohmann::ordered_json j = {{"model", "m\xff.onnx"}, {"nodes", {{{"name", "relu_\xff\xfe"}}}}};
  j["ops"]["bad\xfekey"] = 1;
  EXPECT_THROW(j.dump(), nlohmann::json::type_error);  // what every writer did before
  std::string text = json_text(j, 2);
  nlohmann::json back = parse_json(text, "x");
  EXPECT_EQ(back["model"], "m\\xff.onnx");
  EXPECT_EQ(back["nodes"][0]["name"], "relu_\\xff\\xfe");
  EXPECT_TRUE(back["ops"].contains("bad\\xfekey"));
  nlohmann::json plain = {{"a", "\xc3\xa9"}};
  EXPECT_EQ(json_text(plain), plain.dump());  // valid text is written as dump() writes it
}

}  // namespace
}  // namespace fusec

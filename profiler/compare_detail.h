// What a report kind's matcher (compare_<kind>.cpp) works with: the report and its path, typed
// accessors that fail with a message naming the file and the JSON path, and the two things a
// matcher produces: identity differences and rows.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "profiler/compare.h"

namespace fusec::compare::detail {

struct Report {
  const nlohmann::json& j;
  std::string path;    // for messages
  std::string schema;  // "fusec.bench/2"
};

/// obj[key] as the given type, or BadInput "'<path>': <where>.<key> is missing or not <type>".
const nlohmann::json& object_at(const Report& r, const nlohmann::json& obj, const std::string& key,
                                const std::string& where = "");
const nlohmann::json& array_at(const Report& r, const nlohmann::json& obj, const std::string& key,
                               const std::string& where = "");
double number_at(const Report& r, const nlohmann::json& obj, const std::string& key, const std::string& where = "");
std::string string_at(const Report& r, const nlohmann::json& obj, const std::string& key,
                      const std::string& where = "");
bool bool_at(const Report& r, const nlohmann::json& obj, const std::string& key, const std::string& where = "");
/// An array of numbers (per-iteration samples).
std::vector<double> numbers_at(const Report& r, const nlohmann::json& obj, const std::string& key,
                               const std::string& where = "");
/// obj[key] when it is a number, nothing when absent or null (optional fields).
std::optional<double> optional_number(const Report& r, const nlohmann::json& obj, const std::string& key,
                                      const std::string& where = "");

/// The model's file name: reports written from different folders still match.
std::string model_name(const std::string& path);

/// Records `field` as differing when base != next.
void same(Comparison& c, const std::string& field, const std::string& base, const std::string& next);

/// Appends a row (base/next absent when that side has no such entry).
Row& add_row(Comparison& c, std::string group, std::string metric, Kind kind, std::optional<double> base,
             std::optional<double> next, bool headline = true);

// One matcher per report kind: identity fields into c.differences, the label, the rows.
void match_bench(const Report& base, const Report& next, Comparison& c);
void match_optimize(const Report& base, const Report& next, Comparison& c);
void match_profile(const Report& base, const Report& next, Comparison& c);

}  // namespace fusec::compare::detail

#include <filesystem>

#include "ir/error.h"
#include "profiler/compare_detail.h"

namespace fusec::compare::detail {

namespace {

[[noreturn]] void missing(const Report& r, const std::string& where, const std::string& key, const char* what) {
  bad_input("'" + r.path + "': " + (where.empty() ? "" : where + ".") + key + " is missing or not " + what + " (" +
            r.schema + ")");
}

const nlohmann::json* find(const nlohmann::json& obj, const std::string& key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

}  // namespace

const nlohmann::json& object_at(const Report& r, const nlohmann::json& obj, const std::string& key,
                                const std::string& where) {
  const auto* v = find(obj, key);
  if (!v || !v->is_object()) missing(r, where, key, "an object");
  return *v;
}

const nlohmann::json& array_at(const Report& r, const nlohmann::json& obj, const std::string& key,
                               const std::string& where) {
  const auto* v = find(obj, key);
  if (!v || !v->is_array()) missing(r, where, key, "an array");
  return *v;
}

double number_at(const Report& r, const nlohmann::json& obj, const std::string& key, const std::string& where) {
  const auto* v = find(obj, key);
  if (!v || !v->is_number()) missing(r, where, key, "a number");
  return v->get<double>();
}

std::string string_at(const Report& r, const nlohmann::json& obj, const std::string& key, const std::string& where) {
  const auto* v = find(obj, key);
  if (!v || !v->is_string()) missing(r, where, key, "a string");
  return v->get<std::string>();
}

bool bool_at(const Report& r, const nlohmann::json& obj, const std::string& key, const std::string& where) {
  const auto* v = find(obj, key);
  if (!v || !v->is_boolean()) missing(r, where, key, "true or false");
  return v->get<bool>();
}

std::vector<double> numbers_at(const Report& r, const nlohmann::json& obj, const std::string& key,
                               const std::string& where) {
  const auto& a = array_at(r, obj, key, where);
  std::vector<double> out;
  out.reserve(a.size());
  for (const auto& x : a) {
    if (!x.is_number()) missing(r, where, key, "an array of numbers");
    out.push_back(x.get<double>());
  }
  return out;
}

std::optional<double> optional_number(const Report& r, const nlohmann::json& obj, const std::string& key,
                                      const std::string& where) {
  const auto* v = find(obj, key);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_number()) missing(r, where, key, "a number or null");
  return v->get<double>();
}

std::string model_name(const std::string& path) { return std::filesystem::path(path).filename().string(); }

void same(Comparison& c, const std::string& field, const std::string& base, const std::string& next) {
  if (base != next) c.differences.push_back({field, base, next});
}

Row& add_row(Comparison& c, std::string group, std::string metric, Kind kind, std::optional<double> base,
             std::optional<double> next, bool headline) {
  Row r;
  r.group = std::move(group);
  r.metric = std::move(metric);
  r.kind = kind;
  r.base = base;
  r.next = next;
  r.headline = headline;
  c.rows.push_back(std::move(r));
  return c.rows.back();
}

}  // namespace fusec::compare::detail

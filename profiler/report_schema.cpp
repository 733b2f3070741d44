#include "profiler/report_schema.h"

#include <cmath>
#include <map>
#include <set>

#include "ir/error.h"
#include "ir/json_text.h"

namespace fusec::profiler {

namespace {

/// docs/schemas/*.schema.json, one raw string each (CMakeLists.txt generates the file).
const char* const kSchemaTexts[] = {
#include "report_schemas.inc"
};

const std::set<std::string> kAnnotations = {"$schema", "$id",         "$defs",   "$comment",
                                            "title",   "description", "default", "examples"};

std::string type_name(const nlohmann::json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "true/false";
  if (v.is_null()) return "null";
  if (v.is_array()) return "an array";
  return "an object";
}

struct Validator {
  const nlohmann::json& root;
  std::vector<std::string>& errors;
  size_t max;

  void fail(const std::string& where, const std::string& what) {
    if (errors.size() < max) errors.push_back((where.empty() ? "(the whole report)" : where) + ": " + what);
  }

  static bool is_type(const nlohmann::json& v, const std::string& t) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    if (t == "number") return v.is_number();
    if (t == "integer") {
      if (v.is_number_integer()) return true;
      double d = v.is_number_float() ? v.get<double>() : 0.5;
      return std::isfinite(d) && d == std::floor(d);
    }
    internal_error("docs/schemas: unknown type '" + t + "'");
  }

  static double number(const nlohmann::json& s, const std::string& key) {
    if (!s.is_number()) internal_error("docs/schemas: " + key + " is not a number");
    return s.get<double>();
  }

  const nlohmann::json& resolve(const std::string& ref) {
    const std::string prefix = "#/$defs/";
    if (ref.rfind(prefix, 0) != 0 || !root.contains("$defs") || !root["$defs"].contains(ref.substr(prefix.size())))
      internal_error("docs/schemas: $ref '" + ref + "' is not one of the schema's $defs");
    return root["$defs"][ref.substr(prefix.size())];
  }

  void check(const nlohmann::json& v, const nlohmann::json& s, const std::string& where, int depth) {
    if (depth > kJsonMaxDepth) internal_error("docs/schemas: $ref nests deeper than " + std::to_string(kJsonMaxDepth));
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(where, "not allowed here");
      return;
    }
    if (!s.is_object()) internal_error("docs/schemas: a schema at '" + where + "' is not an object");
    auto at = [&](const std::string& key) { return where.empty() ? key : where + "." + key; };
    for (const auto& [k, sv] : s.items()) {
      if (kAnnotations.count(k)) continue;
      if (k == "type") {
        bool ok = false;
        if (sv.is_string())
          ok = is_type(v, sv.get<std::string>());
        else
          for (const auto& t : sv) ok |= is_type(v, t.get<std::string>());
        if (!ok)
          fail(where, "is " + type_name(v) + ", not " + (sv.is_string() ? sv.get<std::string>() : json_text(sv)));
      } else if (k == "enum") {
        bool ok = false;
        for (const auto& e : sv) ok |= e == v;
        if (!ok) fail(where, json_text(v).substr(0, 60) + " is not one of " + json_text(sv));
      } else if (k == "const") {
        if (sv != v) fail(where, json_text(v).substr(0, 60) + " is not " + json_text(sv));
      } else if (k == "required") {
        if (!v.is_object()) continue;
        for (const auto& name : sv)
          if (!v.contains(name.get<std::string>())) fail(at(name.get<std::string>()), "is missing");
      } else if (k == "properties") {
        if (!v.is_object()) continue;
        for (const auto& [name, sub] : sv.items())
          if (auto it = v.find(name); it != v.end()) check(*it, sub, at(name), depth + 1);
      } else if (k == "additionalProperties") {
        if (!v.is_object()) continue;
        const nlohmann::json* props = s.contains("properties") ? &s["properties"] : nullptr;
        for (const auto& [name, x] : v.items())
          if (!props || !props->contains(name)) check(x, sv, at(name), depth + 1);
      } else if (k == "propertyNames") {
        if (!v.is_object()) continue;
        for (const auto& [name, x] : v.items()) check(nlohmann::json(name), sv, at(name) + " (its name)", depth + 1);
      } else if (k == "items") {
        if (!v.is_array()) continue;
        for (size_t i = 0; i < v.size(); ++i) check(v[i], sv, where + "[" + std::to_string(i) + "]", depth + 1);
      } else if (k == "minItems" || k == "maxItems") {
        if (!v.is_array()) continue;
        double n = number(sv, k), size = static_cast<double>(v.size());
        if (k == "minItems" ? size < n : size > n)
          fail(where, "has " + std::to_string(v.size()) + " items, " + (k == "minItems" ? "fewer" : "more") + " than " +
                          json_text(sv));
      } else if (k == "minProperties" || k == "maxProperties") {
        if (!v.is_object()) continue;
        double n = number(sv, k), size = static_cast<double>(v.size());
        if (k == "minProperties" ? size < n : size > n)
          fail(where, "has " + std::to_string(v.size()) + " keys, " + (k == "minProperties" ? "fewer" : "more") +
                          " than " + json_text(sv));
      } else if (k == "minimum" || k == "maximum" || k == "exclusiveMinimum" || k == "exclusiveMaximum") {
        if (!v.is_number()) continue;
        double x = v.get<double>(), b = number(sv, k);
        bool ok = k == "minimum" ? x >= b : k == "maximum" ? x <= b : k == "exclusiveMinimum" ? x > b : x < b;
        if (!ok) fail(where, json_text(v) + " breaks " + k + " " + json_text(sv));
      } else if (k == "$ref") {
        check(v, resolve(sv.get<std::string>()), where, depth + 1);
      } else {
        internal_error("docs/schemas uses the keyword '" + k + "', which fusec's schema validator does not implement");
      }
    }
  }
};

}  // namespace

const nlohmann::json* builtin_schema(const std::string& id) {
  static const std::map<std::string, nlohmann::json> schemas = [] {
    std::map<std::string, nlohmann::json> m;
    for (const char* text : kSchemaTexts) {
      nlohmann::json s = parse_json(text, "a built-in schema");
      std::string id = s.at("$id").get<std::string>();  // before the move: operator= takes its operand by value
      m[id] = std::move(s);
    }
    return m;
  }();
  auto it = schemas.find(id);
  return it == schemas.end() ? nullptr : &it->second;
}

std::vector<std::string> schema_errors(const nlohmann::json& value, const nlohmann::json& schema, size_t max) {
  std::vector<std::string> errors;
  Validator{schema, errors, max}.check(value, schema, "", 0);
  return errors;
}

}  // namespace fusec::profiler

// The JSON Schemas of fusec's reports (docs/schemas/*.schema.json), built into the binary, and a
// validator for the part of JSON Schema 2020-12 they use: type, enum, const, required, properties,
// additionalProperties, propertyNames, minProperties/maxProperties, items, minItems/maxItems,
// minimum/maximum (and exclusive), $ref into $defs; annotations (title, description, ...) are
// skipped. A schema that uses any
// other keyword is an internal error, never a keyword silently ignored (tests/profiler/
// test_report_schema.cpp loads every schema in docs/schemas/).
//
// `fusec check --update-baselines` validates each report before it records it: a baseline is
// what every later CI run is judged against, so an empty or malformed one must never be written.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace fusec::profiler {

/// The schema whose "$id" is `id` ("fusec.bench/2"), built from docs/schemas/ at compile time;
/// nullptr when fusec has none.
const nlohmann::json* builtin_schema(const std::string& id);

/// Where `value` breaks `schema`, one "<json path>: <what>" each ("variants[0].nodes: not an
/// integer"), at most `max`; empty when it is valid.
std::vector<std::string> schema_errors(const nlohmann::json& value, const nlohmann::json& schema, size_t max = 5);

}  // namespace fusec::profiler

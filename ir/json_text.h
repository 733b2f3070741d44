// JSON as fusec reads and writes it: every reader (compare's reports and baselines, check, the
// peaks and tuning caches) parses through parse_json, and every writer dumps through json_text.
//
// Reading: the text is checked for nesting before it is parsed. nlohmann's parser is iterative,
// but dump(), copies and compare's walks recurse once per level: 100k nested brackets (200 KB)
// overflowed the stack (SIGSEGV). fusec's reports nest 4 to 6 levels and its schemas 9, so 64 is
// room for what a future version writes, and far from any stack's limit. A number a double cannot hold
// (1e999) is bad input, named, not nlohmann's out_of_range escaping as an "internal" error.
//
// Writing: model, node and file names are bytes, not always UTF-8; nlohmann throws on a string
// that is not. json_text writes each such byte as the text \xNN (ir/escape.h), so the report is
// valid JSON that still tells the names apart.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace fusec {

/// The deepest nesting of arrays and objects fusec reads.
constexpr int kJsonMaxDepth = 64;

/// `text` parsed, or BadInput "<what> <reason>": "is not JSON (byte N)", "nests arrays and
/// objects deeper than 64 levels (byte N)", "holds a number outside the range of a double (1e999)".
/// `what` names the file: "report 'base.json'".
nlohmann::json parse_json(std::string_view text, const std::string& what);

/// The same, for a reader that treats bad JSON as absent (a cache): nullopt, with the reason
/// (as after `what` above) in *why when given.
std::optional<nlohmann::json> try_parse_json(std::string_view text, std::string* why = nullptr);

/// `j` as text, as j.dump(indent) would write it, with bytes that are not UTF-8 in its strings
/// and keys written as \xNN instead of failing.
std::string json_text(const nlohmann::json& j, int indent = -1);
std::string json_text(const nlohmann::ordered_json& j, int indent = -1);

}  // namespace fusec

#include "ir/json_text.h"

#include "ir/error.h"
#include "ir/escape.h"

namespace fusec {

namespace {

/// The offset of the first bracket that opens level kJsonMaxDepth + 1, or npos. Brackets inside
/// strings do not count. Exact for well-formed JSON, which is all the parser accepts afterwards.
size_t too_deep_at(std::string_view t) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < t.size(); ++i) {
    char c = t[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kJsonMaxDepth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string_view::npos;
}

/// "number overflow parsing '1e999'" -> "1e999" (at most 40 characters of it).
std::string overflowing_number(const std::string& message) {
  size_t a = message.find('\''), b = message.rfind('\'');
  if (a == std::string::npos || b <= a) return "";
  std::string n = message.substr(a + 1, b - a - 1);
  return n.size() > 40 ? n.substr(0, 37) + "..." : n;
}

template <class J>
J escaped_copy(const J& j) {
  if (j.is_string()) return J(utf8_escaped(j.template get_ref<const typename J::string_t&>()));
  if (j.is_array()) {
    J out = J::array();
    for (const auto& x : j) out.push_back(escaped_copy(x));
    return out;
  }
  if (j.is_object()) {
    J out = J::object();
    for (auto it = j.begin(); it != j.end(); ++it) out[utf8_escaped(it.key())] = escaped_copy(it.value());
    return out;
  }
  return j;
}

template <class J>
std::string dump_escaped(const J& j, int indent) {
  try {
    return j.dump(indent);
  } catch (const nlohmann::json::type_error&) {  // 316: a string that is not UTF-8
    return escaped_copy(j).dump(indent);
  }
}

}  // namespace

std::optional<nlohmann::json> try_parse_json(std::string_view text, std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<nlohmann::json> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  if (size_t at = too_deep_at(text); at != std::string_view::npos)
    return fail("nests arrays and objects deeper than " + std::to_string(kJsonMaxDepth) + " levels (byte " +
                std::to_string(at + 1) + ")");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return fail("is not JSON (byte " + std::to_string(e.byte) + ")");
  } catch (const nlohmann::json::out_of_range& e) {  // 406: a number past the range of a double
    return fail("holds a number outside the range of a double (" + overflowing_number(e.what()) + ")");
  }
}

nlohmann::json parse_json(std::string_view text, const std::string& what) {
  std::string why;
  auto j = try_parse_json(text, &why);
  if (!j) bad_input(what + " " + why);
  return std::move(*j);
}

std::string json_text(const nlohmann::json& j, int indent) { return dump_escaped(j, indent); }
std::string json_text(const nlohmann::ordered_json& j, int indent) { return dump_escaped(j, indent); }

}  // namespace fusec

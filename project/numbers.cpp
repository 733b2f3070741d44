#include "project/numbers.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "ir/error.h"

namespace fusec {

namespace {

std::string bound_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, std::fabs(x) < 1e15 && x == std::floor(x) ? "%.0f" : "%g", x);
  return buf;
}

[[noreturn]] void refuse(const std::string& name, const NumberRule& rule, const std::string& got) {
  bad_input(name + " must be " + describe(rule) + " (got " + got + ")");
}

}  // namespace

std::string describe(const NumberRule& r) {
  const double huge = std::numeric_limits<double>::max();
  bool has_min = r.min > -huge,
       has_max = r.max < huge && !(r.integer && r.max >= 1e15);  // int64, uint64: no upper bound worth saying
  std::string s = r.integer ? "an integer" : "a number";
  if (*r.unit) s += std::string(" of ") + r.unit;
  if (r.integer && has_min && has_max) return s + " from " + bound_text(r.min) + " to " + bound_text(r.max);
  if (has_min) s += (r.min_open ? " greater than " : " of at least ") + bound_text(r.min);
  if (has_min && has_max) s += " and";
  if (has_max) s += (r.max_open ? " below " : " at most ") + bound_text(r.max);
  return s;
}

bool meets(double x, const NumberRule& r) {
  return std::isfinite(x) && (!r.integer || x == std::floor(x)) && (r.min_open ? x > r.min : x >= r.min) &&
         (r.max_open ? x < r.max : x <= r.max);
}

void check_number(double x, const std::string& name, const NumberRule& r) {
  if (!meets(x, r)) refuse(name, r, exact_number_text(x));
}

namespace {

/// `text` read whole as a T (from_chars: no sign on an unsigned, no spaces, no "0x"); `rule` met.
template <class T>
T parse_whole(std::string_view text, const std::string& name, const NumberRule& r) {
  T x{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !meets(static_cast<double>(x), r))
    refuse(name, r, "'" + std::string(text) + "'");
  return x;
}

}  // namespace

double parse_number(std::string_view text, const std::string& name, const NumberRule& r) {
  if (r.integer) return static_cast<double>(parse_integer(text, name, r));
  return parse_whole<double>(text, name, r);
}

int64_t parse_integer(std::string_view text, const std::string& name, const NumberRule& r) {
  return parse_whole<int64_t>(text, name, r);
}

uint64_t parse_unsigned(std::string_view text, const std::string& name, const NumberRule& r) {
  return parse_whole<uint64_t>(text, name, r);
}

std::string exact_number_text(double x) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(x);
}

}  // namespace fusec

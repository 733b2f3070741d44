// Numbers a user types, as a flag (--rtol 1e-4) or as a fusec.toml value (rtol = 1e-4): each has
// one rule here, and both places check it through check_number, so a value refused on the command
// line is refused in the project file with the same words. NaN and infinities are refused
// everywhere: `x <= 0` lets NaN through (bench --duration nan never stopped; optimize --rtol nan
// verified nothing, since every comparison with NaN is false).
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace fusec {

/// What a number may be: finite, within [min, max] (an open end excludes the bound itself), and
/// a whole number when `integer`. `unit` is said in the message ("a number of seconds ...").
struct NumberRule {
  double min = -std::numeric_limits<double>::max();
  double max = std::numeric_limits<double>::max();
  bool min_open = false, max_open = false;
  bool integer = false;
  const char* unit = "";
};

namespace rules {
constexpr double kMaxRuns = 1 << 30;  // iterations, warm-up runs, verification sets, table rows
/// optimize's --rtol / --atol (fusec.toml rtol, atol): verification tolerances.
constexpr NumberRule kTolerance{.min = 0, .min_open = true};
/// bench --duration: long enough for any benchmark, short enough that it ends (a week).
constexpr NumberRule kDuration{.min = 0, .max = 7 * 24 * 3600.0, .min_open = true, .unit = "seconds"};
constexpr NumberRule kRuns{.min = 1, .max = kMaxRuns, .integer = true};                // --iterations, --top
constexpr NumberRule kWarmup{.min = 0, .max = kMaxRuns, .integer = true};              // --warmup, optimize --check
constexpr NumberRule kBatch{.min = 1, .max = 9.2e18, .integer = true};                 // --batch: an int64 dim
constexpr NumberRule kGpu{.min = 0, .max = 1 << 20, .integer = true};                  // --gpu
constexpr NumberRule kSeed{.min = 0, .max = 18446744073709551615.0, .integer = true};  // any uint64
constexpr NumberRule kFoldCapMib{.min = 0, .max = 1 << 30, .min_open = true, .unit = "MiB"};  // to 1 PiB
constexpr NumberRule kAlpha{.min = 0, .max = 1, .min_open = true, .max_open = true};          // --alpha
}  // namespace rules

/// "a number greater than 0", "an integer from 1 to 1073741824", ...: what `rule` asks for.
std::string describe(const NumberRule& rule);

/// True when `x` is finite and within `rule`.
bool meets(double x, const NumberRule& rule);

/// BadInput "<name> must be <describe(rule)> (got <x>)" unless `x` meets `rule`.
void check_number(double x, const std::string& name, const NumberRule& rule);

/// The number `text` spells (all of it; integer syntax for an integer rule), checked against
/// `rule`; BadInput "<name> must be ... (got '<text>')" otherwise.
double parse_number(std::string_view text, const std::string& name, const NumberRule& rule);
int64_t parse_integer(std::string_view text, const std::string& name, const NumberRule& rule);
uint64_t parse_unsigned(std::string_view text, const std::string& name, const NumberRule& rule);

/// The shortest text that reads back as exactly `x` ("4e-07", "0.0001"): how fusec passes a
/// number on to a command it runs, never std::to_string's six decimals (4e-7 -> "0.000000").
std::string exact_number_text(double x);

}  // namespace fusec

// project/numbers.h: the one check every numeric flag and fusec.toml value goes through, and the
// exact text check passes numbers on with.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ir/error.h"
#include "project/numbers.h"

namespace fusec {
namespace {

std::string error_of(std::string_view text, const NumberRule& rule, const std::string& name = "--rtol") {
  try {
    parse_number(text, name, rule);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    return e.what();
  }
  ADD_FAILURE() << "'" << text << "' accepted for " << name;
  return "";
}

TEST(Numbers, NanAndInfinitiesAreRefusedEverywhere) {
  for (const char* bad : {"nan", "NaN", "-nan", "inf", "-inf", "infinity", "1e999"})
    for (const NumberRule* rule : {&rules::kTolerance, &rules::kDuration, &rules::kAlpha, &rules::kFoldCapMib})
      error_of(bad, *rule);
  EXPECT_EQ(error_of("nan", rules::kTolerance), "--rtol must be a number greater than 0 (got 'nan')");
  EXPECT_EQ(error_of("inf", rules::kDuration, "--duration"),
            "--duration must be a number of seconds greater than 0 and at most 604800 (got 'inf')");
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  EXPECT_THROW(check_number(nan, "rtol", rules::kTolerance), Error);
  EXPECT_THROW(check_number(inf, "rtol", rules::kTolerance), Error);
  EXPECT_THROW(check_number(-inf, "alpha", rules::kAlpha), Error);
}

TEST(Numbers, Ranges) {
  EXPECT_EQ(error_of("-1", rules::kTolerance), "--rtol must be a number greater than 0 (got '-1')");
  error_of("0", rules::kTolerance);
  EXPECT_EQ(parse_number("4e-7", "--rtol", rules::kTolerance), 4e-7);
  EXPECT_EQ(error_of("1", rules::kAlpha, "--alpha"), "--alpha must be a number greater than 0 and below 1 (got '1')");
  EXPECT_EQ(parse_number("0.01", "--alpha", rules::kAlpha), 0.01);
  EXPECT_EQ(parse_number("604800", "--duration", rules::kDuration), 604800.0);
  error_of("604801", rules::kDuration, "--duration");
}

TEST(Numbers, WholeTextOnly) {
  for (const char* bad : {"", " 1", "1 ", "1e-4x", "0x10", "1,5", "--atol"}) error_of(bad, rules::kTolerance);
}

TEST(Numbers, Integers) {
  EXPECT_EQ(parse_integer("200", "--iterations", rules::kRuns), 200);
  EXPECT_EQ(error_of("0", rules::kRuns, "--iterations"),
            "--iterations must be an integer from 1 to 1073741824 (got '0')");
  for (const char* bad : {"1.5", "1e3", "nan", "2147483648", "99999999999999999999", "-1"})
    error_of(bad, rules::kRuns, "--iterations");
  EXPECT_EQ(parse_integer("0", "--warmup", rules::kWarmup), 0);
  EXPECT_EQ(parse_unsigned("18446744073709551615", "--seed", rules::kSeed), 18446744073709551615ull);
  EXPECT_THROW(parse_unsigned("-1", "--seed", rules::kSeed), Error);
  EXPECT_EQ(describe(rules::kSeed), "an integer of at least 0");
  EXPECT_THROW(check_number(2.5, "iterations", rules::kRuns), Error);
  EXPECT_NO_THROW(check_number(3, "iterations", rules::kRuns));
}

TEST(Numbers, ExactTextReadsBackAsTheSameDouble) {
  EXPECT_EQ(exact_number_text(4e-7), "4e-07");  // std::to_string gave "0.000000"
  EXPECT_EQ(exact_number_text(1e-4), "1e-04");
  for (double x : {4e-7, 2.5e-6, 1.0 / 3, 1e-300, 123456789.123456789}) {
    std::string t = exact_number_text(x);
    EXPECT_EQ(std::stod(t), x) << t;
    EXPECT_EQ(parse_number(t, "--rtol", rules::kTolerance), x) << t;
  }
}

}  // namespace
}  // namespace fusec

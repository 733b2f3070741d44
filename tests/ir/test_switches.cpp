// The table of FUSEC_* switches (ir/switches.h). That every switch read anywhere is in it, and
// documented in docs/switches.md, is the `switches` ctest (tests/scripts/check_switches.py); a
// name missing from it does not compile as an argument of env_switch().
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include "ir/switches.h"

using namespace fusec;

static_assert(is_switch("FUSEC_CUDA_GRAPH"));
static_assert(!is_switch("FUSEC_NO_SUCH_SWITCH"));

TEST(Switches, TableIsWellFormed) {
  std::set<std::string> names;
  for (const SwitchInfo& s : kSwitches) {
    const std::string name = s.name;
    EXPECT_EQ(name.rfind("FUSEC_", 0), 0u) << name;
    EXPECT_TRUE(names.insert(name).second) << name << " has two entries";
    EXPECT_NE(std::string(s.effect), "") << name;
    EXPECT_NE(std::string(s.values), "") << name;
    EXPECT_NE(std::string(s.fallback), "") << name;
    EXPECT_EQ(find_switch(name), &s) << name;
  }
}

TEST(Switches, EnvSwitchReadsTheEnvironment) {
  // FUSEC_REQUIRE_COUNTERS: read only by fusec_gpu_tests, so setting it here changes nothing.
  const char* old = env_switch("FUSEC_REQUIRE_COUNTERS");
  const std::string saved = old ? old : "";
  ::setenv("FUSEC_REQUIRE_COUNTERS", "1", 1);
  ASSERT_NE(env_switch("FUSEC_REQUIRE_COUNTERS"), nullptr);
  EXPECT_EQ(std::string(env_switch("FUSEC_REQUIRE_COUNTERS")), "1");
  ::unsetenv("FUSEC_REQUIRE_COUNTERS");
  EXPECT_EQ(env_switch("FUSEC_REQUIRE_COUNTERS"), nullptr);
  if (old) ::setenv("FUSEC_REQUIRE_COUNTERS", saved.c_str(), 1);
}

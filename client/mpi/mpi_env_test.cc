#include "client/mpi/mpi_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace aggswitch::client::mpi {
namespace {

// An environment of the given variables only.
EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(ParseShimEnvTest, NothingSetMeansDisabledWithTheDefaults) {
  const auto o = ParseShimEnv(Env({}));
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_FALSE(o->enabled());
  EXPECT_TRUE(o->fallback);
  EXPECT_EQ(o->timeout, std::chrono::milliseconds(10'000));
  EXPECT_EQ(o->probe_timeout, std::chrono::milliseconds(2'000));
  EXPECT_EQ(o->mtu, 1500u);
  EXPECT_EQ(o->window, 128u);
  EXPECT_FALSE(ParseShimEnv(Env({{"AGGSWITCH_SWITCH", ""}}))->enabled());
}

TEST(ParseShimEnvTest, EveryVariable) {
  const auto o = ParseShimEnv(Env({{"AGGSWITCH_SWITCH", "10.0.49.253,10.0.49.252:9000"},
                                   {"AGGSWITCH_FALLBACK", "0"},
                                   {"AGGSWITCH_TIMEOUT", "30"},
                                   {"AGGSWITCH_PROBE_TIMEOUT", "0.25"},
                                   {"AGGSWITCH_MTU", "3400"},
                                   {"AGGSWITCH_WINDOW", "64"}}));
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_EQ(o->switches.size(), 2u);
  EXPECT_EQ(o->switches[0].ip, *common::Ipv4Addr::Parse("10.0.49.253"));
  EXPECT_EQ(o->switches[0].port, aggregator::kAggUdpPort);
  EXPECT_EQ(o->switches[1].ip, *common::Ipv4Addr::Parse("10.0.49.252"));
  EXPECT_EQ(o->switches[1].port, 9000);
  EXPECT_TRUE(o->enabled());
  EXPECT_FALSE(o->fallback);
  EXPECT_EQ(o->timeout, std::chrono::milliseconds(30'000));
  EXPECT_EQ(o->probe_timeout, std::chrono::milliseconds(250));
  EXPECT_EQ(o->mtu, 3400u);
  EXPECT_EQ(o->window, 64u);
}

TEST(ParseShimEnvTest, ABadValueNamesItsVariableAndWhatWasExpected) {
  const std::pair<std::map<std::string, std::string>, std::string> cases[] = {
      {{{"AGGSWITCH_SWITCH", "10.0.49"}}, "AGGSWITCH_SWITCH: expected a.b.c.d[:port]"},
      {{{"AGGSWITCH_SWITCH", "10.0.49.253,"}}, "AGGSWITCH_SWITCH: expected a.b.c.d[:port]"},
      {{{"AGGSWITCH_SWITCH", "10.0.49.253:0"}}, "AGGSWITCH_SWITCH: expected a.b.c.d[:port]"},
      {{{"AGGSWITCH_FALLBACK", "maybe"}}, "AGGSWITCH_FALLBACK: expected 1 or 0"},
      {{{"AGGSWITCH_TIMEOUT", "ten"}}, "AGGSWITCH_TIMEOUT: expected seconds"},
      {{{"AGGSWITCH_TIMEOUT", "0"}}, "AGGSWITCH_TIMEOUT: expected seconds"},
      {{{"AGGSWITCH_TIMEOUT", "-1"}}, "AGGSWITCH_TIMEOUT: expected seconds"},
      {{{"AGGSWITCH_TIMEOUT", "1e9"}}, "AGGSWITCH_TIMEOUT: expected seconds"},
      {{{"AGGSWITCH_TIMEOUT", "5s"}}, "AGGSWITCH_TIMEOUT: expected seconds"},
      {{{"AGGSWITCH_PROBE_TIMEOUT", ""}}, "AGGSWITCH_PROBE_TIMEOUT: expected seconds"},
      {{{"AGGSWITCH_MTU", "100"}}, "AGGSWITCH_MTU: expected an integer from 128 to 9600"},
      {{{"AGGSWITCH_MTU", "1500b"}}, "AGGSWITCH_MTU: expected an integer"},
      {{{"AGGSWITCH_WINDOW", "0"}}, "AGGSWITCH_WINDOW: expected an integer from 1 to 2048"},
      {{{"AGGSWITCH_WINDOW", "-5"}}, "AGGSWITCH_WINDOW: expected an integer"},
  };
  for (const auto& [vars, message] : cases) {
    const auto o = ParseShimEnv(Env(vars));
    ASSERT_FALSE(o.ok()) << message;
    EXPECT_EQ(o.status().code(), common::StatusCode::kInvalidArgument);
    EXPECT_EQ(o.status().message().rfind(message, 0), 0u) << o.status().message();
    EXPECT_EQ(o.status().message().find('\n'), std::string::npos);
    // It says what it got.
    EXPECT_NE(o.status().message().find("\"" + vars.begin()->second + "\""), std::string::npos)
        << o.status().message();
  }
}

TEST(ParseShimEnvTest, TooManySwitches) {
  std::string list;
  for (size_t i = 0; i <= kMaxSwitches; ++i) list += (i ? "," : "") + std::string("10.0.0.1");
  const auto o = ParseShimEnv(Env({{"AGGSWITCH_SWITCH", list}}));
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("at most 64 switches"), std::string::npos);
}

TEST(ParseFlagTest, Spellings) {
  for (const char* yes : {"1", "yes", "TRUE", "On"}) EXPECT_TRUE(*ParseFlag("X", yes)) << yes;
  for (const char* no : {"0", "no", "False", "OFF"}) EXPECT_FALSE(*ParseFlag("X", no)) << no;
  for (const char* bad : {"", "2", "y", " 1"}) EXPECT_FALSE(ParseFlag("X", bad).ok()) << bad;
}

TEST(ParseSecondsTest, RoundsUpToMilliseconds) {
  EXPECT_EQ(*ParseSeconds("X", "0.0001"), std::chrono::milliseconds(1));
  EXPECT_EQ(*ParseSeconds("X", "1.5"), std::chrono::milliseconds(1500));
  EXPECT_EQ(*ParseSeconds("X", "86400"), std::chrono::milliseconds(86'400'000));
  EXPECT_FALSE(ParseSeconds("X", "86401").ok());
  EXPECT_FALSE(ParseSeconds("X", "nan").ok());
  EXPECT_FALSE(ParseSeconds("X", "inf").ok());
}

TEST(FallbackRuleTest, TheVariableWhenValidElseFallBack) {
  EXPECT_TRUE(FallbackRule(Env({})));
  EXPECT_TRUE(FallbackRule(Env({{"AGGSWITCH_FALLBACK", "1"}})));
  EXPECT_FALSE(FallbackRule(Env({{"AGGSWITCH_FALLBACK", "0"}})));
  EXPECT_TRUE(FallbackRule(Env({{"AGGSWITCH_FALLBACK", "bogus"}})));
  // Another variable's error does not change the rule.
  EXPECT_FALSE(FallbackRule(Env({{"AGGSWITCH_FALLBACK", "no"}, {"AGGSWITCH_TIMEOUT", "x"}})));
}

}  // namespace
}  // namespace aggswitch::client::mpi

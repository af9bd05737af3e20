#include "util/duration.hpp"
#include "util/error.hpp"

#include <gtest/gtest.h>

using dlock::Error;
using dlock::ExitCode;
using dlock::util::format_duration;
using dlock::util::Millis;
using dlock::util::parse_duration;

TEST(Duration, AcceptsContractForms)
{
  EXPECT_EQ(parse_duration("250ms", "--ttl"), Millis(250));
  EXPECT_EQ(parse_duration("10s", "--ttl"), Millis(10'000));
  EXPECT_EQ(parse_duration("1.5m", "--ttl"), Millis(90'000));
  EXPECT_EQ(parse_duration("1m30s", "--ttl"), Millis(90'000));
  EXPECT_EQ(parse_duration("2h", "--ttl"), Millis(7'200'000));
  EXPECT_EQ(parse_duration("1h2m3s4ms", "--ttl"), Millis(3'723'004));
}

TEST(Duration, BareNumberIsSeconds)
{
  EXPECT_EQ(parse_duration("5", "--wait"), Millis(5000));
  EXPECT_EQ(parse_duration("0.25", "--wait"), Millis(250));
  EXPECT_EQ(parse_duration("0", "--wait"), Millis(0));
  EXPECT_EQ(parse_duration(".5", "--wait"), Millis(500));
}

TEST(Duration, RejectsMalformedWithUsageError)
{
  for (const char* bad : {"", "abc", "10x", "-5s", "1m30", "s", "1..5s", "10 s", "1e3", "5sec",
                          "1.5.5s", "ms", ".", "99999999999999999h"}) {
    try {
      parse_duration(bad, "--ttl");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ExitCode::usage) << bad;
      EXPECT_NE(std::string(error.what()).find("--ttl"), std::string::npos) << error.what();
    }
  }
}

TEST(Duration, FormatsReadably)
{
  EXPECT_EQ(format_duration(Millis(250)), "250ms");
  EXPECT_EQ(format_duration(Millis(10'000)), "10s");
  EXPECT_EQ(format_duration(Millis(1500)), "1.5s");
  EXPECT_EQ(format_duration(Millis(90'000)), "1m30s");
  EXPECT_EQ(format_duration(Millis(120'000)), "2m");
  EXPECT_EQ(format_duration(Millis(7'200'000)), "2h");
}

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
  EXPECT_EQ(parse_duration("1d", "--ttl"), Millis(86'400'000));
  EXPECT_EQ(parse_duration("1.5d", "--ttl"), Millis(129'600'000));
  EXPECT_EQ(parse_duration("1d12h", "--ttl"), Millis(129'600'000));
}

TEST(Duration, FractionsRoundToTheNearestMillisecond)
{
  EXPECT_EQ(parse_duration("0.1s", "--ttl"), Millis(100));
  EXPECT_EQ(parse_duration("2.675s", "--ttl"), Millis(2'675));
  EXPECT_EQ(parse_duration("1.005s", "--ttl"), Millis(1'005));
  EXPECT_EQ(parse_duration("0.0005s", "--ttl"), Millis(1));
  EXPECT_EQ(parse_duration("0.0004s", "--ttl"), Millis(0));
  EXPECT_EQ(parse_duration("0.12345678901234567890s", "--ttl"), Millis(123));
  EXPECT_EQ(parse_duration("007.50s", "--ttl"), Millis(7'500));
}

TEST(Duration, AcceptsUpToTheMaximum)
{
  EXPECT_EQ(parse_duration("36500d", "--ttl"), dlock::util::max_duration);
  EXPECT_EQ(parse_duration("876000h", "--ttl"), dlock::util::max_duration);
  // The maximum can be added to any steady_clock reading (nanoseconds since boot) and sent
  // to Redis as PX without overflow.
  auto uptime_bound = std::chrono::days(365 * 150);
  EXPECT_LT(std::chrono::duration_cast<std::chrono::nanoseconds>(dlock::util::max_duration)
              + std::chrono::duration_cast<std::chrono::nanoseconds>(uptime_bound),
            std::chrono::nanoseconds::max());
}

TEST(Duration, RejectsTooLargeWithUsageErrorNamingTheMaximum)
{
  std::string digits = "1" + std::string(400, '0');
  for (const std::string& huge : {std::string("36500d1ms"), std::string("36501d"),
                                  std::string("3000000h"), std::string("99999999999999999h"),
                                  std::string("100000000000000000000"), digits, digits + "ms"}) {
    try {
      parse_duration(huge, "--max-hold");
      ADD_FAILURE() << "accepted '" << huge << "'";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ExitCode::usage) << huge;
      EXPECT_NE(std::string(error.what()).find("--max-hold is too large: at most 36500d"),
                std::string::npos)
        << error.what();
    }
  }
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
                          "1.5.5s", "ms", ".", "1w", "d", "1d1"}) {
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
  EXPECT_EQ(format_duration(Millis(86'400'000)), "1d");
  EXPECT_EQ(format_duration(Millis(93'600'000)), "1d2h");
  EXPECT_EQ(format_duration(dlock::util::max_duration), "36500d");
}

#include "lock/holder.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using dlock::lock::HolderField;
using dlock::lock::HolderInfo;
using dlock::lock::max_holder_field_bytes;
using dlock::lock::max_holder_record_bytes;
using dlock::lock::parse_fence;
using dlock::lock::parse_holder_record;
using dlock::lock::parse_record_number;

namespace {

std::vector<HolderField> good_record()
{
  return {{"host", "web1"},
          {"pid", "42"},
          {"user", "root"},
          {"command", "backup"},
          {"acquired_ms", "1700000000000"},
          {"fence", "7"},
          {"ttl_ms", "30000"}};
}

} // namespace

TEST(Holder, RecordDlockWroteParses)
{
  std::optional<HolderInfo> holder = parse_holder_record(good_record());
  ASSERT_TRUE(holder);
  EXPECT_EQ(holder->host, "web1");
  EXPECT_EQ(holder->pid, 42);
  EXPECT_EQ(holder->user, "root");
  EXPECT_EQ(holder->command, "backup");
  EXPECT_EQ(holder->acquired_ms, 1700000000000);
  EXPECT_EQ(holder->fence, 7);
  EXPECT_EQ(holder->ttl_ms, 30000);
  // Unknown fields are skipped, missing ones stay empty.
  std::vector<HolderField> fields = {{"pid", "1"}, {"note", "x"}};
  ASSERT_TRUE(parse_holder_record(fields));
  EXPECT_EQ(parse_holder_record(fields)->host, "");
  EXPECT_TRUE(parse_holder_record({}));
}

TEST(Holder, OversizedRecordIsNotADlockHolder)
{
  std::string long_field(max_holder_field_bytes + 1, 'x');
  std::vector<HolderField> fields = good_record();
  fields[3].value = long_field;
  EXPECT_FALSE(parse_holder_record(fields));
  fields[3].value = std::string_view(long_field).substr(0, max_holder_field_bytes);
  EXPECT_TRUE(parse_holder_record(fields));
  // Many small unknown fields add up.
  std::string filler(200, 'y');
  std::vector<HolderField> many(max_holder_record_bytes / 200 + 1, HolderField{"other", filler});
  EXPECT_FALSE(parse_holder_record(many));
}

TEST(Holder, MalformedNumberIsNotADlockHolder)
{
  for (std::string_view bad :
       {"", "abc", "-1", "12x", " 12", "1e3", "+5", "99999999999999999999"}) {
    std::vector<HolderField> fields = good_record();
    fields[1].value = bad;
    EXPECT_FALSE(parse_holder_record(fields)) << bad;
  }
}

TEST(Holder, FenceParseIsChecked)
{
  EXPECT_EQ(parse_fence("0"), 0);
  EXPECT_EQ(parse_fence("1795633318326365"), 1795633318326365);
  EXPECT_EQ(parse_fence("9223372036854775807"), INT64_MAX);
  EXPECT_FALSE(parse_fence("9223372036854775808")); // overflows
  EXPECT_FALSE(parse_fence("-3"));
  EXPECT_FALSE(parse_fence("-0"));
  EXPECT_FALSE(parse_fence("garbage"));
  EXPECT_FALSE(parse_fence(""));
  EXPECT_FALSE(parse_fence("12 "));
  EXPECT_EQ(parse_record_number("007"), 7);
}

TEST(Holder, CurrentFitsTheCapAndNotDlockSaysSo)
{
  HolderInfo me = HolderInfo::current(std::string(10000, 'c'));
  EXPECT_TRUE(me.plausible());
  EXPECT_EQ(me.command.size(), max_holder_field_bytes);
  EXPECT_EQ(HolderInfo::not_dlock().describe(), "(not a dlock holder)");
  HolderInfo negative;
  negative.pid = -1;
  EXPECT_FALSE(negative.plausible());
}

TEST(Holder, ATokensFingerprintIsAPrefixOfItsSha256OfTheLengthAStoreWrites)
{
  std::string sixteen = dlock::lock::token_fingerprint("secret-token");
  EXPECT_EQ(sixteen.size(), 16u);
  EXPECT_EQ(dlock::lock::token_fingerprint("secret-token", 32).substr(0, 16), sixteen);
  EXPECT_EQ(dlock::lock::token_fingerprint("", 8), "e3b0c442"); // SHA-256 of nothing
  EXPECT_EQ(sixteen.find("secret"), std::string::npos);
}

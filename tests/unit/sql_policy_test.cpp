// The side records of the database stores (stores/sql/policy.hpp): what closes a lock to the
// next holder, what status shows, and that another tenant's values read as none.
#include "stores/sql/policy.hpp"

#include <gtest/gtest.h>

#include <string>

namespace dlock::sql {
namespace {

using util::Millis;

lock::HolderInfo who(const std::string& host, std::int64_t pid)
{
  lock::HolderInfo holder;
  holder.host = host;
  holder.pid = pid;
  holder.user = "u";
  return holder;
}

PolicyRow row_of(const std::string& fp)
{
  PolicyRow row;
  row.token_fp = fp;
  row.holder = who("h", 7);
  row.holder->note = "why";
  return row;
}

TEST(SqlPolicy, HolderRoundTripsWithEveryCharacter)
{
  lock::HolderInfo holder = who("host%1F", 42);
  holder.user = "us\x1f"
                "er";
  holder.command = "sh";
  holder.acquired_ms = 123;
  holder.ttl_ms = 30000;
  holder.note = "100% «ünï» \U0001F512 \x1f end";
  std::optional<lock::HolderInfo> back = decode_holder(encode_holder(holder));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->host, holder.host);
  EXPECT_EQ(back->user, holder.user);
  EXPECT_EQ(back->pid, 42);
  EXPECT_EQ(back->acquired_ms, 123);
  EXPECT_EQ(back->ttl_ms, 30000);
  EXPECT_EQ(back->note, holder.note);
}

TEST(SqlPolicy, ACandidatesValueRoundTripsAndOlderRecordsHaveNone)
{
  lock::HolderInfo holder = who("h", 7);
  holder.command = "sh";
  holder.note = "n";
  holder.value = "10.0.0.1:80 %1F \x1f v2";
  std::optional<lock::HolderInfo> back = decode_holder(encode_holder(holder));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->value, holder.value);
  EXPECT_EQ(back->note, "n");
  // a record of a dlock before elect: seven fields, no value
  std::optional<lock::HolderInfo> older = decode_holder("u\x1fh\x1f"
                                                        "7\x1f"
                                                        "sh\x1f"
                                                        "1\x1f"
                                                        "2\x1fnote");
  ASSERT_TRUE(older);
  EXPECT_EQ(older->note, "note");
  EXPECT_TRUE(older->value.empty());
}

TEST(SqlPolicy, AnOversizedValueOrAnExtraFieldIsNotADlockHolder)
{
  lock::HolderInfo holder = who("h", 7);
  holder.value = std::string(lock::max_holder_field_bytes, 'v');
  EXPECT_TRUE(decode_holder(encode_holder(holder)));
  holder.value += 'v';
  EXPECT_FALSE(decode_holder(encode_holder(holder)));
  holder.value = "v";
  EXPECT_FALSE(decode_holder(encode_holder(holder) + "\x1f" + "more"));
}

TEST(SqlPolicy, AnotherTenantsValuesReadAsNone)
{
  EXPECT_FALSE(decode_holder(""));
  EXPECT_FALSE(decode_holder("garbage%zz"));
  EXPECT_FALSE(decode_holder(std::string(5000, 'x')));
  EXPECT_FALSE(decode_holder("u\x1fh\x1f-1\x1f"
                             "c\x1f"
                             "0\x1f"
                             "0\x1fnote")); // negative pid
  EXPECT_FALSE(decode_holder("a\x1f"
                             "b")); // too few fields
  PolicyText text;
  text.token_fp = std::string(100, 'f');
  text.session = "x";
  text.hold_until = "99999999999999999999";
  text.released = "maybe";
  text.delay_ms = "-5";
  text.ended_at = "1e3";
  PolicyRow row = parse_policy_row(text);
  EXPECT_TRUE(row.token_fp.empty());
  EXPECT_EQ(row.session, 0);
  EXPECT_EQ(row.hold_until, 0);
  EXPECT_FALSE(row.released);
  EXPECT_EQ(row.delay_ms, 0);
  EXPECT_EQ(row.ended_at, 0);
}

TEST(SqlPolicy, OwnOrNobodysRecordNeverCloses)
{
  PolicyRow row = row_of("mine");
  row.hold_until = 10'000;
  EXPECT_EQ(closed_to(row, "mine", 1'000).why, Closed::Why::open);
  EXPECT_EQ(closed_to(row_of(""), "other", 1'000).why, Closed::Why::open);
}

TEST(SqlPolicy, MinHoldClosesUntilItsEnd)
{
  PolicyRow row = row_of("old");
  row.hold_until = 10'000;
  row.released = true;
  Closed closed = closed_to(row, "new", 4'000);
  EXPECT_EQ(closed.why, Closed::Why::min_hold);
  EXPECT_EQ(closed.left, Millis(6'000));
  EXPECT_FALSE(closed.stamp);
  EXPECT_EQ(closed_to(row, "new", 10'000).why, Closed::Why::open);
  EXPECT_EQ(idle_state(row, 4'000).held_for, Millis(6'000));
}

TEST(SqlPolicy, LockDelayCountsFromTheFirstThatFoundTheHolderGone)
{
  PolicyRow row = row_of("old");
  row.delay_ms = 3'000;
  Closed first = closed_to(row, "new", 5'000);
  EXPECT_EQ(first.why, Closed::Why::lock_delay);
  EXPECT_EQ(first.left, Millis(3'000));
  EXPECT_TRUE(first.stamp);
  row.ended_at = 5'000;
  Closed later = closed_to(row, "new", 7'000);
  EXPECT_EQ(later.left, Millis(1'000));
  EXPECT_FALSE(later.stamp);
  EXPECT_EQ(closed_to(row, "new", 8'000).why, Closed::Why::open);
  EXPECT_EQ(idle_state(row, 7'000).delay_for, Millis(1'000));
}

TEST(SqlPolicy, CleanReleaseOrReplaceDisarmsTheDelay)
{
  PolicyRow row = row_of("old");
  row.delay_ms = 3'000;
  row.released = true;
  EXPECT_EQ(closed_to(row, "new", 5'000).why, Closed::Why::open);
  row.released = false;
  row.replace_by = who("r", 1);
  row.hold_until = 99'000;
  EXPECT_EQ(closed_to(row, "new", 5'000).why, Closed::Why::open);
}

TEST(SqlPolicy, VanishedHolderClosesUntilTheLaterOfMinHoldAndDelay)
{
  PolicyRow row = row_of("old");
  row.hold_until = 6'000;
  row.delay_ms = 3'000;
  row.ended_at = 4'000;
  Closed closed = closed_to(row, "new", 5'000);
  EXPECT_EQ(closed.why, Closed::Why::lock_delay);
  EXPECT_EQ(closed.left, Millis(2'000));
  row.hold_until = 9'000;
  closed = closed_to(row, "new", 5'000);
  EXPECT_EQ(closed.why, Closed::Why::min_hold);
  EXPECT_EQ(closed.left, Millis(4'000));
}

TEST(SqlPolicy, FarFutureValuesDoNotOverflow)
{
  PolicyRow row = row_of("old");
  row.delay_ms = INT64_MAX;
  row.ended_at = 5;
  EXPECT_EQ(closed_to(row, "new", 10).why, Closed::Why::lock_delay);
  EXPECT_GT(closed_to(row, "new", 10).left, Millis(0));
}

TEST(SqlPolicy, OnlyANewerLiveSupersedeWaiterSupersedes)
{
  PolicyRow row = row_of("");
  EXPECT_FALSE(superseded(row, "me", 10));
  row.newest_waiter = "me";
  row.newest_until = 100;
  EXPECT_FALSE(superseded(row, "me", 10));
  row.newest_waiter = "newer";
  row.newest = who("n", 2);
  ASSERT_TRUE(superseded(row, "me", 10));
  EXPECT_EQ(superseded(row, "me", 10)->host, "n");
  EXPECT_FALSE(superseded(row, "me", 100)); // its registration expired
}

} // namespace
} // namespace dlock::sql

// The rules of wait, barrier, latch and leader on the database stores (sql/coordination.hpp),
// from the rows of dlock_gate (or the leadership) as read back: what an attempt comes to, and
// what it writes.
#include "stores/sql/coordination.hpp"

#include <gtest/gtest.h>

namespace {

using dlock::sql::party_member;
using dlock::sql::SqlGates;
using Plan = SqlGates::BarrierPlan;
using Row = SqlGates::Row;

constexpr std::int64_t now = 1'800'000'000'000; // Unix ms

dlock::lock::GateRequest party(const char* id, std::int64_t parties, std::int64_t joined = 0)
{
  dlock::lock::GateRequest request;
  request.ticket.mode = dlock::lock::WaitMode::barrier;
  request.ticket.waiter_id = id;
  request.ticket.generation = joined;
  request.ticket.max_block = dlock::util::Millis(5000);
  request.parties = parties;
  return request;
}

Row state(std::int64_t generation, std::int64_t parties, std::int64_t until = now + 86'400'000)
{
  return Row{.member = "barrier", .generation = generation, .parties = parties, .until = until};
}

Row arrival(const char* id, std::int64_t generation, std::int64_t until = now + 7000)
{
  return Row{.member = party_member(id), .generation = generation, .until = until};
}

TEST(SqlBarrier, TheFirstPartyStartsAGenerationAtTheServersClockAndArrives)
{
  Plan plan = SqlGates::plan_barrier({state(0, 0)}, party("a", 3), now);
  EXPECT_FALSE(plan.result.open);
  EXPECT_EQ(plan.write, Plan::Write::arrive);
  EXPECT_EQ(plan.generation, now * 1000);
  EXPECT_EQ(plan.result.arrived, 1);
  EXPECT_EQ(plan.result.parties, 3);
}

TEST(SqlBarrier, TheLastPartyTripsItsGeneration)
{
  std::int64_t g = now * 1000;
  Plan plan =
    SqlGates::plan_barrier({state(g, 3), arrival("a", g), arrival("b", g)}, party("c", 3), now);
  EXPECT_TRUE(plan.result.open);
  EXPECT_EQ(plan.write, Plan::Write::trip);
  EXPECT_EQ(plan.generation, g);
}

TEST(SqlBarrier, APartyThatJoinedSeesItsGenerationTrippedAndWritesNothing)
{
  std::int64_t g = now * 1000;
  Plan plan = SqlGates::plan_barrier({state(g + 1, 3)}, party("a", 3, g), now);
  EXPECT_TRUE(plan.result.open);
  EXPECT_EQ(plan.write, Plan::Write::none);
  EXPECT_EQ(plan.result.generation, g);
}

TEST(SqlBarrier, AnotherPartiesInProgressIsTheCallersMistakeAndWritesNothing)
{
  std::int64_t g = now * 1000;
  Plan plan = SqlGates::plan_barrier({state(g, 3), arrival("a", g)}, party("b", 2), now);
  EXPECT_FALSE(plan.result.open);
  EXPECT_EQ(plan.write, Plan::Write::none);
  EXPECT_EQ(plan.result.parties, 3);
}

TEST(SqlBarrier, LapsedJunkAndOtherGenerationsArrivalsDoNotCount)
{
  std::int64_t g = now * 1000;
  std::vector<Row> rows{state(g, 2), arrival("lapsed", g, now - 1),
                        arrival("forever", g, now + 10LL * 365 * 86'400'000), arrival("old", g - 5),
                        Row{.member = "zz", .generation = g, .until = now}};
  Plan plan = SqlGates::plan_barrier(rows, party("b", 2), now);
  EXPECT_FALSE(plan.result.open);
  EXPECT_EQ(plan.result.arrived, 1);
}

TEST(SqlBarrier, AJunkStateStartsAfresh)
{
  Plan plan = SqlGates::plan_barrier({state(-5, -100)}, party("a", 2), now);
  EXPECT_FALSE(plan.result.open);
  EXPECT_EQ(plan.generation, now * 1000);
  EXPECT_EQ(plan.write, Plan::Write::arrive);
}

TEST(SqlBarrier, WithdrawingAfterTheTripHasPassed)
{
  std::int64_t g = now * 1000;
  EXPECT_TRUE(SqlGates::tripped({state(g + 1, 2)}, g, now));
  EXPECT_FALSE(SqlGates::tripped({state(g, 2)}, g, now));
  EXPECT_FALSE(SqlGates::tripped({state(g + 1, 2, now - 1)}, g, now)); // expired
}

TEST(SqlLatch, TheCountIsMinusOneWhenNoneIsSetExpiredOrJunk)
{
  EXPECT_EQ(SqlGates::latch_count({}, now), -1);
  EXPECT_EQ(SqlGates::latch_count({Row{.member = "latch", .count = 2, .until = now + 1}}, now), 2);
  EXPECT_EQ(SqlGates::latch_count({Row{.member = "latch", .count = 2, .until = now - 1}}, now), -1);
  EXPECT_EQ(SqlGates::latch_count({Row{.member = "latch", .count = -9, .until = now + 1}}, now),
            -1);
}

dlock::lock::WaitTicket leader_watcher(std::int64_t since)
{
  dlock::lock::WaitTicket ticket;
  ticket.mode = dlock::lock::WaitMode::leader;
  ticket.since = since;
  ticket.max_block = dlock::util::Millis(30'000);
  return ticket;
}

SqlGates::Leadership led_by(std::int64_t term, const char* value)
{
  SqlGates::Leadership leadership;
  leadership.term = term;
  leadership.holder.host = "h";
  leadership.holder.pid = 7;
  leadership.holder.value = value;
  leadership.holders = 1;
  return leadership;
}

TEST(SqlLeader, AWatcherThatSawNothingOpensOnALeaderAndBlocksOnAFreeLock)
{
  dlock::lock::GateResult led =
    SqlGates::look_leader(leader_watcher(0), led_by(5, "a:1"), dlock::util::Millis(30'000));
  EXPECT_TRUE(led.open);
  EXPECT_EQ(led.since, 5);
  EXPECT_EQ(led.lock.holder.value, "a:1");
  EXPECT_EQ(led.lock.holders, 1);
  dlock::lock::GateResult free =
    SqlGates::look_leader(leader_watcher(0), SqlGates::Leadership{}, dlock::util::Millis(30'000));
  EXPECT_FALSE(free.open);
  EXPECT_EQ(free.since, 0);
  EXPECT_EQ(free.block, dlock::util::Millis(30'000));
}

TEST(SqlLeader, TheSameTermBlocksAnotherOrNoneOpens)
{
  dlock::lock::GateResult same =
    SqlGates::look_leader(leader_watcher(5), led_by(5, "a:1"), dlock::util::Millis(2000));
  EXPECT_FALSE(same.open);
  EXPECT_EQ(same.since, 5);
  EXPECT_EQ(same.block, dlock::util::Millis(2000));
  EXPECT_EQ(same.lock.holder.value, "a:1"); // who holds it, shown while it is waited on
  dlock::lock::GateResult next =
    SqlGates::look_leader(leader_watcher(5), led_by(6, "b:2"), dlock::util::Millis(2000));
  EXPECT_TRUE(next.open);
  EXPECT_EQ(next.since, 6);
  dlock::lock::GateResult ended =
    SqlGates::look_leader(leader_watcher(5), SqlGates::Leadership{}, dlock::util::Millis(2000));
  EXPECT_TRUE(ended.open);
  EXPECT_EQ(ended.since, 0);
  EXPECT_EQ(ended.lock.holders, 0);
}

TEST(SqlParty, AMemberIsMadeOfThePartysIdOnly)
{
  EXPECT_EQ(party_member("0123abcd"), "p:0123abcd");
  EXPECT_EQ(party_member("a'; DROP TABLE x; --"), "p:aDROPTABLEx");
}

} // namespace

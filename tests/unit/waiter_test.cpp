// hold::Waiter and hold::Acquisition on a fake clock and a fake store: what is asked when,
// without sleeping.
#include "fake_clock.hpp"
#include "fake_store.hpp"
#include "hold/acquisition.hpp"
#include "hold/waiter.hpp"

#include <gtest/gtest.h>

#include <signal.h>

using namespace std::chrono_literals;
using dlock::hold::Acquisition;
using dlock::hold::Gate;
using dlock::hold::Passed;
using dlock::hold::Taken;
using dlock::hold::Waiter;
using dlock::hold::WaitPolicy;
using dlock::lock::AcquireRequest;
using dlock::lock::LockName;
using dlock::lock::Outcome;
using dlock::lock::WaitMode;
using dlock::process::SignalFd;
using dlock::util::Millis;
using dlock::util::TimePoint;

namespace {

// A fake store on a fake clock, the signals a wait ends on, and a policy of --wait.
struct Bench {
  FakeClock clock;
  FakeStore store;
  SignalFd signals{SIGUSR1, SIGUSR2};
  TimePoint start = clock.now();

  Bench()
  {
    store.clock = [this] { return clock.now(); };
  }

  WaitPolicy policy(std::optional<Millis> wait = std::nullopt, bool no_wait = false)
  {
    WaitPolicy policy;
    policy.wait = wait;
    policy.no_wait = no_wait;
    policy.request_timeout = 2s;
    return policy;
  }
  Taken take(const WaitPolicy& policy)
  {
    return Waiter(clock, store, signals, policy).take(LockName::parse("unit"), request());
  }
  static AcquireRequest request()
  {
    AcquireRequest request;
    request.token = "token";
    return request;
  }
  Millis since_start(TimePoint t) const { return std::chrono::duration_cast<Millis>(t - start); }
};

Outcome gate_shut(Millis block)
{
  Outcome outcome = Outcome::of(Outcome::Op::gate);
  outcome.gate.block = block;
  return outcome;
}

} // namespace

TEST(Waiter, TakesAFreeLockWithOneAttemptAndNoSleep)
{
  Bench bench;
  bench.store.acquire_answer = [](int) { return FakeStore::taken(7); };
  Taken taken = bench.take(bench.policy());
  EXPECT_TRUE(taken.acquired);
  EXPECT_EQ(taken.fence, 7);
  EXPECT_EQ(taken.sent_at, bench.start) << "the lease runs from when the winning request left";
  EXPECT_EQ(bench.store.attempts.size(), 1u);
  EXPECT_EQ(bench.clock.sleeps, 0);
  EXPECT_EQ(bench.store.tickets[0].mode, WaitMode::wait);
  EXPECT_EQ(bench.store.tickets[0].max_block, 30s) << "no --wait: the longest block";
}

TEST(Waiter, AWakeUpBringsTheNextAttemptAtOnce)
{
  Bench bench;
  bench.store.acquire_answer = [](int n) {
    return n < 3 ? FakeStore::busy(20'000, 20s) : FakeStore::taken(3);
  };
  Taken taken = bench.take(bench.policy());
  EXPECT_TRUE(taken.acquired);
  EXPECT_EQ(bench.store.attempts.size(), 3u);
  EXPECT_EQ(bench.store.wake_waits.size(), 2u) << "blocked for a wake-up after each refusal";
  EXPECT_EQ(bench.clock.now(), bench.start) << "woken at once, no time passed";
  EXPECT_EQ(bench.store.withdrawals, 0);
}

TEST(Waiter, WithoutAWakeUpTheNextAttemptComesWhenTheBlockTheStoreSaidEnds)
{
  Bench bench;
  bench.store.acquire_answer = [](int n) {
    return n == 1 ? FakeStore::busy(5000, 5s) : FakeStore::taken(2);
  };
  bench.store.wake_answer = [](int) { return std::nullopt; }; // nobody releases it
  Taken taken = bench.take(bench.policy());
  EXPECT_TRUE(taken.acquired);
  ASSERT_EQ(bench.store.attempts.size(), 2u);
  EXPECT_EQ(bench.since_start(bench.store.attempts[1]), 7s) << "the block plus a request's time";
  EXPECT_EQ(taken.sent_at, bench.store.attempts[1]);
  EXPECT_GE(bench.store.abandoned, 1) << "the wait given up before the next attempt";
}

TEST(Waiter, GivesUpAtTheDeadlineAfterALastAttemptAndWithdraws)
{
  Bench bench;
  bench.store.acquire_answer = [](int) { return FakeStore::busy(60'000, 30s); };
  bench.store.wake_answer = [](int) { return std::nullopt; };
  Taken taken = bench.take(bench.policy(10s));
  EXPECT_FALSE(taken.acquired);
  EXPECT_EQ(taken.signal, 0);
  EXPECT_NE(taken.held_by.find("someone@elsewhere"), std::string::npos) << taken.held_by;
  ASSERT_EQ(bench.store.attempts.size(), 2u);
  EXPECT_EQ(bench.store.tickets[0].max_block, 10s) << "never blocks past --wait";
  EXPECT_EQ(bench.since_start(bench.store.attempts[1]), 10s) << "the last attempt, at the deadline";
  EXPECT_EQ(bench.store.withdrawals, 1);
  EXPECT_EQ(bench.clock.now(), bench.store.attempts[1]);
}

TEST(Waiter, ASupersededWaiterGivesUpAtOnceAndWithdraws)
{
  Bench bench;
  bench.store.acquire_answer = [](int n) {
    Outcome outcome = FakeStore::busy(60'000, 30s);
    if (n == 2) {
      outcome.acquire.superseded_by = dlock::lock::HolderInfo{};
      outcome.acquire.superseded_by->user = "newer";
      outcome.acquire.superseded_by->host = "ci";
      outcome.acquire.superseded_by->pid = 7;
    }
    return outcome;
  };
  Taken taken = bench.take(bench.policy(60s));
  EXPECT_FALSE(taken.acquired);
  EXPECT_TRUE(taken.superseded);
  EXPECT_NE(taken.held_by.find("superseded by a newer waiter, newer@ci pid 7"), std::string::npos)
    << taken.held_by;
  ASSERT_EQ(bench.store.attempts.size(), 2u) << "no attempt after the one that said so";
  EXPECT_FALSE(bench.store.tickets[0].registered) << "the first attempt registers (announces)";
  EXPECT_TRUE(bench.store.tickets[1].registered) << "later ones were registered before";
  EXPECT_EQ(bench.store.withdrawals, 1);
  EXPECT_EQ(bench.clock.now(), bench.start) << "long before --wait runs out";
}

TEST(Waiter, ALockDelayIsWaitedOutForTheTimeTheStoreSaysThenTaken)
{
  Bench bench;
  bench.store.acquire_answer = [](int n) {
    if (n > 1) {
      return FakeStore::taken(9);
    }
    Outcome outcome = FakeStore::busy(4000, 4s);
    outcome.acquire.lease = dlock::lock::AcquireResult::Lease::lock_delay;
    return outcome;
  };
  bench.store.wake_answer = [](int) { return std::nullopt; }; // no release ends a delay
  Taken taken = bench.take(bench.policy());
  EXPECT_TRUE(taken.acquired);
  ASSERT_EQ(bench.store.attempts.size(), 2u) << "one timed block, no polling";
  EXPECT_EQ(bench.since_start(bench.store.attempts[1]), 6s) << "the delay plus a request's time";
}

TEST(Waiter, ConflictsSayWhatKeepsTheLockClosed)
{
  dlock::lock::AcquireResult result;
  result.holder.user = "u";
  result.holder.host = "h";
  result.holder.pid = 3;
  result.holder.command = "job";
  result.holder.note = "nightly";
  result.holder_ttl = 90s;
  result.lease = dlock::lock::AcquireResult::Lease::min_hold;
  EXPECT_EQ(dlock::hold::who_holds(result),
            "u@h pid 3 (job), note: nightly, command ended, kept by --min-hold for 1m30s more");
  EXPECT_EQ(dlock::hold::who_holds_for_log(result),
            "u@h pid 3, note: nightly, command ended, kept by --min-hold for 1m30s more");
  result.lease = dlock::lock::AcquireResult::Lease::lock_delay;
  EXPECT_EQ(dlock::hold::who_holds(result),
            "no one (u@h pid 3 (job), note: nightly ended without a release; --lock-delay keeps "
            "it closed for 1m30s more)");
  result.lease = dlock::lock::AcquireResult::Lease::ends;
  result.replace_asked = true;
  EXPECT_EQ(dlock::hold::who_holds(result),
            "u@h pid 3 (job), note: nightly, lease ends in 1m30s, asked to stand down (--replace)");
}

TEST(Waiter, NoWaitTriesOnceAndRegistersNothing)
{
  Bench bench;
  bench.store.acquire_answer = [](int) { return FakeStore::busy(60'000, 30s); };
  Taken taken = bench.take(bench.policy(std::nullopt, true));
  EXPECT_FALSE(taken.acquired);
  EXPECT_EQ(bench.store.attempts.size(), 1u);
  EXPECT_EQ(bench.store.tickets[0].mode, WaitMode::once);
  EXPECT_EQ(bench.store.withdrawals, 0);
  EXPECT_TRUE(bench.store.wake_waits.empty());
}

TEST(Waiter, RidesOutAStoreThatWentAwayAfterItAnswered)
{
  Bench bench;
  bench.store.acquire_answer = [](int n) -> std::optional<Outcome> {
    if (n == 1) {
      return FakeStore::busy(5000, 5s);
    }
    return n < 4 ? FakeStore::down(Outcome::Op::acquire) : FakeStore::taken(4);
  };
  Taken taken = bench.take(bench.policy());
  EXPECT_TRUE(taken.acquired);
  ASSERT_EQ(bench.store.attempts.size(), 4u);
  EXPECT_EQ(bench.since_start(bench.store.attempts[1]), 0s) << "woken at once";
  EXPECT_EQ(bench.since_start(bench.store.attempts[2]), 1s) << "a pause of a second";
  EXPECT_EQ(bench.since_start(bench.store.attempts[3]), 2s);
}

TEST(Waiter, AStoreDownFromTheStartIsAnError)
{
  Bench bench;
  bench.store.acquire_answer = [](int) { return FakeStore::down(Outcome::Op::acquire); };
  try {
    bench.take(bench.policy(60s));
    FAIL() << "an unreachable store must not be waited for";
  } catch (const dlock::Error& error) {
    EXPECT_EQ(error.code(), dlock::ExitCode::unavailable);
  }
  EXPECT_EQ(bench.store.attempts.size(), 1u);
}

TEST(Waiter, AnOutageIsRiddenOutNoLongerThanWait)
{
  Bench bench;
  bench.store.acquire_answer = [](int n) -> std::optional<Outcome> {
    return n == 1 ? FakeStore::busy(5000, 5s) : FakeStore::down(Outcome::Op::acquire);
  };
  EXPECT_THROW(bench.take(bench.policy(3s)), dlock::Error);
  EXPECT_EQ(bench.since_start(bench.clock.now()), 3s) << "tried until --wait ran out";
  EXPECT_EQ(bench.store.attempts.size(), 5u) << "at 0 (held), 0 (woken), 1 s, 2 s, 3 s";
}

TEST(Waiter, ASignalEndsTheWaitAndWithdrawsTheWaiter)
{
  Bench bench;
  bench.store.acquire_answer = [](int) { return FakeStore::busy(60'000, 30s); };
  bench.store.wake_answer = [](int) { return std::nullopt; };
  ::raise(SIGUSR1); // pending: the signalfd has it when the waiter blocks
  Taken taken = bench.take(bench.policy());
  EXPECT_FALSE(taken.acquired);
  EXPECT_EQ(taken.signal, SIGUSR1);
  EXPECT_EQ(bench.store.withdrawals, 1);
  EXPECT_EQ(bench.clock.now(), bench.start);
}

TEST(Waiter, CancelGivesBackALockTheFirstAttemptTook)
{
  Bench bench;
  Waiter waiter(bench.clock, bench.store, bench.signals, bench.policy());
  waiter.begin_take(LockName::parse("unit"), Bench::request());
  EXPECT_EQ(bench.store.attempts.size(), 1u) << "in flight while the caller works";
  EXPECT_EQ(bench.store.releases, 0);
  waiter.cancel();
  EXPECT_EQ(bench.store.releases, 1);
}

TEST(Waiter, ABarrierPartyWaitsForTheOthersWithItsGeneration)
{
  Bench bench;
  bench.store.gate_answer = [](int n) {
    Outcome outcome = gate_shut(5s);
    outcome.gate.open = n == 2;
    outcome.gate.parties = 3;
    outcome.gate.arrived = 1;
    outcome.gate.generation = 4;
    return outcome;
  };
  Gate gate;
  gate.coordination = bench.store.coordination();
  gate.request.ticket.mode = WaitMode::barrier;
  gate.request.parties = 3;
  gate.block_cap = 5s;
  gate.subject = "barrier 'unit'";
  Passed passed = Waiter(bench.clock, bench.store, bench.signals, bench.policy())
                    .pass(LockName::parse("unit"), gate);
  EXPECT_TRUE(passed.open);
  ASSERT_EQ(bench.store.tickets.size(), 2u);
  EXPECT_EQ(bench.store.tickets[0].generation, 0);
  EXPECT_EQ(bench.store.tickets[1].generation, 4) << "the next attempt names the generation joined";
  EXPECT_EQ(bench.store.tickets[1].mode, WaitMode::barrier);
}

TEST(Waiter, ABarrierOfOtherPartiesIsTheCallersMistake)
{
  Bench bench;
  bench.store.gate_answer = [](int) {
    Outcome outcome = gate_shut(5s);
    outcome.gate.parties = 5;
    return outcome;
  };
  Gate gate;
  gate.coordination = bench.store.coordination();
  gate.request.ticket.mode = WaitMode::barrier;
  gate.request.parties = 3;
  try {
    Waiter waiter(bench.clock, bench.store, bench.signals, bench.policy());
    waiter.pass(LockName::parse("u"), gate);
    FAIL();
  } catch (const dlock::Error& error) {
    EXPECT_EQ(error.code(), dlock::ExitCode::usage);
  }
}

TEST(Waiter, ABarrierThatTrippedWhileTheLastPartyWithdrewIsPassed)
{
  Bench bench;
  bench.store.gate_answer = [](int) { return gate_shut(5s); };
  bench.store.wake_answer = [](int) { return std::nullopt; };
  bench.store.withdraw_answer = [](int) {
    Outcome outcome = Outcome::of(Outcome::Op::withdraw);
    outcome.gate.open = true;
    return outcome;
  };
  Gate gate;
  gate.coordination = bench.store.coordination();
  gate.request.ticket.mode = WaitMode::barrier;
  gate.request.parties = 0;
  Passed passed = Waiter(bench.clock, bench.store, bench.signals, bench.policy(2s))
                    .pass(LockName::parse("unit"), gate);
  EXPECT_TRUE(passed.open);
  EXPECT_EQ(bench.store.withdrawals, 1);
  EXPECT_EQ(bench.since_start(bench.clock.now()), 2s);
}

TEST(Waiter, ALatchWaiterInterruptedBySignalWithdrawsNothing)
{
  Bench bench;
  bench.store.gate_answer = [](int) { return gate_shut(30s); };
  bench.store.wake_answer = [](int) { return std::nullopt; };
  Gate gate;
  gate.coordination = bench.store.coordination();
  gate.request.ticket.mode = WaitMode::latch;
  ::raise(SIGUSR2);
  Passed passed = Waiter(bench.clock, bench.store, bench.signals, bench.policy())
                    .pass(LockName::parse("unit"), gate);
  EXPECT_FALSE(passed.open);
  EXPECT_EQ(passed.signal, SIGUSR2);
  EXPECT_EQ(bench.store.withdrawals, 0);
}

TEST(Waiter, ALeaderWatcherSendsTheTermItSawAndReturnsTheOneItOpenedOn)
{
  Bench bench;
  bench.store.gate_answer = [](int n) {
    Outcome outcome = gate_shut(5s);
    outcome.gate.open = n == 2;
    outcome.gate.since = n == 2 ? 9 : 7; // the term now: still 7, then 9
    return outcome;
  };
  Gate gate;
  gate.coordination = bench.store.coordination();
  gate.request.ticket.mode = WaitMode::leader;
  gate.request.ticket.since = 7;
  Passed passed = Waiter(bench.clock, bench.store, bench.signals, bench.policy())
                    .pass(LockName::parse("unit"), gate);
  EXPECT_TRUE(passed.open);
  EXPECT_EQ(passed.since, 9) << "the term it opened on, for the next watch";
  ASSERT_EQ(bench.store.tickets.size(), 2u);
  EXPECT_EQ(bench.store.tickets[0].since, 7) << "the first attempt names the term seen";
  EXPECT_EQ(bench.store.tickets[1].since, 7);
  EXPECT_EQ(bench.store.tickets[1].mode, WaitMode::leader);
}

TEST(Acquisition, SeveralKeysAreAllTakenOrNoneIsKept)
{
  Bench bench;
  // Two keys: the first is free; the second is held at first (the first is given back and
  // the second waited for), then both are taken.
  bench.store.acquire_answer = [](int n) {
    return n == 2 ? FakeStore::busy(5000, 5s) : FakeStore::taken(n);
  };
  Taken taken = Acquisition(bench.clock, bench.store, bench.signals, bench.policy(),
                            {LockName::parse("a"), LockName::parse("b")}, Bench::request())
                  .finish();
  EXPECT_TRUE(taken.acquired);
  EXPECT_EQ(bench.store.releases, 1) << "never holds one key while waiting for another";
  EXPECT_EQ(bench.store.attempts.size(), 4u) << "a, b (held), b, a";
  EXPECT_EQ(taken.fences.size(), 2u);
}

#include "fake_clock.hpp"
#include "lock/watchdog.hpp"
#include "util/error.hpp"

#include <gtest/gtest.h>

using namespace std::chrono_literals;
using dlock::ExitCode;
using dlock::lock::Actions;
using dlock::lock::Notice;
using dlock::lock::StopReason;
using dlock::lock::Watchdog;
using dlock::lock::WatchdogPolicy;
using dlock::util::Millis;
using dlock::util::TimePoint;

namespace {

// ttl 9s: renew every 3s, 450ms safety margin, SIGTERM 2s before SIGKILL.
WatchdogPolicy policy(bool ignore = false, std::optional<Millis> max_hold = std::nullopt)
{
  WatchdogPolicy p;
  p.lease.ttl = 9s;
  p.lease.kill_after = 2s;
  p.lease.request_limit = 1s;
  p.on_lost_ignore = ignore;
  p.max_hold = max_hold;
  return p;
}

bool told(const Actions& actions, Notice::Kind kind)
{
  for (const auto& notice : actions.notices) {
    if (notice && notice->kind == kind) {
      return true;
    }
  }
  return false;
}

int exit_code(const Watchdog& watchdog, std::optional<bool> released)
{
  return watchdog.verdict(released).exit_code.value_or(0);
}

} // namespace

TEST(Watchdog, ArmsTheGuardWhenTheCommandStarts)
{
  FakeClock clock;
  Watchdog dog(policy(), clock.now(), clock.now());
  EXPECT_TRUE(dog.start().arm_guard);
  EXPECT_FALSE(Watchdog(policy(true), clock.now(), clock.now()).start().arm_guard);
}

TEST(Watchdog, RenewsEveryThirdOfTheTtlAndRearmsTheGuardOnEachConfirmation)
{
  FakeClock clock;
  TimePoint start = clock.now();
  Watchdog dog(policy(), start, start);
  EXPECT_EQ(dog.next_wakeup(clock.now()), start + 3s);
  clock.advance(2999ms);
  EXPECT_FALSE(dog.on_time(clock.now()).send_renewal);
  clock.advance(1ms);
  EXPECT_TRUE(dog.on_time(clock.now()).send_renewal);
  EXPECT_FALSE(dog.on_time(clock.now()).send_renewal) << "one renewal in flight at a time";
  clock.advance(20ms);
  Actions confirmed = dog.renewal_confirmed(clock.now());
  EXPECT_TRUE(confirmed.arm_guard);
  EXPECT_TRUE(told(confirmed, Notice::Kind::renewed));
  // The lease runs from the send, not the answer.
  EXPECT_EQ(dog.lease().expires_at(), start + 3s + 9s);
  EXPECT_EQ(dog.next_wakeup(clock.now()), start + 6s);
  EXPECT_EQ(exit_code(dog, true), 0);
  EXPECT_EQ(dog.stop_reason(), StopReason::none);
}

TEST(Watchdog, ARefusedRenewalStopsTheCommandAtOnceAndEndsIn76)
{
  FakeClock clock;
  Watchdog dog(policy(), clock.now(), clock.now());
  clock.advance(3s);
  ASSERT_TRUE(dog.on_time(clock.now()).send_renewal);
  Actions refused = dog.renewal_refused(clock.now());
  EXPECT_TRUE(refused.terminate);
  EXPECT_TRUE(told(refused, Notice::Kind::lost));
  EXPECT_EQ(dog.kill_at(), clock.now() + 2s);
  EXPECT_EQ(dog.stop_reason(), StopReason::lost);
  EXPECT_FALSE(dog.on_time(clock.now()).send_renewal) << "no renewals after a loss";
  clock.advance(2s);
  Actions later = dog.on_time(clock.now());
  EXPECT_TRUE(later.kill);
  EXPECT_FALSE(dog.on_time(clock.now()).kill) << "SIGKILL once";
  EXPECT_EQ(exit_code(dog, false), static_cast<int>(ExitCode::lost));
}

TEST(Watchdog, UnansweredRenewalsStopTheCommandBeforeTheLeaseCanExpire)
{
  FakeClock clock;
  TimePoint start = clock.now();
  Watchdog dog(policy(), start, start);
  int renewals = 0;
  TimePoint terminated{};
  TimePoint killed{};
  // Every renewal goes unanswered; step through time as the supervisor would.
  for (TimePoint t = start; t < start + 20s; t = std::max(t + 1ms, dog.next_wakeup(t))) {
    clock.set(t);
    Actions actions = dog.on_time(t);
    renewals += actions.send_renewal ? 1 : 0;
    if (actions.terminate) {
      EXPECT_EQ(terminated, TimePoint{}) << "SIGTERM once";
      terminated = t;
      EXPECT_TRUE(told(actions, Notice::Kind::unconfirmed));
    }
    if (actions.kill) {
      killed = t;
    }
  }
  EXPECT_GE(renewals, 3) << "retried after each timeout";
  Millis margin = policy().lease.safety_margin(); // ttl/20 = 450ms
  EXPECT_EQ(terminated, start + 9s - margin - 2s);
  EXPECT_EQ(killed, start + 9s - margin);
  EXPECT_LT(killed, dog.lease().expires_at());
  EXPECT_EQ(dog.stop_reason(), StopReason::unconfirmed);
  EXPECT_EQ(exit_code(dog, std::nullopt), static_cast<int>(ExitCode::lost));
}

TEST(Watchdog, ATimedOutRenewalIsAbandonedAndRetriedSoon)
{
  FakeClock clock;
  Watchdog dog(policy(), clock.now(), clock.now());
  clock.advance(3s);
  ASSERT_TRUE(dog.on_time(clock.now()).send_renewal);
  clock.advance(1s); // request_timeout: min(ttl/3, 1s)
  Actions timed_out = dog.on_time(clock.now());
  EXPECT_TRUE(timed_out.abandon_renewal);
  EXPECT_TRUE(told(timed_out, Notice::Kind::renewal_timed_out));
  EXPECT_FALSE(timed_out.send_renewal);
  clock.advance(900ms); // retry: ttl/10 capped at 1s
  EXPECT_TRUE(dog.on_time(clock.now()).send_renewal);
}

TEST(Watchdog, AFailedRenewalIsRetriedAndALaterConfirmationSavesTheRun)
{
  FakeClock clock;
  TimePoint start = clock.now();
  Watchdog dog(policy(), start, start);
  clock.advance(3s);
  ASSERT_TRUE(dog.on_time(clock.now()).send_renewal);
  EXPECT_FALSE(dog.renewal_failed(clock.now()).terminate);
  clock.advance(900ms);
  ASSERT_TRUE(dog.on_time(clock.now()).send_renewal);
  TimePoint sent = clock.now();
  dog.renewal_confirmed(clock.now());
  EXPECT_EQ(dog.lease().expires_at(), sent + 9s);
  EXPECT_EQ(exit_code(dog, true), 0);
}

TEST(Watchdog, ADroppedConnectionBringsTheNextRenewalForward)
{
  FakeClock clock;
  TimePoint start = clock.now();
  Watchdog dog(policy(), start, start);
  clock.advance(500ms); // a restart: the lock may have gone with the server
  dog.store_disconnected(clock.now());
  EXPECT_EQ(dog.next_wakeup(clock.now()), start + 500ms + 900ms) << "retry interval, not 3s";
  clock.advance(900ms);
  EXPECT_TRUE(dog.on_time(clock.now()).send_renewal);
  // With a renewal in flight, its own outcome decides: the schedule is left alone.
  TimePoint deadline = dog.next_wakeup(clock.now());
  dog.store_disconnected(clock.now());
  EXPECT_EQ(dog.next_wakeup(clock.now()), deadline);
  // Never later than the regular turn.
  dog.renewal_confirmed(clock.now());
  TimePoint regular = dog.lease().next_renewal_at();
  clock.set(regular - 100ms);
  dog.store_disconnected(clock.now());
  EXPECT_EQ(dog.lease().next_renewal_at(), regular);
}

TEST(Watchdog, AnEndedSessionIsConfirmedAtOnce)
{
  FakeClock clock;
  TimePoint start = clock.now();
  Watchdog dog(policy(), start, start);
  clock.advance(500ms); // a database session ended: the lock went with it
  dog.store_disconnected(clock.now(), true);
  EXPECT_EQ(dog.next_wakeup(clock.now()), clock.now());
  EXPECT_TRUE(dog.on_time(clock.now()).send_renewal);
}

TEST(Watchdog, ARenewalTooFewReplicasHaveDoesNotExtendTheLease)
{
  FakeClock clock;
  TimePoint start = clock.now();
  WatchdogPolicy p = policy();
  p.replicas = dlock::lock::ReplicaAck{2, 900ms};
  Watchdog dog(p, start, start);
  clock.advance(3s);
  ASSERT_TRUE(dog.on_time(clock.now()).send_renewal);
  Actions short_of_one = dog.renewal_confirmed(clock.now(), 1);
  EXPECT_FALSE(short_of_one.arm_guard) << "the guard keeps the old deadlines";
  EXPECT_TRUE(told(short_of_one, Notice::Kind::replicas_short));
  EXPECT_EQ(dog.lease().expires_at(), start + 9s) << "the lease still runs from the acquisition";
  EXPECT_EQ(dog.next_wakeup(clock.now()), clock.now() + 900ms) << "retried soon";
  clock.advance(900ms);
  ASSERT_TRUE(dog.on_time(clock.now()).send_renewal);
  EXPECT_FALSE(told(dog.renewal_confirmed(clock.now(), 0), Notice::Kind::replicas_short))
    << "told once while it lasts";
  clock.advance(900ms);
  ASSERT_TRUE(dog.on_time(clock.now()).send_renewal);
  TimePoint sent = clock.now();
  EXPECT_TRUE(dog.renewal_confirmed(clock.now(), 2).arm_guard);
  EXPECT_EQ(dog.lease().expires_at(), sent + 9s);
  // Without the option the count is not asked for and does not matter.
  Watchdog plain(policy(), start, start);
  clock.set(start + 3s);
  ASSERT_TRUE(plain.on_time(clock.now()).send_renewal);
  EXPECT_TRUE(plain.renewal_confirmed(clock.now()).arm_guard);
}

TEST(Watchdog, MaxHoldStopsWith124AndALossStillWins)
{
  FakeClock clock;
  TimePoint start = clock.now();
  Watchdog dog(policy(false, 1s), start, start);
  clock.advance(1s);
  Actions actions = dog.on_time(clock.now());
  EXPECT_TRUE(actions.terminate);
  EXPECT_TRUE(told(actions, Notice::Kind::max_hold));
  EXPECT_EQ(dog.stop_reason(), StopReason::max_hold);
  EXPECT_EQ(exit_code(dog, true), static_cast<int>(ExitCode::max_hold));

  Watchdog lost(policy(false, 4s), start, start);
  clock.set(start + 3s);
  ASSERT_TRUE(lost.on_time(clock.now()).send_renewal);
  lost.renewal_refused(clock.now());
  clock.set(start + 4s);
  EXPECT_FALSE(lost.on_time(clock.now()).terminate) << "already stopping";
  EXPECT_EQ(lost.stop_reason(), StopReason::lost);
  EXPECT_EQ(exit_code(lost, false), static_cast<int>(ExitCode::lost));
}

TEST(Watchdog, OnLostIgnoreNeverStopsButReports76UnlessTheReleaseProvesTheLease)
{
  FakeClock clock;
  TimePoint start = clock.now();
  Watchdog dog(policy(true), start, start);
  bool warned = false;
  for (TimePoint t = start; t < start + 12s; t = std::max(t + 1ms, dog.next_wakeup(t))) {
    Actions actions = dog.on_time(t);
    EXPECT_FALSE(actions.terminate);
    EXPECT_FALSE(actions.kill);
    EXPECT_FALSE(actions.arm_guard);
    warned = warned || told(actions, Notice::Kind::maybe_expired);
  }
  EXPECT_TRUE(warned);
  EXPECT_TRUE(dog.ran_unprotected());
  EXPECT_EQ(exit_code(dog, std::nullopt), static_cast<int>(ExitCode::lost));
  EXPECT_EQ(exit_code(dog, true), 0) << "a confirmed release proves the lease never lapsed";
}

TEST(Watchdog, ALockGoneAtReleaseIsALossEvenIfNothingNoticedIt)
{
  FakeClock clock;
  Watchdog dog(policy(), clock.now(), clock.now());
  auto verdict = dog.verdict(false);
  EXPECT_EQ(verdict.exit_code, static_cast<int>(ExitCode::lost));
  ASSERT_TRUE(verdict.notice);
  EXPECT_EQ(verdict.notice->kind, Notice::Kind::lost_before_release);
  EXPECT_EQ(dog.verdict(std::nullopt).exit_code, std::nullopt) << "unknown: the lease was kept";
}

TEST(Watchdog, TheGuardStoppingAFrozenDlockCountsAsUnconfirmed)
{
  FakeClock clock;
  Watchdog dog(policy(), clock.now(), clock.now());
  clock.advance(7s);
  Actions actions = dog.guard_stopped(clock.now(), true);
  EXPECT_TRUE(told(actions, Notice::Kind::frozen));
  EXPECT_EQ(dog.stop_reason(), StopReason::unconfirmed);
  EXPECT_FALSE(dog.on_time(clock.now() + 5s).kill) << "the guard already sent SIGKILL";
  EXPECT_EQ(exit_code(dog, std::nullopt), static_cast<int>(ExitCode::lost));
}

TEST(Watchdog, MessagesNameTheLock)
{
  EXPECT_EQ(
    describe(Notice{Notice::Kind::lost}, "nightly", "it expired or was released by someone else"),
    "lost lock 'nightly': it expired or was released by someone else; stopping the "
    "command");
  EXPECT_NE(describe(Notice{Notice::Kind::unconfirmed, 2500ms}, "n", "").find("2.5s"),
            std::string::npos);
}

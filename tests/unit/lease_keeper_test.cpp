// hold::LeaseKeeper on a fake clock and a fake store: when renewals go out, what their answers
// come to, and how a lease kept by another process is handed back.
#include "fake_clock.hpp"
#include "fake_store.hpp"
#include "hold/lease_keeper.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

using namespace std::chrono_literals;
using dlock::hold::KeptLock;
using dlock::hold::LeaseEvents;
using dlock::hold::LeaseKeeper;
using dlock::hold::RenewalVerdict;
using dlock::lock::Actions;
using dlock::lock::LockName;
using dlock::lock::Notice;
using dlock::lock::Outcome;
using dlock::lock::StopReason;
using dlock::lock::Watchdog;
using dlock::lock::WatchdogPolicy;
using dlock::util::Millis;
using dlock::util::TimePoint;

namespace {

// What the keeper told its owner.
struct Recorder final : LeaseEvents {
  std::vector<Notice::Kind> notices;
  std::vector<RenewalVerdict> verdicts;
  int terminated = 0;
  std::optional<TimePoint> terminated_at;
  int killed = 0;
  std::optional<TimePoint> killed_at;
  FakeClock* clock = nullptr;

  void act(const Actions& actions) override
  {
    for (const auto& notice : actions.notices) {
      if (notice) {
        notices.push_back(notice->kind);
      }
    }
    if (actions.terminate) {
      ++terminated;
      terminated_at = clock->now();
    }
    if (actions.kill) {
      ++killed;
      killed_at = clock->now();
    }
  }
  void round_ended(RenewalVerdict verdict, const std::string&) override
  {
    verdicts.push_back(verdict);
  }
  bool told(Notice::Kind kind) const
  {
    return std::find(notices.begin(), notices.end(), kind) != notices.end();
  }
};

// A 30 s lease taken at the fake clock's start: renewed every 10 s, 2 s per request.
struct Bench {
  FakeClock clock;
  FakeStore store;
  Recorder events;
  TimePoint start = clock.now();

  Bench()
  {
    store.clock = [this] { return clock.now(); };
    events.clock = &clock;
  }
  static WatchdogPolicy policy()
  {
    WatchdogPolicy policy;
    policy.lease.ttl = 30s;
    policy.lease.kill_after = 5s;
    policy.lease.request_limit = 2s;
    return policy;
  }
  LeaseKeeper keeper(WatchdogPolicy policy = Bench::policy(),
                     std::vector<LockName> names = {LockName::parse("unit")})
  {
    return LeaseKeeper(clock, store, KeptLock{std::move(names), "token", {}, policy.lease.ttl},
                       Watchdog(policy, start, start), events);
  }
  // The owner's loop, as run's Supervisor and acquire --keep turn it, until `until`.
  static void turn_until(LeaseKeeper& keeper, FakeClock& clock, TimePoint until)
  {
    clock.horizon = until;
    while (clock.now() < until && !keeper.watchdog().stopping()) {
      keeper.on_time();
      dlock::util::EventLoop loop;
      keeper.wait(loop);
      keeper.take_answers();
    }
    clock.horizon = TimePoint::max();
  }
  Millis since_start(TimePoint t) const { return std::chrono::duration_cast<Millis>(t - start); }
};

} // namespace

TEST(LeaseKeeper, RenewsEveryThirdOfTheTtlWhileConfirmed)
{
  Bench bench;
  LeaseKeeper keeper = bench.keeper();
  Bench::turn_until(keeper, bench.clock, bench.start + 35s);
  ASSERT_EQ(bench.store.renewals.size(), 3u);
  EXPECT_EQ(bench.since_start(bench.store.renewals[0]), 10s);
  EXPECT_EQ(bench.since_start(bench.store.renewals[1]), 20s);
  EXPECT_EQ(bench.since_start(bench.store.renewals[2]), 30s);
  EXPECT_EQ(bench.events.verdicts.size(), 3u);
  EXPECT_FALSE(keeper.watchdog().stopping());
  EXPECT_EQ(bench.events.terminated, 0);
}

TEST(LeaseKeeper, ARenewalRoundCoversEveryKeyAndOneRefusalLosesTheLock)
{
  Bench bench;
  // Second round (renewals 3 and 4): the second key is no longer held.
  bench.store.answer = [](int n) { return FakeStore::held(n != 4); };
  LeaseKeeper keeper = bench.keeper(Bench::policy(), {LockName::parse("a"), LockName::parse("b")});
  Bench::turn_until(keeper, bench.clock, bench.start + 60s);
  EXPECT_EQ(bench.store.renewals.size(), 4u) << "a request per key per round, none after";
  EXPECT_EQ(keeper.watchdog().stop_reason(), StopReason::lost);
  EXPECT_TRUE(bench.events.told(Notice::Kind::lost));
  EXPECT_EQ(bench.events.terminated, 1);
  EXPECT_EQ(bench.since_start(bench.clock.now()), 20s) << "lost at the answer, not later";
}

TEST(LeaseKeeper, ARefusalThatNamesAReplacerLosesTheLockSayingWho)
{
  Bench bench;
  bench.store.answer = [](int n) {
    Outcome outcome = FakeStore::held(n == 1);
    if (n == 2) {
      outcome.replaced_by = dlock::lock::HolderInfo{};
      outcome.replaced_by->user = "ci";
      outcome.replaced_by->host = "runner";
      outcome.replaced_by->pid = 9;
      outcome.replaced_by->command = "deploy";
      outcome.replaced_by->note = "build 43";
    }
    return outcome;
  };
  LeaseKeeper keeper = bench.keeper();
  EXPECT_FALSE(keeper.replaced());
  Bench::turn_until(keeper, bench.clock, bench.start + 60s);
  EXPECT_EQ(keeper.watchdog().stop_reason(), StopReason::lost);
  EXPECT_TRUE(keeper.replaced());
  EXPECT_EQ(keeper.loss_cause(),
            "replaced by ci@runner pid 9 (deploy), note: build 43 (--replace)");
  EXPECT_EQ(bench.since_start(bench.clock.now()), 20s) << "stopped at the renewal that said so";
}

TEST(LeaseKeeper, FailedRenewalsAreRetriedSoonAndTheLeaseSurvives)
{
  Bench bench;
  bench.store.answer = [](int n) { return n == 1 ? FakeStore::failed() : FakeStore::held(true); };
  LeaseKeeper keeper = bench.keeper();
  Bench::turn_until(keeper, bench.clock, bench.start + 15s);
  ASSERT_GE(bench.store.renewals.size(), 2u);
  EXPECT_EQ(bench.store.renewals[1] - bench.store.renewals[0], 1s) << "retry: ttl/10 within 1 s";
  EXPECT_EQ(bench.events.verdicts.front(), RenewalVerdict::failed);
  EXPECT_FALSE(keeper.watchdog().stopping());
}

TEST(LeaseKeeper, AStoreThatNeverAnswersStopsAndKillsBeforeTheLeaseCouldEnd)
{
  Bench bench;
  bench.store.answer = [](int) { return std::nullopt; };
  LeaseKeeper keeper = bench.keeper();
  // Past the stop: the kill follows at the lease's kill time.
  Bench::turn_until(keeper, bench.clock, bench.start + 25s);
  while (bench.events.killed == 0 && bench.clock.now() < bench.start + 60s) {
    keeper.on_time();
    dlock::util::EventLoop loop;
    keeper.wait(loop);
    keeper.take_answers();
  }
  EXPECT_EQ(keeper.watchdog().stop_reason(), StopReason::unconfirmed);
  EXPECT_TRUE(bench.events.told(Notice::Kind::unconfirmed));
  EXPECT_GE(bench.store.abandoned, 1) << "timed-out renewals are dropped";
  ASSERT_TRUE(bench.events.killed_at);
  EXPECT_EQ(*bench.events.killed_at, keeper.watchdog().lease().kill_at());
  EXPECT_LT(*bench.events.killed_at, keeper.watchdog().lease().expires_at());
}

TEST(LeaseKeeper, WithoutKillAfterTheLeaseIsLostOnlyWhenItCouldExpire)
{
  // acquire --keep's policy: no command to stop early, so the stop and the kill come together.
  Bench bench;
  bench.store.answer = [](int) { return std::nullopt; };
  WatchdogPolicy policy = Bench::policy();
  policy.lease.kill_after = 0ms;
  LeaseKeeper keeper = bench.keeper(policy);
  Bench::turn_until(keeper, bench.clock, bench.start + 60s);
  EXPECT_EQ(keeper.watchdog().stop_reason(), StopReason::unconfirmed);
  EXPECT_EQ(bench.events.terminated, 1);
  EXPECT_EQ(bench.events.killed, 1);
  ASSERT_TRUE(bench.events.terminated_at && bench.events.killed_at);
  EXPECT_EQ(*bench.events.terminated_at, *bench.events.killed_at);
  EXPECT_EQ(*bench.events.killed_at, keeper.watchdog().lease().kill_at());
  EXPECT_EQ(bench.since_start(*bench.events.killed_at), 30s - 500ms)
    << "the TTL less the safety margin";
}

TEST(LeaseKeeper, MaxHoldEndsTheKeepingAtItsTime)
{
  Bench bench;
  WatchdogPolicy policy = Bench::policy();
  policy.lease.kill_after = 0ms;
  policy.max_hold = 25s;
  LeaseKeeper keeper = bench.keeper(policy);
  Bench::turn_until(keeper, bench.clock, bench.start + 60s);
  EXPECT_EQ(keeper.watchdog().stop_reason(), StopReason::max_hold);
  EXPECT_TRUE(bench.events.told(Notice::Kind::max_hold));
  ASSERT_TRUE(bench.events.terminated_at);
  EXPECT_EQ(bench.since_start(*bench.events.terminated_at), 25s);
}

TEST(LeaseKeeper, ADisconnectedStoreIsAskedSoonerThanTheNextTurn)
{
  Bench bench;
  LeaseKeeper keeper = bench.keeper();
  Bench::turn_until(keeper, bench.clock, bench.start + 3s);
  keeper.watchdog().store_disconnected(bench.clock.now());
  Bench::turn_until(keeper, bench.clock, bench.start + 5s);
  ASSERT_EQ(bench.store.renewals.size(), 1u);
  EXPECT_EQ(bench.since_start(bench.store.renewals[0]), 4s)
    << "a retry interval after, not at 10 s";
}

TEST(LeaseKeeper, ALeaseHandedBackFromTheCtrlZRenewerIsTheRenewersAndWhatWasInFlightCountsAsFailed)
{
  Bench bench;
  bench.store.answer = [](int n) -> std::optional<FakeStore::Outcome> {
    return n == 1 ? std::nullopt : std::optional(FakeStore::held(true)); // the first is lost
  };
  LeaseKeeper keeper = bench.keeper();
  Bench::turn_until(keeper, bench.clock, bench.start + 11s); // renewal 1 in flight
  ASSERT_TRUE(keeper.watchdog().lease().in_flight());
  // Meanwhile the renewer (another process, its own view) renewed at 10 s, and its renewal of
  // 20 s was still in flight when dlock took the lease back.
  Watchdog renewer(Bench::policy(), bench.start, bench.start);
  renewer.on_time(bench.start + 10s);
  renewer.renewal_confirmed(bench.start + 10s);
  renewer.on_time(bench.start + 20s);
  ASSERT_TRUE(renewer.lease().in_flight());
  bench.clock.set(bench.start + 21s);
  int abandoned = bench.store.abandoned;
  keeper.hand_back(renewer);
  EXPECT_EQ(keeper.watchdog().lease().expires_at(), renewer.lease().expires_at());
  EXPECT_FALSE(keeper.watchdog().lease().in_flight());
  EXPECT_EQ(bench.store.abandoned, abandoned + 1) << "the renewer used the connection";
  Bench::turn_until(keeper, bench.clock, bench.start + 23s);
  ASSERT_EQ(bench.store.renewals.size(), 2u);
  EXPECT_EQ(bench.since_start(bench.store.renewals[1]), 22s) << "retried soon, not at 30 s";
}

TEST(LeaseKeeper, TheCtrlZRenewerKeepsTheLeaseInAProcessOfItsOwnAndHandsItBack)
{
  Bench bench;
  LeaseKeeper keeper = bench.keeper();
  TimePoint before = keeper.watchdog().lease().expires_at();
  int wake[2];
  ASSERT_EQ(::pipe(wake), 0);
  ASSERT_TRUE(keeper.start_renewer(wake[0]));
  // The renewer's fake clock runs as fast as it renews; let it, then wake it: it publishes its
  // lease and ends (sending SIGCONT to this process, which is not stopped).
  ::usleep(50'000);
  ASSERT_EQ(::write(wake[1], "x", 1), 1);
  keeper.take_back();
  ::close(wake[0]);
  ::close(wake[1]);
  EXPECT_GT(keeper.watchdog().lease().expires_at(), before) << "the renewer's renewals count";
  EXPECT_TRUE(bench.store.renewals.empty()) << "this process renewed nothing itself";
  EXPECT_GE(bench.store.abandoned, 1);
}

namespace {

// A process to keep a lease for, ended when the test says.
struct Owner {
  pid_t pid = ::fork();
  Owner()
  {
    if (pid == 0) {
      ::pause();
      ::_exit(0);
    }
  }
  ~Owner() { end(); }
  void end()
  {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      pid = -1;
    }
  }
};

} // namespace

TEST(LeaseKeeper, KeepingForAProcessEndsWhenItEnds)
{
  Bench bench;
  Owner owner;
  dlock::process::ProcessWatch watch(owner.pid);
  dlock::process::SignalFd signals({SIGTERM});
  bench.store.answer = [&](int n) {
    if (n == 3) {
      owner.end(); // while the lease is kept, at 30 s
    }
    if (n == 10) {
      ::raise(SIGTERM); // not noticed: end the keeping anyway (the test fails)
    }
    return FakeStore::held(true);
  };
  LeaseKeeper keeper = bench.keeper();
  dlock::hold::KeepEnd end = keeper.keep_for(watch, signals);
  EXPECT_EQ(end.why, dlock::hold::KeepEnd::Why::owner_ended);
  EXPECT_EQ(bench.store.renewals.size(), 3u) << "renewed every 10 s until then";
  EXPECT_EQ(bench.since_start(bench.clock.now()), 30s);
}

TEST(LeaseKeeper, KeepingForAProcessEndsAtASignal)
{
  Bench bench;
  Owner owner;
  dlock::process::ProcessWatch watch(owner.pid);
  dlock::process::SignalFd signals({SIGTERM});
  bench.store.answer = [&](int n) {
    if (n == 2) {
      ::raise(SIGTERM); // release sends it
    }
    return FakeStore::held(true);
  };
  LeaseKeeper keeper = bench.keeper();
  dlock::hold::KeepEnd end = keeper.keep_for(watch, signals);
  EXPECT_EQ(end.why, dlock::hold::KeepEnd::Why::signal);
  EXPECT_EQ(end.signal, SIGTERM);
  EXPECT_EQ(bench.store.renewals.size(), 2u);
}

TEST(LeaseKeeper, KeepingForAProcessStopsWhenTheLeaseIsLost)
{
  Bench bench;
  Owner owner;
  dlock::process::ProcessWatch watch(owner.pid);
  dlock::process::SignalFd signals({SIGTERM});
  bench.store.answer = [](int n) { return FakeStore::held(n < 2); };
  LeaseKeeper keeper = bench.keeper();
  dlock::hold::KeepEnd end = keeper.keep_for(watch, signals);
  EXPECT_EQ(end.why, dlock::hold::KeepEnd::Why::stopped);
  EXPECT_EQ(keeper.watchdog().stop_reason(), StopReason::lost);
  EXPECT_EQ(bench.since_start(bench.clock.now()), 20s);
}

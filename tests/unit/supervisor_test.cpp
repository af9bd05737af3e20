// The Supervisor's I/O, driven by a fake store and a real command under a real guard: renewals
// reach the store, and what the store answers reaches the command.
#include "commands/supervisor.hpp"
#include "fake_store.hpp"

#include <gtest/gtest.h>

#include <signal.h>

using namespace std::chrono_literals;
using dlock::commands::CommandEnd;
using dlock::commands::Supervisor;
using dlock::lock::LockName;
using dlock::lock::StopReason;
using dlock::lock::Watchdog;
using dlock::lock::WatchdogPolicy;
using dlock::process::CommandSpec;
using dlock::process::ProcessGroup;
using dlock::process::SignalFd;
using dlock::util::Millis;
using dlock::util::TimePoint;

namespace {

// A 600 ms lease: renewed every 200 ms, SIGTERM 100 ms before SIGKILL, 50 ms safety margin.
WatchdogPolicy short_lease()
{
  WatchdogPolicy policy;
  policy.lease.ttl = 600ms;
  policy.lease.kill_after = 100ms;
  policy.lease.request_limit = 100ms;
  return policy;
}

struct Ran {
  CommandEnd end;
  StopReason reason;
  std::optional<int> exit_code;
  Millis took;
};

// Runs command under a Supervisor of a lease taken now, with store answering renewals.
Ran supervise(FakeStore& store, const std::string& command, WatchdogPolicy policy = short_lease(),
              std::vector<LockName> names = {LockName::parse("unit")})
{
  SignalFd signals({SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT});
  ProcessGroup group(signals.original_mask(), "");
  TimePoint start = dlock::util::monotonic_now();
  Supervisor supervisor(store,
                        dlock::hold::KeptLock{std::move(names), "token",
                                              dlock::lock::LockKind::exclusive(), policy.lease.ttl},
                        Watchdog(policy, start, start), group, signals);
  CommandSpec spec;
  spec.argv = {"/bin/sh", "-c", command};
  supervisor.start(spec);
  CommandEnd end = supervisor.wait_for_exit();
  auto took = std::chrono::duration_cast<Millis>(dlock::util::monotonic_now() - start);
  return Ran{end, supervisor.watchdog().stop_reason(),
             supervisor.watchdog().verdict(true).exit_code, took};
}

} // namespace

TEST(Supervisor, RenewsThroughTheStoreWhileTheCommandRuns)
{
  FakeStore store;
  Ran ran = supervise(store, "sleep 0.9; exit 3");
  EXPECT_EQ(ran.end.status, 3);
  EXPECT_EQ(ran.reason, StopReason::none);
  EXPECT_EQ(ran.exit_code, std::nullopt);
  EXPECT_GE(store.renewals.size(), 3u) << "a renewal every 200 ms for 900 ms";
}

TEST(Supervisor, ARefusedRenewalStopsTheCommandWellBeforeItWouldEnd)
{
  FakeStore store;
  store.answer = [](int n) { return FakeStore::held(n < 2); };
  Ran ran = supervise(store, "sleep 30");
  EXPECT_EQ(ran.reason, StopReason::lost);
  EXPECT_EQ(ran.end.signal, SIGTERM);
  EXPECT_EQ(ran.exit_code, static_cast<int>(dlock::ExitCode::lost));
  EXPECT_EQ(store.renewals.size(), 2u) << "no renewal after the loss";
  EXPECT_LT(ran.took, 5s);
}

TEST(Supervisor, SeveralKeysAreRenewedTogetherAndLosingOneIsLosingTheLock)
{
  FakeStore store;
  // Two keys: renewals 1 and 2 are the first round, 3 and 4 the second; the second key of the
  // second round is no longer held.
  store.answer = [](int n) { return FakeStore::held(n != 4); };
  Ran ran =
    supervise(store, "sleep 30", short_lease(), {LockName::parse("a"), LockName::parse("b")});
  EXPECT_EQ(ran.reason, StopReason::lost);
  EXPECT_EQ(ran.end.signal, SIGTERM);
  EXPECT_EQ(ran.exit_code, static_cast<int>(dlock::ExitCode::lost));
  EXPECT_EQ(store.renewals.size(), 4u) << "one request per key per round, none after the loss";
}

TEST(Supervisor, AStoreThatNeverAnswersGetsTheCommandKilledBeforeTheLeaseEnds)
{
  FakeStore store;
  store.answer = [](int) { return std::nullopt; };
  Ran ran = supervise(store, "trap '' TERM; while :; do sleep 0.05; done");
  EXPECT_EQ(ran.reason, StopReason::unconfirmed);
  EXPECT_EQ(ran.end.signal, SIGKILL);
  EXPECT_EQ(ran.exit_code, static_cast<int>(dlock::ExitCode::lost));
  EXPECT_GE(store.abandoned, 1) << "timed-out renewals are abandoned";
  EXPECT_GE(ran.took, 550ms - 50ms - 20ms) << "no earlier than the kill deadline";
  EXPECT_LT(ran.took, 5s);
}

TEST(Supervisor, FailedRenewalsAreRetriedAndTheRunSurvivesWhenOneIsConfirmed)
{
  FakeStore store;
  store.answer = [](int n) { return n % 2 == 1 ? FakeStore::failed() : FakeStore::held(true); };
  Ran ran = supervise(store, "sleep 1");
  EXPECT_EQ(ran.end.status, 0);
  EXPECT_EQ(ran.reason, StopReason::none);
  EXPECT_GE(store.renewals.size(), 4u);
}

#include "fake_clock.hpp"
#include "lock/lease.hpp"

#include <gtest/gtest.h>

using namespace std::chrono_literals;
using dlock::lock::Lease;
using dlock::lock::LeasePolicy;
using dlock::util::Millis;
using dlock::util::TimePoint;

namespace {

LeasePolicy policy(Millis ttl, Millis kill_after)
{
  LeasePolicy p;
  p.ttl = ttl;
  p.kill_after = kill_after;
  p.request_limit = 2s;
  return p;
}

} // namespace

TEST(Lease, RenewsEveryThirdOfTheTtl)
{
  FakeClock clock;
  Lease lease(policy(30s, 7500ms), clock.now());
  EXPECT_EQ(lease.next_renewal_at(), clock.now() + 10s);
  clock.advance(10s);
  lease.renewal_sent(clock.now());
  clock.advance(5ms);
  lease.renewal_confirmed();
  EXPECT_EQ(lease.next_renewal_at(), clock.now() - 5ms + 10s);
  EXPECT_EQ(lease.expires_at(), clock.now() - 5ms + 30s);
}

TEST(Lease, DeadlineCountsFromTheSendNotTheReply)
{
  FakeClock clock;
  TimePoint start = clock.now();
  Lease lease(policy(10s, 2500ms), start);
  clock.advance(3333ms);
  TimePoint sent = clock.now();
  lease.renewal_sent(sent);
  clock.advance(1500ms); // slow reply
  lease.renewal_confirmed();
  EXPECT_EQ(lease.expires_at(), sent + 10s);
}

TEST(Lease, KillsBeforeTheLastConfirmedLeaseCanExpire)
{
  FakeClock clock;
  TimePoint start = clock.now();
  LeasePolicy p = policy(10s, 2500ms);
  Lease lease(p, start);
  EXPECT_EQ(p.safety_margin(), 500ms);
  EXPECT_EQ(lease.kill_at(), start + 10s - 500ms);
  EXPECT_EQ(lease.terminate_at(), start + 10s - 500ms - 2500ms);
  // Every renewal fails: the deadlines stay put, retries come every ttl/10.
  clock.advance(3333ms);
  lease.renewal_sent(clock.now());
  clock.advance(p.request_timeout());
  lease.renewal_failed(clock.now());
  EXPECT_EQ(lease.next_renewal_at(), clock.now() + 1s);
  EXPECT_EQ(lease.kill_at(), start + 9500ms);
  EXPECT_LT(lease.kill_at(), lease.expires_at());
}

TEST(Lease, FailedRenewalDoesNotMoveDeadlineButSuccessDoes)
{
  FakeClock clock;
  TimePoint start = clock.now();
  Lease lease(policy(3s, 750ms), start);
  clock.advance(1s);
  lease.renewal_sent(clock.now());
  lease.renewal_failed(clock.now() + 100ms);
  EXPECT_EQ(lease.expires_at(), start + 3s);
  clock.advance(200ms);
  lease.renewal_sent(clock.now());
  lease.renewal_confirmed();
  EXPECT_EQ(lease.expires_at(), start + 1200ms + 3s);
}

TEST(Lease, ShortestTtlStillLeavesRoomForARetry)
{
  LeasePolicy p = policy(1s, 250ms);
  EXPECT_EQ(p.renew_interval(), 333ms);
  EXPECT_EQ(p.safety_margin(), 50ms);
  EXPECT_EQ(p.retry_interval(), 100ms);
  EXPECT_EQ(p.request_timeout(), 333ms);
  Lease lease(p, TimePoint{});
  // SIGTERM at 700ms: after the first renewal (333ms) and a retry have had their chance.
  EXPECT_EQ(lease.terminate_at() - TimePoint{}, 700ms);
}

TEST(Lease, OversizedKillAfterIsCapped)
{
  LeasePolicy p = policy(10s, 60s);
  // SIGTERM may not come before the first renewal was even due.
  EXPECT_EQ(p.effective_kill_after(), 10s - 3333ms - 500ms);
  Lease lease(p, TimePoint{});
  EXPECT_GE(lease.terminate_at(), lease.next_renewal_at());
}

TEST(Lease, RequestTimeoutIsBoundedByConnectTimeout)
{
  EXPECT_EQ(policy(30s, 1s).request_timeout(), 2s);
  EXPECT_EQ(policy(3s, 1s).request_timeout(), 1s);
}

TEST(Lease, StaleConfirmationNeverShortensTheLease)
{
  FakeClock clock;
  TimePoint start = clock.now();
  Lease lease(policy(9s, 1s), start);
  lease.renewal_confirmed(); // nothing in flight: ignored
  EXPECT_EQ(lease.expires_at(), start + 9s);
}

TEST(Lease, TheGuardsBackstopComesAfterDlockAndBeforeExpiry)
{
  for (auto ttl : {1000ms, 3000ms, 30'000ms}) {
    Lease lease(policy(ttl, ttl / 4), TimePoint{});
    EXPECT_GT(lease.backstop_terminate_at(), lease.terminate_at());
    EXPECT_GT(lease.backstop_kill_at(), lease.kill_at());
    EXPECT_LT(lease.backstop_kill_at(), lease.expires_at());
  }
}

// Redlock: the nodes' clocks may run apart by the drift, so the lease ends that much earlier
// for the holder (and everything that follows from the expiry moves with it).
TEST(Lease, ClockDriftShortensTheLeaseTheHolderCountsOn)
{
  FakeClock clock;
  LeasePolicy p = policy(10s, 2500ms);
  p.drift = 102ms;
  Lease lease(p, clock.now());
  EXPECT_EQ(lease.expires_at(), clock.now() + 10s - 102ms);
  EXPECT_EQ(lease.kill_at(), lease.expires_at() - p.safety_margin());
  EXPECT_EQ(lease.next_renewal_at(), clock.now() + p.renew_interval());
  EXPECT_LE(p.effective_kill_after(), 10s - 102ms - p.renew_interval() - p.safety_margin());
}

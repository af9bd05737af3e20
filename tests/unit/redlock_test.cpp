// RedlockStore's decisions, with nodes that answer at once as each test says: majorities,
// the release of a lock a majority did not grant, fencing, and the re-join of a node that
// lost the lock.
#include "stores/redis/redlock_store.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <memory>

using dlock::ExitCode;
using dlock::lock::AcquireRequest;
using dlock::lock::LockName;
using dlock::lock::Outcome;
using dlock::lock::RenewRequest;
using dlock::redis::RedlockStore;
using Op = Outcome::Op;
using namespace std::chrono_literals;

namespace {

// One node: answers each request with the next scripted outcome of its kind, and records
// what it was asked.
class ScriptedNode final : public dlock::redis::Node {
public:
  std::deque<Outcome> acquire_answers, renew_answers, release_answers;
  int acquires = 0, renews = 0, releases = 0, give_backs = 0;
  dlock::lock::LockStatus status_answer{};
  AcquireRequest last_acquire{};
  std::int64_t raised_to = 0;

  static Outcome granted(std::int64_t fence)
  {
    Outcome outcome{.op = Op::acquire};
    outcome.acquire.acquired = true;
    outcome.acquire.fence = fence;
    return outcome;
  }
  static Outcome refused(std::int64_t holder_pid)
  {
    Outcome outcome{.op = Op::acquire};
    outcome.acquire.holder.pid = holder_pid;
    outcome.acquire.holder_ttl = 5000ms;
    outcome.acquire.block = 5000ms;
    return outcome;
  }
  static Outcome failed(Op op)
  {
    return Outcome::of(op, dlock::Error(ExitCode::unavailable, "down"));
  }
  static Outcome renewed(bool held) { return Outcome::holding(Op::renew, held); }

  void start_acquire(const LockName&, const AcquireRequest& request) override
  {
    ++acquires;
    last_acquire = request;
    m_answers.answer(next(acquire_answers, granted(1)));
  }
  void start_wait_for_wake(const LockName&, const dlock::lock::WaitTicket&,
                           dlock::util::Millis) override
  {
    m_answers.answer(Outcome::of(Op::wait_for_wake));
  }
  void start_renew(const LockName&, const RenewRequest&) override
  {
    ++renews;
    m_answers.answer(next(renew_answers, renewed(true)));
  }
  void start_release(const LockName&, const std::string&) override
  {
    ++releases;
    m_answers.answer(next(release_answers, Outcome::holding(Op::release, true)));
  }
  void start_withdraw(const LockName&, const dlock::lock::WaitTicket&) override
  {
    m_answers.answer(Outcome::of(Op::withdraw));
  }
  void start_give_back(const LockName&, const std::string&) override
  {
    ++give_backs;
    m_answers.answer(Outcome::holding(Op::release, true));
  }
  void start_raise_fence(const LockName&, std::int64_t at_least) override
  {
    raised_to = at_least;
    m_answers.answer(Outcome::of(Op::raise_fence));
  }
  void watch(dlock::util::EventLoop&) override {}
  std::optional<Outcome> next_outcome() override { return m_answers.next(); }
  void abandon() noexcept override { m_answers.clear(); }
  dlock::Error timed_out() noexcept override
  {
    return dlock::Error(ExitCode::unavailable, "timed out");
  }
  const dlock::lock::StoreTraits& traits() const noexcept override
  {
    static const dlock::lock::StoreTraits traits{.name = "scripted node"};
    return traits;
  }
  dlock::lock::LockStatus status(const LockName&, dlock::util::TimePoint) override
  {
    return status_answer;
  }
  std::vector<dlock::lock::LockStatus> list(std::string_view, dlock::util::Millis) override
  {
    return {};
  }

private:
  static Outcome next(std::deque<Outcome>& answers, Outcome otherwise)
  {
    if (answers.empty()) {
      return otherwise;
    }
    Outcome outcome = answers.front();
    answers.pop_front();
    return outcome;
  }
  dlock::lock::OutcomeQueue m_answers;
};

struct Cluster {
  std::vector<ScriptedNode*> nodes;
  std::unique_ptr<RedlockStore> store;

  explicit Cluster(std::size_t n)
  {
    std::vector<std::unique_ptr<dlock::redis::Node>> owned;
    std::vector<std::string> names;
    for (std::size_t i = 0; i < n; ++i) {
      auto node = std::make_unique<ScriptedNode>();
      nodes.push_back(node.get());
      owned.push_back(std::move(node));
      names.push_back("node" + std::to_string(i));
    }
    store = std::make_unique<RedlockStore>(std::move(owned), std::move(names));
  }
  Outcome next()
  {
    std::optional<Outcome> outcome = store->next_outcome();
    EXPECT_TRUE(outcome.has_value());
    return outcome.value_or(Outcome{});
  }
};

LockName name() { return LockName::parse("k"); }

AcquireRequest request()
{
  AcquireRequest r;
  r.token = "t";
  r.ttl = 10s;
  return r;
}

} // namespace

TEST(Redlock, AMajorityGrantsTheLockWithTheLargestFenceAndLessThanTheTtl)
{
  Cluster c(5);
  c.nodes[0]->acquire_answers = {ScriptedNode::failed(Op::acquire)};
  c.nodes[1]->acquire_answers = {ScriptedNode::refused(7)};
  c.nodes[2]->acquire_answers = {ScriptedNode::granted(30)};
  c.nodes[3]->acquire_answers = {ScriptedNode::granted(40)};
  c.nodes[4]->acquire_answers = {ScriptedNode::granted(20)};
  c.store->start_acquire(name(), request());
  Outcome outcome = c.next();
  ASSERT_FALSE(outcome.error);
  EXPECT_TRUE(outcome.acquire.acquired);
  EXPECT_EQ(outcome.acquire.fence, 40);
  ASSERT_TRUE(outcome.acquire.validity);
  EXPECT_LE(*outcome.acquire.validity, 10s - c.store->traits().clock_drift(10s));
  EXPECT_EQ(c.store->traits().clock_drift(10s), 102ms); // 1% + 2 ms
  EXPECT_EQ(c.nodes[0]->releases, 0) << "a lock that is held is not given back";
  for (ScriptedNode* node : c.nodes) {
    EXPECT_EQ(node->raised_to, 40) << "every node learns the token a majority handed out";
  }
}

TEST(Redlock, AMinorityGrantIsGivenBackOnEveryNodeAndTheHolderReported)
{
  Cluster c(5);
  for (int i = 0; i < 3; ++i) {
    c.nodes[i]->acquire_answers = {ScriptedNode::refused(7)};
  }
  c.store->start_acquire(name(), request());
  Outcome outcome = c.next();
  ASSERT_FALSE(outcome.error);
  EXPECT_FALSE(outcome.acquire.acquired);
  EXPECT_EQ(outcome.acquire.holder.pid, 7);
  EXPECT_EQ(outcome.acquire.block, 5000ms) << "a holder with a majority: wait for its release";
  for (ScriptedNode* node : c.nodes) {
    EXPECT_EQ(node->give_backs, 1) << "given back at once (no --min-hold kept)";
  }
}

TEST(Redlock, ASplitBetweenContendersRetriesAfterAShortRandomPause)
{
  Cluster c(5);
  c.nodes[0]->acquire_answers = {ScriptedNode::refused(7)};
  c.nodes[1]->acquire_answers = {ScriptedNode::refused(7)};
  c.nodes[2]->acquire_answers = {ScriptedNode::refused(8)};
  c.store->start_acquire(name(), request());
  Outcome outcome = c.next();
  EXPECT_FALSE(outcome.acquire.acquired);
  EXPECT_GE(outcome.acquire.block, 10ms);
  EXPECT_LE(outcome.acquire.block, 100ms);
}

TEST(Redlock, NoMajorityAnsweringIsUnavailable)
{
  Cluster c(5);
  for (int i = 0; i < 3; ++i) {
    c.nodes[i]->acquire_answers = {ScriptedNode::failed(Op::acquire)};
  }
  c.store->start_acquire(name(), request());
  Outcome outcome = c.next();
  ASSERT_TRUE(outcome.error);
  EXPECT_EQ(outcome.error->code(), ExitCode::unavailable);
  EXPECT_NE(std::string(outcome.error->what()).find("2 of 5 granted"), std::string::npos)
    << outcome.error->what();
  for (ScriptedNode* node : c.nodes) {
    EXPECT_EQ(node->give_backs, 1) << "a node that failed may have taken it: given back too";
  }
}

TEST(Redlock, ManyAttemptsDecidedAtOnceEachGiveBackTheirMinorityGrant)
{
  // Each decision starts a release while the decisions are gone through (a loaded machine
  // collects many answers at once): the list of requests grows under that walk.
  constexpr int attempts = 64;
  Cluster c(5);
  for (int i = 2; i < 5; ++i) {
    for (int a = 0; a < attempts; ++a) {
      c.nodes[i]->acquire_answers.push_back(ScriptedNode::refused(7));
    }
  }
  for (int a = 0; a < attempts; ++a) {
    c.store->start_acquire(name(), request());
  }
  for (int a = 0; a < attempts; ++a) {
    Outcome outcome = c.next();
    ASSERT_FALSE(outcome.error);
    EXPECT_FALSE(outcome.acquire.acquired);
  }
  for (ScriptedNode* node : c.nodes) {
    EXPECT_EQ(node->give_backs, attempts) << "each attempt's grant given back";
  }
}

TEST(Redlock, ARenewalAMajorityExtendsIsConfirmedAndANodeThatLostTheLockRejoins)
{
  Cluster c(5);
  c.store->start_acquire(name(), request());
  ASSERT_TRUE(c.next().acquire.acquired);
  c.nodes[4]->renew_answers = {ScriptedNode::renewed(false)}; // restarted without the lock
  c.nodes[3]->renew_answers = {ScriptedNode::failed(Op::renew)};
  c.store->start_renew(name(), RenewRequest{"t", std::nullopt, false, {}});
  Outcome outcome = c.next();
  ASSERT_FALSE(outcome.error);
  EXPECT_TRUE(outcome.held);
  EXPECT_EQ(c.nodes[4]->acquires, 2) << "re-joined with the same token";
  EXPECT_EQ(c.nodes[3]->acquires, 1) << "a node that did not answer is not asked again yet";
  EXPECT_EQ(c.nodes[0]->acquires, 1);
}

TEST(Redlock, ARenewalAMajorityRefusesIsALostLeaseAndNoMajorityIsUnconfirmed)
{
  Cluster lost(5);
  for (int i = 0; i < 3; ++i) {
    lost.nodes[i]->renew_answers = {ScriptedNode::renewed(false)};
  }
  lost.store->start_renew(name(), RenewRequest{"t", 10s, false, {}});
  Outcome outcome = lost.next();
  ASSERT_FALSE(outcome.error);
  EXPECT_FALSE(outcome.held);

  Cluster unconfirmed(5);
  for (int i = 0; i < 2; ++i) {
    unconfirmed.nodes[i]->renew_answers = {ScriptedNode::renewed(false)};
  }
  unconfirmed.nodes[2]->renew_answers = {ScriptedNode::failed(Op::renew)};
  unconfirmed.store->start_renew(name(), RenewRequest{"t", 10s, false, {}});
  outcome = unconfirmed.next();
  ASSERT_TRUE(outcome.error) << "2 extended, 2 lost, 1 failed: neither way a majority";
  EXPECT_EQ(outcome.error->code(), ExitCode::unavailable);
}

TEST(Redlock, PerNodeTimeoutIsSmallAgainstTheTtl)
{
  EXPECT_EQ(RedlockStore::node_timeout(10s), 200ms);
  EXPECT_EQ(RedlockStore::node_timeout(1s), 50ms);
  EXPECT_EQ(RedlockStore::node_timeout(1h), 500ms);
  EXPECT_FALSE(Cluster(3).store->traits().features.has(dlock::lock::Feature::fair));
  EXPECT_TRUE(Cluster(3).store->traits().features.has(dlock::lock::Feature::detached));
  // Wait, barrier and latch are refused before any node is asked: no coordination at all.
  EXPECT_EQ(Cluster(3).store->coordination(), nullptr);
  EXPECT_EQ(Cluster(5).store->quorum(), 3u);
  EXPECT_EQ(Cluster(4).store->quorum(), 3u);
}

TEST(Redlock, ARenewalAMajorityRefusesForAReplacerNamesItAndRejoinsNothing)
{
  Cluster c(5);
  c.store->start_acquire(name(), request());
  ASSERT_TRUE(c.next().acquire.acquired);
  for (int i = 0; i < 3; ++i) {
    Outcome replaced = ScriptedNode::renewed(false);
    dlock::lock::HolderInfo replacer;
    replacer.note = "take over";
    replaced.replaced_by = replacer;
    c.nodes[i]->renew_answers = {replaced};
  }
  c.store->start_renew(name(), RenewRequest{"t", std::nullopt, false, {}});
  Outcome outcome = c.next();
  ASSERT_FALSE(outcome.error);
  EXPECT_FALSE(outcome.held);
  ASSERT_TRUE(outcome.replaced_by.has_value());
  EXPECT_EQ(outcome.replaced_by->note, "take over");
  for (ScriptedNode* node : c.nodes) {
    EXPECT_EQ(node->acquires, 1) << "nothing re-joined";
  }
}

TEST(Redlock, AReleaseAMajorityKeepsForMinHoldReportsTheSoonestEnd)
{
  Cluster c(5);
  c.store->start_acquire(name(), request());
  ASSERT_TRUE(c.next().acquire.acquired);
  const dlock::util::Millis kept[] = {3000ms, 2000ms, 2500ms};
  for (int i = 0; i < 3; ++i) {
    Outcome outcome = Outcome::holding(Op::release, true);
    outcome.kept_for = kept[i];
    c.nodes[i]->release_answers = {outcome};
  }
  c.store->start_release(name(), "t");
  Outcome outcome = c.next();
  ASSERT_FALSE(outcome.error);
  EXPECT_TRUE(outcome.held);
  EXPECT_EQ(outcome.kept_for, 2000ms);

  Cluster minority(5);
  Outcome one = Outcome::holding(Op::release, true);
  one.kept_for = 3000ms;
  minority.nodes[0]->release_answers = {one};
  minority.store->start_release(name(), "t");
  EXPECT_EQ(minority.next().kept_for, 0ms) << "kept by a minority only: free";
}

TEST(Redlock, StatusShowsALockDelayOnlyWhileAMajorityRefuses)
{
  Cluster c(5);
  const std::int64_t delays[] = {4000, 3000, 2000, 1000, 0};
  for (int i = 0; i < 5; ++i) {
    c.nodes[i]->status_answer.delay_ms = delays[i];
    c.nodes[i]->status_answer.holder.pid = 7;
  }
  dlock::lock::LockStatus status = c.store->status(name(), dlock::util::deadline_after(1s));
  EXPECT_FALSE(status.held);
  EXPECT_EQ(status.delay_ms, 2000) << "free once three nodes' delays are over";
  EXPECT_EQ(status.holder.pid, 7);
  c.nodes[0]->status_answer.delay_ms = 0;
  c.nodes[1]->status_answer.delay_ms = 0;
  EXPECT_EQ(c.store->status(name(), dlock::util::deadline_after(1s)).delay_ms, 0);
}

TEST(Redlock, ANodeRejoinedAsksNoHolderToStandDownButKeepsTheMinHold)
{
  Cluster c(5);
  AcquireRequest asked = request();
  asked.policy.replace = true;
  asked.policy.min_hold = 60s;
  c.store->start_acquire(name(), asked);
  ASSERT_TRUE(c.next().acquire.acquired);
  c.nodes[4]->renew_answers = {ScriptedNode::renewed(false)};
  c.store->start_renew(name(), RenewRequest{"t", std::nullopt, false, {}});
  EXPECT_TRUE(c.next().held);
  ASSERT_EQ(c.nodes[4]->acquires, 2);
  EXPECT_FALSE(c.nodes[4]->last_acquire.policy.replace);
  EXPECT_EQ(c.nodes[4]->last_acquire.policy.min_hold, 60s);
}

#include "lock/outcome_queue.hpp"

#include <gtest/gtest.h>

using dlock::lock::Outcome;
using dlock::lock::OutcomeQueue;
using Op = Outcome::Op;

TEST(OutcomeQueue, AnswersComeOutOldestFirstAndAbandonForgetsThem)
{
  OutcomeQueue queue;
  EXPECT_TRUE(queue.empty());
  EXPECT_FALSE(queue.next());
  queue.answer(Op::acquire);
  queue.answer(Outcome::holding(Op::renew, true));
  queue.answer(Op::release, dlock::Error(dlock::ExitCode::unavailable, "down"));
  std::optional<Outcome> first = queue.next();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->op, Op::acquire);
  EXPECT_FALSE(first->error);
  std::optional<Outcome> second = queue.next();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->op, Op::renew);
  EXPECT_TRUE(second->held);
  queue.clear();
  EXPECT_TRUE(queue.empty());
  EXPECT_FALSE(queue.next());
}

TEST(OutcomeQueue, ALoopWakesAtOnceWhileAnAnswerIsReady)
{
  using namespace std::chrono_literals;
  OutcomeQueue queue;
  queue.answer(Op::withdraw);
  dlock::util::EventLoop loop;
  queue.watch(loop);
  loop.wake_at(dlock::util::monotonic_now() + 10s);
  auto start = dlock::util::monotonic_now();
  loop.wait();
  EXPECT_LT(dlock::util::monotonic_now() - start, 5s);
}

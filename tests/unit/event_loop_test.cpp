#include "util/event_loop.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

using namespace std::chrono_literals;
using dlock::util::EventLoop;
using dlock::util::monotonic_now;

TEST(EventLoop, WakesAtTheEarliestTimeGivenAndNeverBefore)
{
  EventLoop loop;
  auto start = monotonic_now();
  loop.wake_at(start + 200ms);
  loop.wake_at(start + 30ms);
  EXPECT_FALSE(loop.wait());
  auto waited = monotonic_now() - start;
  EXPECT_GE(waited, 30ms);
  EXPECT_LT(waited, 200ms);
}

TEST(EventLoop, RunsTheHandlersOfReadyDescriptorsOnly)
{
  int quiet[2];
  int busy[2];
  ASSERT_EQ(::pipe(quiet), 0);
  ASSERT_EQ(::pipe(busy), 0);
  ASSERT_EQ(::write(busy[1], "x", 1), 1);
  EventLoop loop;
  int quiet_calls = 0;
  short busy_events = 0;
  loop.watch(quiet[0], POLLIN, [&](short) { ++quiet_calls; });
  loop.watch(busy[0], POLLIN, [&](short revents) { busy_events = revents; });
  loop.watch(-1, POLLIN, [&](short) { ADD_FAILURE() << "watched a closed descriptor"; });
  loop.wake_at(monotonic_now() + 5s);
  EXPECT_TRUE(loop.wait());
  EXPECT_EQ(quiet_calls, 0);
  EXPECT_TRUE((busy_events & POLLIN) != 0);
  // Watches last one round: the next wait sees nothing of them.
  loop.wake_at(monotonic_now());
  EXPECT_FALSE(loop.wait());
  for (int fd : {quiet[0], quiet[1], busy[0], busy[1]}) {
    ::close(fd);
  }
}

TEST(EventLoop, RunUntilStopsWhenDoneOrAtTheDeadline)
{
  int rounds = 0;
  auto done_at_third = [&] { return ++rounds >= 3; };
  auto nothing = [](EventLoop& loop) { loop.wake_at(monotonic_now()); };
  EXPECT_TRUE(dlock::util::run_until(monotonic_now() + 10s, done_at_third, nothing));
  EXPECT_EQ(rounds, 3);
  auto start = monotonic_now();
  EXPECT_FALSE(dlock::util::run_until(
    start + 20ms, [] { return false; }, [](EventLoop&) {}));
  EXPECT_GE(monotonic_now() - start, 20ms);
}

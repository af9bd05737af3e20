// The file store's leader gate (dlock leader --watch) against a real directory: the term is the
// holder record's fencing token, a candidate's record wakes the watcher, a release wakes it, and
// a flock without a record (flock(1)) counts once it lasted its grace.
#include "stores/file/file_store.hpp"

#include "lock/name.hpp"
#include "util/event_loop.hpp"
#include "util/fd.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace dlock::file {
namespace {

using util::Millis;

class FileLeader : public ::testing::Test {
protected:
  void SetUp() override
  {
    char pattern[] = "/tmp/dlock-leader-test.XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    m_dir = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(m_dir); }

  // The next answer of store, waiting for it (its inotify wake-ups included) up to 10 s: a bound
  // on a failure only, the answers come in milliseconds.
  static std::optional<lock::Outcome> next(FileStore& store)
  {
    std::optional<lock::Outcome> got;
    util::run_until(
      util::deadline_after(Millis(10'000)),
      [&] {
        got = store.next_outcome();
        return got.has_value();
      },
      [&](util::EventLoop& loop) { store.watch(loop); });
    return got;
  }

  static lock::GateResult look(FileStore& store, const lock::LockName& name, std::int64_t since)
  {
    lock::GateRequest request;
    request.ticket.mode = lock::WaitMode::leader;
    request.ticket.since = since;
    request.ticket.waiter_id = "watcher";
    store.start_gate(name, request);
    std::optional<lock::Outcome> answer = next(store);
    EXPECT_TRUE(answer && !answer->error);
    return answer ? answer->gate : lock::GateResult{};
  }

  // Whether a wait of 300 ms at store's leader gate, with nothing happening, ended sooner.
  static bool quiet_wake(FileStore& store, const lock::LockName& name)
  {
    lock::WaitTicket ticket;
    ticket.mode = lock::WaitMode::leader;
    util::TimePoint start = util::monotonic_now();
    store.start_wait_for_wake(name, ticket, Millis(300));
    EXPECT_TRUE(next(store));
    return util::monotonic_now() - start < Millis(250);
  }

  static lock::AcquireRequest candidate(std::string token, std::string value)
  {
    lock::AcquireRequest request;
    request.token = std::move(token);
    request.holder = lock::HolderInfo::current("daemon");
    request.holder.value = std::move(value);
    request.ticket.mode = lock::WaitMode::once;
    return request;
  }

  std::string m_dir;
};

TEST_F(FileLeader, TermIsTheFenceAndACandidateOrAReleaseWakesTheWatcher)
{
  const lock::LockName name = lock::LockName::parse("svc");
  FileStore holder(m_dir);
  FileStore watcher(m_dir);

  lock::GateResult free = look(watcher, name, 0);
  EXPECT_FALSE(free.open); // nobody leads, as seen
  EXPECT_EQ(free.since, 0);

  // Waiting; the candidate's acquisition wakes it (the record's arrival), well before the block.
  lock::WaitTicket ticket;
  ticket.mode = lock::WaitMode::leader;
  watcher.start_wait_for_wake(name, ticket, Millis(20'000));
  holder.start_acquire(name, candidate("token-a-0123456789", "10.0.0.1:80"));
  std::optional<lock::Outcome> taken = next(holder);
  ASSERT_TRUE(taken && taken->acquire.acquired);
  ASSERT_GT(taken->acquire.fence, 0);
  util::TimePoint asked = util::monotonic_now();
  std::optional<lock::Outcome> woken = next(watcher);
  ASSERT_TRUE(woken);
  EXPECT_EQ(woken->op, lock::Outcome::Op::wait_for_wake);
  EXPECT_LT(util::monotonic_now() - asked, Millis(15'000)); // not the 20 s block

  lock::GateResult led = look(watcher, name, 0);
  EXPECT_TRUE(led.open);
  EXPECT_EQ(led.since, taken->acquire.fence);
  EXPECT_EQ(led.lock.holder.value, "10.0.0.1:80");
  EXPECT_EQ(watcher.status(name, util::deadline_after(Millis(1000))).holder.value, "10.0.0.1:80");

  lock::GateResult same = look(watcher, name, led.since);
  EXPECT_FALSE(same.open);
  EXPECT_EQ(same.since, led.since);
  // Nothing changes: its own looks do not wake it (the block runs out).
  EXPECT_FALSE(quiet_wake(watcher, name));

  // The release wakes it; the term becomes 0 (after the one more look a close may need).
  watcher.start_wait_for_wake(name, ticket, Millis(20'000));
  holder.start_release(name, "token-a-0123456789");
  ASSERT_TRUE(next(holder));
  ASSERT_TRUE(next(watcher));
  lock::GateResult after = look(watcher, name, led.since);
  for (int i = 0; i < 50 && !after.open; ++i) {
    watcher.start_wait_for_wake(name, ticket, after.block);
    ASSERT_TRUE(next(watcher));
    after = look(watcher, name, led.since);
  }
  EXPECT_TRUE(after.open);
  EXPECT_EQ(after.since, 0);
}

TEST_F(FileLeader, AFlockWithoutARecordLeadsOnceItLastedItsGrace)
{
  const lock::LockName name = lock::LockName::parse("svc");
  FileStore watcher(m_dir);
  EXPECT_FALSE(look(watcher, name, 0).open); // makes nothing: the directory is not there yet
  EXPECT_FALSE(std::filesystem::exists(m_dir + "/.dlock"));
  FileStore maker(m_dir);
  maker.start_acquire(name, candidate("token-b-0123456789", "b"));
  ASSERT_TRUE(next(maker) && !maker.status(name, {}).holder.value.empty());
  maker.start_release(name, "token-b-0123456789");
  ASSERT_TRUE(next(maker));

  // flock(1): the lock file locked, no record
  util::UniqueFd fd(::open((m_dir + "/svc").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd);
  ASSERT_EQ(::flock(fd.get(), LOCK_EX | LOCK_NB), 0);
  lock::GateResult first = look(watcher, name, 0);
  EXPECT_FALSE(first.open); // maybe a dlock whose record is on its way
  EXPECT_EQ(first.since, 0);
  EXPECT_LE(first.block, Millis(1'000));
  lock::WaitTicket ticket;
  ticket.mode = lock::WaitMode::leader;
  lock::GateResult later = first;
  for (int i = 0; i < 10 && !later.open; ++i) {
    watcher.start_wait_for_wake(name, ticket, later.block);
    ASSERT_TRUE(next(watcher));
    later = look(watcher, name, 0);
  }
  EXPECT_TRUE(later.open);
  EXPECT_GT(later.since, 0);
  EXPECT_TRUE(later.lock.holder.value.empty());
  EXPECT_EQ(later.lock.holder.pid, ::getpid());
  EXPECT_FALSE(look(watcher, name, later.since).open); // the same holder: the same term
  EXPECT_FALSE(quiet_wake(watcher, name));
}

} // namespace
} // namespace dlock::file

#pragma once

#include "lock/outcome_queue.hpp"

#include <poll.h>
#include <unistd.h>

#include <functional>
#include <vector>

// A lock store in memory, for unit tests of what drives lock::Store: every renewal is
// recorded with its time and answered at once as `answer` says (nullopt: never answered);
// attempts to take a lock or pass a gate, and waits for a wake-up, likewise.
class FakeStore final : public dlock::lock::Store, public dlock::lock::Coordination {
public:
  using Outcome = dlock::lock::Outcome;
  // Decides the answer to the nth renewal (from 1).
  std::function<std::optional<Outcome>(int n)> answer = [](int) {
    return Outcome::holding(Outcome::Op::renew, true);
  };
  // Decide the answers to the nth attempt to take a lock, to pass a gate, to wait for a
  // wake-up (woken), and to withdraw; default: taken, open, woken, withdrawn.
  std::function<std::optional<Outcome>(int n)> acquire_answer = [](int) { return taken(1); };
  std::function<std::optional<Outcome>(int n)> gate_answer = [](int) {
    Outcome outcome{.op = Outcome::Op::gate};
    outcome.gate.open = true;
    return outcome;
  };
  std::function<std::optional<Outcome>(int n)> wake_answer = [](int) {
    return Outcome::of(Outcome::Op::wait_for_wake);
  };
  std::function<Outcome(int n)> withdraw_answer = [](int) {
    return Outcome::of(Outcome::Op::withdraw);
  };
  // The time requests are recorded with (a FakeClock's, in the tests of hold/).
  std::function<dlock::util::TimePoint()> clock = [] { return dlock::util::monotonic_now(); };
  std::vector<dlock::util::TimePoint> renewals;
  std::vector<dlock::util::TimePoint> attempts; // acquire and gate, in order
  std::vector<dlock::lock::WaitTicket> tickets; // each attempt's
  std::vector<dlock::util::TimePoint> wake_waits;
  int withdrawals = 0;
  int releases = 0;
  int abandoned = 0;

  static Outcome taken(std::int64_t fence)
  {
    dlock::lock::AcquireResult result;
    result.acquired = true;
    result.fence = fence;
    return Outcome{.op = Outcome::Op::acquire, .acquire = result};
  }
  // Held by someone else for another ttl_ms; block: how long to wait for a wake-up.
  static Outcome busy(std::int64_t ttl_ms, dlock::util::Millis block)
  {
    dlock::lock::AcquireResult result;
    result.holder_ttl = dlock::util::Millis(ttl_ms);
    result.holder.user = "someone";
    result.holder.host = "elsewhere";
    result.holder.pid = 42;
    result.block = block;
    return Outcome{.op = Outcome::Op::acquire, .acquire = result};
  }
  static Outcome down(Outcome::Op op)
  {
    return Outcome::of(op, dlock::Error(dlock::ExitCode::unavailable, "fake: down"));
  }

  static Outcome held(bool yes) { return Outcome::holding(Outcome::Op::renew, yes); }
  static Outcome failed()
  {
    return Outcome::of(Outcome::Op::renew,
                       dlock::Error(dlock::ExitCode::unavailable, "fake: down"));
  }

  void start_acquire(const dlock::lock::LockName&,
                     const dlock::lock::AcquireRequest& request) override
  {
    attempts.push_back(clock());
    tickets.push_back(request.ticket);
    push(acquire_answer(static_cast<int>(attempts.size())));
  }
  void start_wait_for_wake(const dlock::lock::LockName&, const dlock::lock::WaitTicket&,
                           dlock::util::Millis) override
  {
    wake_waits.push_back(clock());
    push(wake_answer(static_cast<int>(wake_waits.size())));
  }
  void start_renew(const dlock::lock::LockName&, const dlock::lock::RenewRequest&) override
  {
    renewals.push_back(clock());
    if (std::optional<Outcome> outcome = answer(static_cast<int>(renewals.size()))) {
      m_answers.answer(*outcome);
    }
  }
  void start_release(const dlock::lock::LockName&, const std::string&) override
  {
    ++releases;
    m_answers.answer(Outcome::holding(Outcome::Op::release, true));
  }
  void start_withdraw(const dlock::lock::LockName&, const dlock::lock::WaitTicket&) override
  {
    m_answers.answer(withdraw_answer(++withdrawals));
  }
  dlock::lock::Coordination* coordination() noexcept override { return this; }
  void start_gate(const dlock::lock::LockName&, const dlock::lock::GateRequest& request) override
  {
    attempts.push_back(clock());
    tickets.push_back(request.ticket);
    push(gate_answer(static_cast<int>(attempts.size())));
  }
  void start_set_latch(const dlock::lock::LockName&, std::int64_t, dlock::util::Millis) override
  {
    m_answers.answer(Outcome::of(Outcome::Op::set_latch));
  }
  void start_count_down(const dlock::lock::LockName&) override
  {
    m_answers.answer(Outcome::of(Outcome::Op::count_down));
  }
  // Outcomes ready make the loop's wait return at once, as a readable socket would (a
  // readable descriptor, not a wake-up time, so that a FakeClock does not move past them).
  void watch(dlock::util::EventLoop& loop) override
  {
    if (!m_answers.empty()) {
      loop.watch(m_always_ready.fd(), POLLIN, [](short) {});
    }
  }
  std::optional<Outcome> next_outcome() override { return m_answers.next(); }
  void abandon() noexcept override
  {
    ++abandoned;
    m_answers.clear();
  }
  dlock::Error timed_out() noexcept override
  {
    abandon();
    return dlock::Error(dlock::ExitCode::unavailable, "fake: timed out");
  }
  const dlock::lock::StoreTraits& traits() const noexcept override
  {
    using dlock::lock::Feature;
    static const dlock::lock::StoreTraits traits{
      .name = "fake",
      .features = {Feature::fair, Feature::shared, Feature::limit, Feature::coordinate,
                   Feature::detached, Feature::replicas},
    };
    return traits;
  }
  dlock::lock::LockStatus status(const dlock::lock::LockName& name, dlock::util::TimePoint) override
  {
    dlock::lock::LockStatus status;
    status.name = name.str();
    return status;
  }
  std::vector<dlock::lock::LockStatus> list(std::string_view, dlock::util::Millis) override
  {
    return {};
  }

private:
  void push(std::optional<Outcome> outcome)
  {
    if (outcome) {
      m_answers.answer(std::move(*outcome));
    }
  }

  // A pipe with a byte in it: readable for good.
  struct AlwaysReady {
    int fds[2] = {-1, -1};
    AlwaysReady()
    {
      if (::pipe(fds) == 0) {
        (void)!::write(fds[1], "x", 1);
      }
    }
    ~AlwaysReady()
    {
      ::close(fds[0]);
      ::close(fds[1]);
    }
    AlwaysReady(const AlwaysReady&) = delete;
    AlwaysReady& operator=(const AlwaysReady&) = delete;
    int fd() const { return fds[0]; }
  };

  dlock::lock::OutcomeQueue m_answers;
  AlwaysReady m_always_ready;
};

#pragma once

#include "lock/store.hpp"

#include <unistd.h>

#include <deque>
#include <functional>
#include <vector>

// A lock store in memory, for unit tests of what drives lock::Store: every renewal is
// recorded with its time and answered at once as `answer` says (nullopt: never answered);
// attempts to take a lock or pass a gate, and waits for a wake-up, likewise.
class FakeStore final : public dlock::lock::Store {
public:
  using Outcome = dlock::lock::Outcome;
  // Decides the answer to the nth renewal (from 1).
  std::function<std::optional<Outcome>(int n)> answer = [](int) {
    return Outcome{Outcome::Op::renew, std::nullopt, true, {}, {}};
  };
  // Decide the answers to the nth attempt to take a lock, to pass a gate, to wait for a
  // wake-up (woken), and to withdraw; default: taken, open, woken, withdrawn.
  std::function<std::optional<Outcome>(int n)> acquire_answer = [](int) { return taken(1); };
  std::function<std::optional<Outcome>(int n)> gate_answer = [](int) {
    Outcome outcome{Outcome::Op::gate, std::nullopt, false, {}, {}};
    outcome.gate.open = true;
    return outcome;
  };
  std::function<std::optional<Outcome>(int n)> wake_answer = [](int) {
    return Outcome{Outcome::Op::wait_for_wake, std::nullopt, false, {}, {}};
  };
  std::function<Outcome(int n)> withdraw_answer = [](int) {
    return Outcome{Outcome::Op::withdraw, std::nullopt, false, {}, {}};
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
    return Outcome{Outcome::Op::acquire, std::nullopt, false, result, {}};
  }
  // Held by someone else for another ttl_ms; block: how long to wait for a wake-up.
  static Outcome busy(std::int64_t ttl_ms, dlock::util::Millis block)
  {
    dlock::lock::AcquireResult result;
    result.holder_ttl_ms = ttl_ms;
    result.holder.user = "someone";
    result.holder.host = "elsewhere";
    result.holder.pid = 42;
    result.block = block;
    return Outcome{Outcome::Op::acquire, std::nullopt, false, result, {}};
  }
  static Outcome down(Outcome::Op op)
  {
    return Outcome{op, dlock::Error(dlock::ExitCode::unavailable, "fake: down"), false, {}, {}};
  }

  static Outcome held(bool yes) { return Outcome{Outcome::Op::renew, std::nullopt, yes, {}, {}}; }
  static Outcome failed()
  {
    return Outcome{Outcome::Op::renew, dlock::Error(dlock::ExitCode::unavailable, "fake: down"),
                   false, {}, {}};
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
      m_ready.push_back(*outcome);
    }
  }
  void start_release(const dlock::lock::LockName&, const std::string&) override
  {
    ++releases;
    m_ready.push_back(Outcome{Outcome::Op::release, std::nullopt, true, {}, {}});
  }
  void start_withdraw(const dlock::lock::LockName&, const dlock::lock::WaitTicket&) override
  {
    m_ready.push_back(withdraw_answer(++withdrawals));
  }
  void start_raise_fence(const dlock::lock::LockName&, std::int64_t) override
  {
    m_ready.push_back(Outcome{Outcome::Op::raise_fence, std::nullopt, false, {}, {}});
  }
  void start_gate(const dlock::lock::LockName&, const dlock::lock::GateRequest& request) override
  {
    attempts.push_back(clock());
    tickets.push_back(request.ticket);
    push(gate_answer(static_cast<int>(attempts.size())));
  }
  void start_set_latch(const dlock::lock::LockName&, std::int64_t, dlock::util::Millis) override
  {
    m_ready.push_back(Outcome{Outcome::Op::set_latch, std::nullopt, false, {}, {}});
  }
  void start_count_down(const dlock::lock::LockName&) override
  {
    m_ready.push_back(Outcome{Outcome::Op::count_down, std::nullopt, false, {}, {}});
  }
  // Outcomes ready make the loop's wait return at once, as a readable socket would.
  void watch(dlock::util::EventLoop& loop) override
  {
    if (!m_ready.empty()) {
      loop.watch(m_always_ready.fd(), POLLIN, [](short) {});
    }
  }
  std::optional<Outcome> next_outcome() override
  {
    if (m_ready.empty()) {
      return std::nullopt;
    }
    Outcome outcome = m_ready.front();
    m_ready.pop_front();
    return outcome;
  }
  void abandon() noexcept override
  {
    ++abandoned;
    m_ready.clear();
  }
  dlock::Error timed_out() noexcept override
  {
    abandon();
    return dlock::Error(dlock::ExitCode::unavailable, "fake: timed out");
  }
  void limit_blocking(dlock::util::Millis) noexcept override {}
  std::string store_name() const override { return "fake"; }
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
      m_ready.push_back(std::move(*outcome));
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
    int fd() const { return fds[0]; }
  };

  std::deque<Outcome> m_ready;
  AlwaysReady m_always_ready;
};

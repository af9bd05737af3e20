#pragma once

#include "lock/store.hpp"

#include <deque>
#include <functional>
#include <vector>

// A lock store in memory, for unit tests of what drives lock::Store: every renewal is
// recorded with its time and answered at once as `answer` says (nullopt: never answered).
class FakeStore final : public dlock::lock::Store {
public:
  using Outcome = dlock::lock::Outcome;
  // Decides the answer to the nth renewal (from 1).
  std::function<std::optional<Outcome>(int n)> answer = [](int) {
    return Outcome{Outcome::Op::renew, std::nullopt, true, {}, {}};
  };
  std::vector<dlock::util::TimePoint> renewals;
  int abandoned = 0;

  static Outcome held(bool yes) { return Outcome{Outcome::Op::renew, std::nullopt, yes, {}, {}}; }
  static Outcome failed()
  {
    return Outcome{Outcome::Op::renew, dlock::Error(dlock::ExitCode::unavailable, "fake: down"),
                   false, {}, {}};
  }

  void start_acquire(const dlock::lock::LockName&, const dlock::lock::AcquireRequest&) override
  {
    dlock::lock::AcquireResult result;
    result.acquired = true;
    result.fence = 1;
    m_ready.push_back(Outcome{Outcome::Op::acquire, std::nullopt, false, result, {}});
  }
  void start_wait_for_wake(const dlock::lock::LockName&, const dlock::lock::WaitTicket&,
                           dlock::util::Millis) override
  {
    m_ready.push_back(Outcome{Outcome::Op::wait_for_wake, std::nullopt, false, {}, {}});
  }
  void start_renew(const dlock::lock::LockName&, const dlock::lock::RenewRequest&) override
  {
    renewals.push_back(dlock::util::monotonic_now());
    if (std::optional<Outcome> outcome = answer(static_cast<int>(renewals.size()))) {
      m_ready.push_back(*outcome);
    }
  }
  void start_release(const dlock::lock::LockName&, const std::string&) override
  {
    m_ready.push_back(Outcome{Outcome::Op::release, std::nullopt, true, {}, {}});
  }
  void start_withdraw(const dlock::lock::LockName&, const dlock::lock::WaitTicket&) override
  {
    m_ready.push_back(Outcome{Outcome::Op::withdraw, std::nullopt, false, {}, {}});
  }
  void start_raise_fence(const dlock::lock::LockName&, std::int64_t) override
  {
    m_ready.push_back(Outcome{Outcome::Op::raise_fence, std::nullopt, false, {}, {}});
  }
  void start_gate(const dlock::lock::LockName&, const dlock::lock::GateRequest&) override
  {
    Outcome outcome{Outcome::Op::gate, std::nullopt, false, {}, {}};
    outcome.gate.open = true;
    m_ready.push_back(outcome);
  }
  void start_set_latch(const dlock::lock::LockName&, std::int64_t, dlock::util::Millis) override
  {
    m_ready.push_back(Outcome{Outcome::Op::set_latch, std::nullopt, false, {}, {}});
  }
  void start_count_down(const dlock::lock::LockName&) override
  {
    m_ready.push_back(Outcome{Outcome::Op::count_down, std::nullopt, false, {}, {}});
  }
  void watch(dlock::util::EventLoop&) override {}
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
  std::deque<Outcome> m_ready;
};

#pragma once

#include "lock/outcome_queue.hpp"

#include <functional>
#include <vector>

// A lock store in memory, for unit tests of what drives lock::Store: every renewal is
// recorded with its time and answered at once as `answer` says (nullopt: never answered).
class FakeStore final : public dlock::lock::Store, public dlock::lock::Coordination {
public:
  using Outcome = dlock::lock::Outcome;
  // Decides the answer to the nth renewal (from 1).
  std::function<std::optional<Outcome>(int n)> answer = [](int) {
    return Outcome::holding(Outcome::Op::renew, true);
  };
  std::vector<dlock::util::TimePoint> renewals;
  int abandoned = 0;

  static Outcome held(bool yes) { return Outcome::holding(Outcome::Op::renew, yes); }
  static Outcome failed()
  {
    return Outcome::of(Outcome::Op::renew, dlock::Error(dlock::ExitCode::unavailable, "fake: down"));
  }

  void start_acquire(const dlock::lock::LockName&, const dlock::lock::AcquireRequest&) override
  {
    dlock::lock::AcquireResult result;
    result.acquired = true;
    result.fence = 1;
    m_answers.answer(Outcome{.op = Outcome::Op::acquire, .acquire = result});
  }
  void start_wait_for_wake(const dlock::lock::LockName&, const dlock::lock::WaitTicket&,
                           dlock::util::Millis) override
  {
    m_answers.answer(Outcome::of(Outcome::Op::wait_for_wake));
  }
  void start_renew(const dlock::lock::LockName&, const dlock::lock::RenewRequest&) override
  {
    renewals.push_back(dlock::util::monotonic_now());
    if (std::optional<Outcome> outcome = answer(static_cast<int>(renewals.size()))) {
      m_answers.answer(*outcome);
    }
  }
  void start_release(const dlock::lock::LockName&, const std::string&) override
  {
    m_answers.answer(Outcome::holding(Outcome::Op::release, true));
  }
  void start_withdraw(const dlock::lock::LockName&, const dlock::lock::WaitTicket&) override
  {
    m_answers.answer(Outcome::of(Outcome::Op::withdraw));
  }
  dlock::lock::Coordination* coordination() noexcept override { return this; }
  void start_gate(const dlock::lock::LockName&, const dlock::lock::GateRequest&) override
  {
    Outcome outcome{.op = Outcome::Op::gate};
    outcome.gate.open = true;
    m_answers.answer(outcome);
  }
  void start_set_latch(const dlock::lock::LockName&, std::int64_t, dlock::util::Millis) override
  {
    m_answers.answer(Outcome::of(Outcome::Op::set_latch));
  }
  void start_count_down(const dlock::lock::LockName&) override
  {
    m_answers.answer(Outcome::of(Outcome::Op::count_down));
  }
  void watch(dlock::util::EventLoop&) override {}
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
  dlock::lock::OutcomeQueue m_answers;
};

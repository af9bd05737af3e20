#include "lock/store.hpp"

namespace dlock::lock {

Outcome await_outcome(Store& store, Outcome::Op op, util::TimePoint deadline)
{
  while (true) {
    if (std::optional<Outcome> outcome = store.next_outcome()) {
      if (outcome->op != op) {
        continue;
      }
      if (outcome->error) {
        throw *outcome->error;
      }
      return std::move(*outcome);
    }
    if (util::monotonic_now() >= deadline) {
      throw store.timed_out();
    }
    util::EventLoop loop;
    store.watch(loop);
    loop.wake_at(deadline);
    loop.wait();
  }
}

Outcome renew_any(Store& store, const LockName& name, RenewRequest request,
                  util::Millis request_timeout)
{
  for (bool slot : {false, true}) {
    request.slot = slot;
    store.start_renew(name, request);
    Outcome outcome = await_outcome(store, Outcome::Op::renew,
                                    util::deadline_after(request_timeout + request.ack.timeout));
    if (outcome.held || slot) {
      return outcome;
    }
  }
  return {};
}

} // namespace dlock::lock

#include "lock/store.hpp"

namespace dlock::lock {

Outcome await_outcome(Store& store, Outcome::Op op, util::TimePoint deadline)
{
  std::optional<Outcome> found;
  auto arrived = [&] {
    while ((found = store.next_outcome()) && found->op != op) {
    }
    return found.has_value();
  };
  if (!util::run_until(deadline, arrived, [&store](util::EventLoop& loop) { store.watch(loop); })) {
    throw store.timed_out();
  }
  if (found->error) {
    throw *found->error;
  }
  return std::move(*found);
}

std::string StoreTraits::left_behind_after(util::Millis ttl) const
{
  std::string text = left_behind;
  if (std::size_t at = text.find("{ttl}"); at != std::string::npos) {
    text.replace(at, 5, util::format_duration(ttl));
  }
  return text;
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

#pragma once

#include "hold/waiter.hpp"

#include <memory>
#include <vector>

namespace dlock::hold {

// Taking a lock of one key or several (run, acquire): every one of them (in canonical order)
// or none, one at a time, without ever waiting while holding one, so that holders of
// overlapping sets can neither deadlock nor keep a lease they cannot renew. When a key is held
// elsewhere, the keys taken so far are released, that key is waited for (a Waiter), and the
// others are tried again. All keys get the same token; the lease runs from the earliest start,
// for the shortest validity.
class Acquisition {
public:
  // request: the token, TTL and holder record every key is asked for with.
  Acquisition(Clock& clock, lock::Store& store, process::SignalFd& signals, WaitPolicy policy,
              std::vector<lock::LockName> names, lock::AcquireRequest request);
  ~Acquisition();
  Acquisition(const Acquisition&) = delete;
  Acquisition& operator=(const Acquisition&) = delete;

  // Starts the first attempt at the first key and returns while it is in flight, so that the
  // caller's own work hides behind the round trip.
  void begin();
  // The caller's work after begin failed: gives back what the first attempt took.
  void cancel();
  // Waits until every key is taken, --wait runs out, or a signal (begins first if need be).
  Taken finish();

private:
  Taken take_set();

  Clock& m_clock;
  lock::Store& m_store;
  process::SignalFd& m_signals;
  WaitPolicy m_policy;
  std::vector<lock::LockName> m_names;
  lock::AcquireRequest m_request;
  util::TimePoint m_deadline{};
  std::unique_ptr<Waiter> m_first; // begun
};

// Releases every one of names the token holds, one request each; whether all were held. A
// store that does not answer: the first error, after trying the others.
bool release_all(lock::Store& store, const std::vector<lock::LockName>& names,
                 const std::string& token, util::Millis request_timeout);

} // namespace dlock::hold

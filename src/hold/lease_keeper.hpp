#pragma once

#include "hold/clock.hpp"
#include "lock/store.hpp"
#include "lock/watchdog.hpp"
#include "process/process_table.hpp"
#include "process/signals.hpp"

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dlock::hold {

// The lock a lease is kept on: every key (one renewal covers them all; losing one is losing
// it), the token, how the token holds them (a renewal of a slot differs from one of the lock
// alone), and the TTL each renewal asks for.
struct KeptLock {
  std::vector<lock::LockName> names;
  std::string token;
  lock::LockKind kind{};
  util::Millis renew_ttl{lock::default_ttl};
};

// How a round of renewals (one request per key) came out: a key no longer held loses the
// lock, whatever the others said.
enum class RenewalVerdict { confirmed, refused, failed };

// Whoever the lease is kept for (run's Supervisor, acquire --keep's process): told what the
// Watchdog decided, and what the store said, so that it reports and acts in its own way.
class LeaseEvents {
public:
  virtual ~LeaseEvents() = default;
  // What the watchdog decided besides renewals, which the keeper sends and drops itself:
  // notices, the guard's deadlines, stopping and killing.
  virtual void act(const lock::Actions& actions) = 0;
  // One key's renewal failed with error (the round goes on).
  virtual void renewal_error(const Error& error) { (void)error; }
  // A round ended, before the watchdog hears of it; first_error: with failed, the first error.
  virtual void round_ended(RenewalVerdict verdict, const std::string& first_error)
  {
    (void)verdict;
    (void)first_error;
  }
  // The store dropped its connection while no renewal was in flight.
  virtual void disconnected(const lock::Outcome& outcome) { (void)outcome; }
};

// Why keeping a lease for a process (acquire --keep) ended.
struct KeepEnd {
  enum class Why {
    owner_ended, // the process the lock was kept for ended
    signal,      // a signal (release sends SIGTERM)
    stopped,     // the watchdog stopped: the lease was lost or --max-hold ran out (stop_reason)
  };
  Why why = Why::owner_ended;
  int signal = 0;
};

// The one renewal loop of dlock: carries out what lock::Watchdog decides for a lease (renewals
// sent, timed out, answered; the store's disconnections), for `run` (its Supervisor), the
// renewer that keeps run's lease while dlock is stopped (Ctrl-Z), and acquire --keep. The
// owner runs the loop in turns: on_time(), wait() on its own descriptors too, take_answers().
class LeaseKeeper {
public:
  LeaseKeeper(Clock& clock, lock::Store& store, KeptLock lock, lock::Watchdog watchdog,
              LeaseEvents& events);
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // The timers due now (renewals, the stop and kill deadlines, --max-hold).
  void on_time();
  // Carries out a decision of the watchdog's (start(), guard_stopped()).
  void carry_out(const lock::Actions& actions);
  // Sleeps until a descriptor loop watches (the owner's) or the store's is ready, or the
  // watchdog's next timer.
  void wait(util::EventLoop& loop);
  // Takes what the store answered: renewals, disconnections.
  void take_answers();

  // acquire --keep's loop: keeps the lease until owner ends (its pidfd; without one, looked at
  // each second), a signal, or the watchdog stops.
  KeepEnd keep_for(const process::ProcessWatch& owner, process::SignalFd& signals);

  // Another process kept the lease meanwhile (the Ctrl-Z renewer) and left latest: the lease
  // as it saw it. What was in flight here is unknown, so it counts as failed.
  void hand_back(const lock::Watchdog& latest);
  // Ctrl-Z: the shell must see dlock stopped, so a renewer process keeps the lease until
  // take_back(); it ends early (and continues dlock) once wake_fd (the command's events) is
  // ready or the watchdog stops the command, which needs dlock itself. false: none started
  // (said why); dlock goes on renewing.
  bool start_renewer(int wake_fd);
  // dlock was continued: ends the renewer and takes the lease back from it.
  void take_back();

  // How the lock was lost, for the message that says so: replaced by whom (--replace), or how
  // this store loses a lock (StoreTraits::loss_cause).
  std::string loss_cause() const;
  // Whether a --replace acquirer asked this holder to stand down.
  bool replaced() const noexcept { return m_replaced_by.has_value(); }

  lock::Watchdog& watchdog() noexcept { return m_watchdog; }
  const lock::Watchdog& watchdog() const noexcept { return m_watchdog; }
  Clock& clock() noexcept { return m_clock; }

private:
  class Round;
  struct Renewer;
  void on_renewal(const lock::Outcome& outcome);
  [[noreturn]] void renew_while_stopped(pid_t parent, int wake_fd);

  Clock& m_clock;
  lock::Store& m_store;
  KeptLock m_lock;
  lock::Watchdog m_watchdog;
  LeaseEvents& m_events;
  std::unique_ptr<Round> m_round;
  std::unique_ptr<Renewer> m_renewer;
  std::optional<lock::HolderInfo> m_replaced_by; // a --replace acquirer asked this holder to go
};

} // namespace dlock::hold

#include "hold/lease_keeper.hpp"

#include "process/signals.hpp"
#include "util/forked.hpp"
#include "util/log.hpp"

#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <new>
#include <type_traits>

namespace dlock::hold {

using util::TimePoint;

// One round of renewals of a lock made of several keys: a request per key, and one verdict
// once every key has answered, so that the watchdog hears of one lease.
class LeaseKeeper::Round {
public:
  // Sends a renewal of every key; the round owes that many answers.
  void start(lock::Store& store, const std::vector<lock::LockName>& names,
             const lock::RenewRequest& request)
  {
    *this = Round{};
    m_owed = names.size();
    for (const lock::LockName& name : names) {
      store.start_renew(name, request);
    }
  }
  // Forgets the round (its requests were abandoned).
  void reset() noexcept { *this = Round{}; }
  // One key's answer; the verdict once it was the last one owed.
  std::optional<RenewalVerdict> add(const lock::Outcome& outcome)
  {
    if (m_owed == 0) {
      return std::nullopt; // an answer to an abandoned round
    }
    if (outcome.error) {
      if (!m_failed) {
        m_error = outcome.error->what();
      }
      m_failed = true;
    } else if (!outcome.held) {
      m_refused = true;
      if (outcome.replaced_by && !m_replaced_by) {
        m_replaced_by = outcome.replaced_by;
      }
    } else if (outcome.replicas_acknowledged) {
      m_replicas = std::min(m_replicas.value_or(*outcome.replicas_acknowledged),
                            *outcome.replicas_acknowledged);
    }
    if (--m_owed > 0) {
      return std::nullopt;
    }
    return m_refused  ? RenewalVerdict::refused
           : m_failed ? RenewalVerdict::failed
                      : RenewalVerdict::confirmed;
  }
  // With a confirmed verdict: the fewest replicas that acknowledged one key's renewal.
  std::optional<int> replicas() const noexcept { return m_replicas; }
  // With a failed verdict: the first error seen.
  const std::string& error() const noexcept { return m_error; }
  // With a refused verdict: who asked the holder to stand down (--replace), if one did.
  const std::optional<lock::HolderInfo>& replaced_by() const noexcept { return m_replaced_by; }

private:
  std::size_t m_owed = 0;
  bool m_refused = false;
  bool m_failed = false;
  std::optional<int> m_replicas;
  std::string m_error;
  std::optional<lock::HolderInfo> m_replaced_by;
};

namespace {

static_assert(std::is_trivially_copyable_v<lock::Watchdog>,
              "the renewer hands the watchdog back as raw memory");

// The renewer's latest watchdog, double-buffered: it may be SIGKILLed in the middle of a
// write, and the slot it is not writing stays whole.
struct SharedState {
  explicit SharedState(const lock::Watchdog& state) : slots{state, state} {}
  std::atomic<int> current{0};
  lock::Watchdog slots[2];

  void publish(const lock::Watchdog& state)
  {
    int next = 1 - current.load(std::memory_order_relaxed);
    slots[next] = state;
    current.store(next, std::memory_order_release);
  }
  const lock::Watchdog& latest() const { return slots[current.load(std::memory_order_acquire)]; }
};

} // namespace

// The renewer process and the memory it publishes the lease in.
struct LeaseKeeper::Renewer {
  pid_t pid = -1;
  SharedState* shared = nullptr;
};

LeaseKeeper::LeaseKeeper(Clock& clock, lock::Store& store, KeptLock lock, lock::Watchdog watchdog,
                         LeaseEvents& events)
  : m_clock(clock), m_store(store), m_lock(std::move(lock)), m_watchdog(watchdog), m_events(events),
    m_round(std::make_unique<Round>())
{
}

LeaseKeeper::~LeaseKeeper() = default;

std::string LeaseKeeper::loss_cause() const
{
  if (m_replaced_by) {
    return "replaced by " + m_replaced_by->describe() + " (--replace)";
  }
  return m_store.traits().loss_cause;
}

void LeaseKeeper::on_time() { carry_out(m_watchdog.on_time(m_clock.now())); }

void LeaseKeeper::carry_out(const lock::Actions& actions)
{
  // The owner first: one that ends (acquire --keep at a loss) sends no renewal on its way.
  m_events.act(actions);
  if (actions.abandon_renewal) {
    m_store.abandon();
    m_round->reset();
  }
  if (actions.send_renewal) {
    const lock::WatchdogPolicy& policy = m_watchdog.policy();
    m_round->start(m_store, m_lock.names,
                   lock::RenewRequest{m_lock.token, m_lock.renew_ttl, false, policy.replicas,
                                      m_lock.kind.has_slots()});
  }
}

void LeaseKeeper::wait(util::EventLoop& loop)
{
  m_store.watch(loop);
  m_clock.wait(loop, m_watchdog.next_wakeup(m_clock.now()));
}

void LeaseKeeper::take_answers()
{
  while (std::optional<lock::Outcome> outcome = m_store.next_outcome()) {
    if (outcome->op == lock::Outcome::Op::disconnected) {
      m_events.disconnected(*outcome);
      m_watchdog.store_disconnected(m_clock.now(), outcome->lease_ended);
      continue;
    }
    if (outcome->op == lock::Outcome::Op::renew) {
      on_renewal(*outcome);
    }
  }
}

void LeaseKeeper::on_renewal(const lock::Outcome& outcome)
{
  TimePoint t = m_clock.now();
  if (outcome.error) {
    m_events.renewal_error(*outcome.error);
  }
  std::optional<RenewalVerdict> verdict = m_round->add(outcome);
  if (!verdict) {
    return;
  }
  m_events.round_ended(*verdict, m_round->error());
  switch (*verdict) {
  case RenewalVerdict::refused:
    if (m_round->replaced_by() && !m_replaced_by) {
      m_replaced_by = m_round->replaced_by();
    }
    carry_out(m_watchdog.renewal_refused(t));
    break;
  case RenewalVerdict::failed:
    carry_out(m_watchdog.renewal_failed(t));
    break;
  case RenewalVerdict::confirmed:
    carry_out(m_watchdog.renewal_confirmed(t, m_round->replicas()));
    break;
  }
}

KeepEnd LeaseKeeper::keep_for(const process::ProcessWatch& owner, process::SignalFd& signals)
{
  using Why = KeepEnd::Why;
  while (true) {
    if (owner.ended()) {
      return KeepEnd{Why::owner_ended};
    }
    on_time();
    if (m_watchdog.stopping()) {
      return KeepEnd{Why::stopped};
    }
    util::EventLoop loop;
    int signal = 0;
    loop.watch(signals.fd(), POLLIN, [&](short) {
      while (auto sig = signals.read()) {
        signal = *sig;
      }
    });
    bool owner_ended = false;
    if (owner.fd() >= 0) {
      loop.watch(owner.fd(), POLLIN, [&](short) { owner_ended = true; });
    } else {
      loop.wake_at(m_clock.now() + std::chrono::seconds(1)); // no pidfd: look now and then
    }
    wait(loop);
    if (signal != 0) {
      return KeepEnd{Why::signal, signal};
    }
    if (owner_ended) {
      return KeepEnd{Why::owner_ended};
    }
    take_answers();
    if (m_watchdog.stopping()) {
      return KeepEnd{Why::stopped};
    }
  }
}

void LeaseKeeper::hand_back(const lock::Watchdog& latest)
{
  m_watchdog = latest;
  m_store.abandon(); // the renewer used the connection: its state is unknown here
  m_round->reset();
  m_watchdog.forget_in_flight(m_clock.now());
}

bool LeaseKeeper::start_renewer(int wake_fd)
{
  void* memory =
    ::mmap(nullptr, sizeof(SharedState), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    util::log_warning("cannot stop with the command (mmap failed); dlock goes on renewing");
    return false;
  }
  auto* shared = new (memory) SharedState(m_watchdog);
  m_renewer = std::make_unique<Renewer>(Renewer{-1, shared});
  pid_t parent = ::getpid();
  pid_t renewer = ::fork();
  if (renewer == 0) {
    util::run_forked([&] {
      try {
        renew_while_stopped(parent, wake_fd);
      } catch (...) {
        ::kill(parent, SIGCONT); // dlock renews again, from what the renewer last published
        throw;
      }
    });
  }
  if (renewer < 0) {
    ::munmap(memory, sizeof(SharedState));
    m_renewer.reset();
    util::log_warning("cannot stop with the command (fork failed); dlock goes on renewing");
    return false;
  }
  m_renewer->pid = renewer;
  ::setpgid(renewer, renewer); // here too, so the stop that follows cannot reach it
  return true;
}

void LeaseKeeper::take_back()
{
  if (!m_renewer) {
    return;
  }
  std::unique_ptr<Renewer> renewer = std::move(m_renewer);
  ::kill(renewer->pid, SIGKILL);
  while (::waitpid(renewer->pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  lock::Watchdog latest = renewer->shared->latest();
  ::munmap(renewer->shared, sizeof(SharedState));
  hand_back(latest);
}

void LeaseKeeper::renew_while_stopped(pid_t parent, int wake_fd)
{
  SharedState* shared = m_renewer->shared;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) {
    ::_exit(0);
  }
  ::setpgid(0, 0); // out of the job's group: what stops the job must not stop the renewer
  while (!m_watchdog.stopping()) {
    on_time();
    shared->publish(m_watchdog);
    if (m_watchdog.stopping()) {
      break;
    }
    bool woken = false;
    util::EventLoop loop;
    loop.watch(wake_fd, POLLIN, [&](short) { woken = true; });
    wait(loop);
    if (woken) {
      break; // the command ended (killed) or was continued: dlock must see to it
    }
    take_answers();
    shared->publish(m_watchdog);
  }
  // Stopping the command, or its end, needs dlock itself (the exit status, the release).
  shared->publish(m_watchdog);
  ::kill(parent, SIGCONT);
  ::_exit(0);
}

} // namespace dlock::hold

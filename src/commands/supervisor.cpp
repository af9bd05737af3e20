#include "commands/supervisor.hpp"

#include "util/event_loop.hpp"
#include "util/forked.hpp"
#include "util/log.hpp"

#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <new>
#include <type_traits>
#include <utility>

namespace dlock::commands {

using util::TimePoint;

namespace {

TimePoint now() { return util::monotonic_now(); }

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

Supervisor::Supervisor(lock::Store& store, std::vector<lock::LockName> names, std::string token,
                       lock::LockKind kind, lock::Watchdog watchdog, process::ProcessGroup& child,
                       process::SignalFd& signals)
  : m_store(store),
    m_names(std::move(names)),
    m_shown(lock::join_names(m_names)),
    m_token(std::move(token)),
    m_kind(kind),
    m_watchdog(watchdog),
    m_child(child),
    m_signals(signals)
{
}

void Supervisor::start(const process::CommandSpec& spec)
{
  act(m_watchdog.start());
  m_child.spawn(spec);
}

CommandEnd Supervisor::wait_for_exit()
{
  while (true) {
    act(m_watchdog.on_time(now()));
    take_outcomes();
    std::optional<CommandEnd> end;
    util::EventLoop loop;
    loop.watch(m_signals.fd(), POLLIN, [&](short) {
      while (auto sig = m_signals.read()) {
        on_signal(*sig);
      }
    });
    loop.watch(m_child.events_fd(), POLLIN, [&](short) {
      while (!end) {
        std::optional<process::CommandEvent> event = m_child.next_event();
        if (!event) {
          break;
        }
        end = on_event(*event);
      }
    });
    m_store.watch(loop);
    loop.wake_at(m_watchdog.next_wakeup(now()));
    loop.wait();
    if (end) {
      return *end;
    }
    take_outcomes();
  }
}

void Supervisor::take_outcomes()
{
  while (std::optional<lock::Outcome> outcome = m_store.next_outcome()) {
    TimePoint t = now();
    if (outcome->op == lock::Outcome::Op::disconnected) {
      util::log_verbose("lost the connection to the lock store ({}); renewing the lease on lock "
                        "'{}' soon",
                        outcome->error ? outcome->error->what() : "closed", m_shown);
      m_watchdog.store_disconnected(t, outcome->lease_ended);
      continue;
    }
    if (outcome->op == lock::Outcome::Op::renew) {
      on_renewal(*outcome, t);
    }
  }
}

void Supervisor::on_renewal(const lock::Outcome& outcome, TimePoint t)
{
  if (outcome.error) {
    util::log_verbose("renewal of lock '{}' failed: {}", m_shown, outcome.error->what());
  }
  switch (m_round.add(outcome)) {
  case RenewalRound::Verdict::pending:
    break;
  case RenewalRound::Verdict::refused:
    act(m_watchdog.renewal_refused(t));
    break;
  case RenewalRound::Verdict::failed:
    act(m_watchdog.renewal_failed(t));
    break;
  case RenewalRound::Verdict::confirmed:
    act(m_watchdog.renewal_confirmed(t, m_round.replicas()));
    break;
  }
}

void Supervisor::act(const lock::Actions& actions)
{
  for (const auto& notice : actions.notices) {
    if (!notice) {
      continue;
    }
    std::string text = lock::describe(*notice, m_shown, m_store.traits().loss_cause);
    switch (lock::level(notice->kind)) {
    case lock::NoticeLevel::error:
      util::log_error("{}", text);
      if (m_first_error.empty()) {
        m_first_error = text;
      }
      break;
    case lock::NoticeLevel::warning:
      util::log_warning("{}", text);
      break;
    case lock::NoticeLevel::verbose:
      util::log_verbose("{}", text);
      break;
    }
  }
  if (actions.abandon_renewal) {
    m_store.abandon();
    m_round.reset();
  }
  if (actions.send_renewal) {
    lock::RenewRequest request{m_token, m_watchdog.policy().lease.ttl, false,
                               m_watchdog.policy().replicas, m_kind.has_slots()};
    m_round.start(m_store, m_names, request);
  }
  const lock::Lease& lease = m_watchdog.lease();
  if (actions.arm_guard) {
    m_child.set_deadlines(lease.backstop_terminate_at(), lease.backstop_kill_at());
  }
  if (actions.terminate) {
    // The guard stops the rest of the tree too (descendants in other groups or sessions), and
    // sends the SIGKILL even if dlock cannot.
    m_child.set_deadlines(now(), m_watchdog.kill_at());
    m_child.signal_group(SIGTERM);
    m_child.signal_group(SIGCONT); // a stopped command acts on SIGTERM only once continued
  }
  if (actions.kill) {
    m_child.kill_all();
  }
}

void Supervisor::on_signal(int sig)
{
  if (sig == SIGCONT) {
    // fg of a dlock that ran in the background: its command gets the terminal too; a command
    // stopped without job control is continued with dlock.
    m_child.hand_terminal_over();
    if (std::exchange(m_command_stopped, false)) {
      m_child.resume();
    }
    return;
  }
  util::log_verbose("forwarding signal {} to the command", sig);
  m_child.signal_group(sig);
}

std::optional<CommandEnd> Supervisor::on_event(const process::CommandEvent& event)
{
  using Kind = process::CommandEvent::Kind;
  switch (event.kind) {
  case Kind::exited:
    return CommandEnd{event.value, event.signal,
                      event.signal != 0 && event.signal == m_terminal_signal};
  case Kind::guard_lost:
    throw Error(ExitCode::internal, "the guard process of lock '{}' died; the command was killed",
                m_shown);
  case Kind::terminal_signal:
    m_terminal_signal = event.value;
    break;
  case Kind::stopped:
    pause_while_stopped(event.value);
    break;
  case Kind::continued:
    m_command_stopped = false;
    break;
  case Kind::deadline_passed:
    // Only when dlock itself could not act in time (frozen, stopped, swapped out).
    act(m_watchdog.guard_stopped(now(), event.value == SIGKILL));
    break;
  }
  return std::nullopt;
}

void Supervisor::pause_while_stopped(int sig)
{
  // A stop is passed on as the terminal would have sent it: Ctrl-Z (SIGTSTP) only while the
  // terminal's foreground is dlock's or the command's group (else it came from kill(1), and
  // no shell would continue dlock's caller); a background read or write (SIGTTIN, SIGTTOU)
  // or SIGSTOP whenever there is a terminal.
  if (sig == SIGTSTP ? !m_child.job_control() : !m_child.has_terminal()) {
    // dlock's caller goes on; a SIGCONT to dlock continues the command.
    util::log_verbose("the command was stopped by signal {}; the lease on lock '{}' is still "
                      "renewed",
                      sig, m_shown);
    m_command_stopped = true;
    return;
  }
  // Ctrl-Z: the shell must see dlock stopped, so a renewer process keeps the lease meanwhile.
  void* memory = ::mmap(nullptr, sizeof(SharedState), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    util::log_warning("cannot stop with the command (mmap failed); dlock goes on renewing");
    return;
  }
  auto* shared = new (memory) SharedState(m_watchdog);
  pid_t parent = ::getpid();
  pid_t renewer = ::fork();
  if (renewer == 0) {
    util::run_forked([&] {
      try {
        renew_for_stopped_parent(shared, parent);
      } catch (...) {
        ::kill(parent, SIGCONT); // dlock renews again, from what the renewer last published
        throw;
      }
    });
  }
  if (renewer < 0) {
    ::munmap(memory, sizeof(SharedState));
    util::log_warning("cannot stop with the command (fork failed); dlock goes on renewing");
    return;
  }
  ::setpgid(renewer, renewer); // here too, so the stop below cannot reach it
  m_child.reclaim_terminal();
  process::stop_like(sig);
  // Continued (fg, bg or kill -CONT): take the lease back.
  ::kill(renewer, SIGKILL);
  while (::waitpid(renewer, nullptr, 0) < 0 && errno == EINTR) {
  }
  m_watchdog = shared->latest();
  ::munmap(memory, sizeof(SharedState));
  m_store.abandon(); // the renewer used the connection: its state is unknown here
  m_round.reset();
  m_watchdog.forget_in_flight(now());
  m_child.resume();
}

void Supervisor::renew_for_stopped_parent(void* memory, pid_t parent)
{
  auto* shared = static_cast<SharedState*>(memory);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) {
    ::_exit(0);
  }
  ::setpgid(0, 0); // out of the job's group: what stops the job must not stop the renewer
  while (!m_watchdog.stopping()) {
    act(m_watchdog.on_time(now()));
    shared->publish(m_watchdog);
    if (m_watchdog.stopping()) {
      break;
    }
    bool command_event = false;
    util::EventLoop loop;
    loop.watch(m_child.events_fd(), POLLIN, [&](short) { command_event = true; });
    m_store.watch(loop);
    loop.wake_at(m_watchdog.next_wakeup(now()));
    loop.wait();
    if (command_event) {
      break; // the command ended (killed) or was continued: dlock must see to it
    }
    take_outcomes();
    shared->publish(m_watchdog);
  }
  // Stopping the command, or its end, needs dlock itself (the exit status, the release).
  shared->publish(m_watchdog);
  ::kill(parent, SIGCONT);
  ::_exit(0);
}

} // namespace dlock::commands

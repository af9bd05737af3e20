#include "commands/supervisor.hpp"

#include "util/log.hpp"

#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <new>
#include <type_traits>

namespace dlock::commands {

using namespace std::chrono_literals;
using util::Millis;
using util::TimePoint;

namespace {

TimePoint now() { return util::monotonic_now(); }

static_assert(std::is_trivially_copyable_v<SupervisorState>,
              "the renewer hands the state back as raw memory");

// The renewer's latest state, double-buffered: it may be SIGKILLed in the middle of a write,
// and the slot it is not writing stays whole.
struct SharedState {
  explicit SharedState(const SupervisorState& state) : slots{state, state} {}
  std::atomic<int> current{0};
  SupervisorState slots[2];

  void publish(const SupervisorState& state)
  {
    int next = 1 - current.load(std::memory_order_relaxed);
    slots[next] = state;
    current.store(next, std::memory_order_release);
  }
  const SupervisorState& latest() const { return slots[current.load(std::memory_order_acquire)]; }
};

} // namespace

Supervisor::Supervisor(lock::LockClient& client, const cli::RunOptions& options, std::string token,
                       lock::Lease lease, process::ProcessGroup& child, process::SignalFd& signals)
  : m_client(client),
    m_options(options),
    m_token(std::move(token)),
    m_child(child),
    m_signals(signals),
    m_started(now()),
    m_state(lease)
{
}

void Supervisor::arm() { give_guard_deadline(); }

CommandEnd Supervisor::wait_for_exit()
{
  while (true) {
    on_timers(now());
    redis::Connection& connection = m_client.connection();
    std::array<pollfd, 3> fds{pollfd{m_signals.fd(), POLLIN, 0},
                              pollfd{m_child.events_fd(), POLLIN, 0},
                              pollfd{connection.fd(), connection.poll_events(), 0}};
    nfds_t count = fds[2].fd >= 0 && fds[2].events != 0 ? 3 : 2;
    if (::poll(fds.data(), count, poll_timeout()) <= 0) {
      continue;
    }
    if ((fds[0].revents & POLLIN) != 0) {
      while (auto sig = m_signals.read()) {
        on_signal(*sig);
      }
    }
    if (fds[1].revents != 0) {
      while (auto event = m_child.next_event()) {
        if (auto end = on_event(*event)) {
          return *end;
        }
      }
    }
    if (count == 3 && fds[2].revents != 0) {
      on_redis_io(fds[2].revents);
    }
  }
}

int Supervisor::poll_timeout() const
{
  auto wait = std::chrono::duration_cast<Millis>(next_wakeup() - now());
  return static_cast<int>(std::clamp<long long>(wait.count() + 1, 0, 60'000));
}

void Supervisor::on_signal(int sig)
{
  if (sig == SIGCONT) {
    // fg of a dlock that ran in the background: its command gets the terminal too.
    m_child.hand_terminal_over();
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
    return CommandEnd{event.value, event.signal, event.signal != 0 && event.signal == m_terminal_signal};
  case Kind::guard_lost:
    throw Error(ExitCode::internal, "the guard process of lock '{}' died; the command was killed",
                name());
  case Kind::terminal_signal:
    m_terminal_signal = event.value;
    break;
  case Kind::stopped:
    pause_while_stopped(event.value);
    break;
  case Kind::continued:
    break;
  case Kind::deadline_passed:
    // Only when dlock itself could not act in time (frozen, stopped, swapped out).
    begin_stop(StopReason::unconfirmed, now(),
               fmt::format("dlock did not confirm the lease on lock '{}' in time (was it frozen?); "
                           "its guard stopped the command before the lease could expire",
                           name()));
    if (event.value == SIGKILL) {
      m_state.killed = true;
    }
    break;
  }
  return std::nullopt;
}

void Supervisor::on_timers(TimePoint t)
{
  lock::Lease& lease = m_state.lease;
  if (m_state.renewing) {
    if (lease.in_flight() && t >= lease.request_deadline()) {
      util::log_verbose("renewal of lock '{}' got no reply in {}; retrying", name(),
                        util::format_duration(lease.policy().request_timeout()));
      m_client.connection().reset();
      lease.renewal_failed(t);
    }
    if (!lease.in_flight() && t >= lease.next_renewal_at()) {
      send_renewal(t, false);
    }
  }
  if (!m_state.lost && !m_options.on_lost_ignore) {
    if (t >= lease.terminate_at()) {
      begin_stop(StopReason::unconfirmed, t,
                 fmt::format("could not confirm the lease on lock '{}' with Redis for {}; "
                             "stopping the command before the lease can expire",
                             name(), util::format_duration(std::chrono::duration_cast<Millis>(
                                       t - (lease.expires_at() - m_options.ttl)))));
    }
    if (t >= lease.kill_at()) {
      hard_kill();
    }
  }
  if (m_options.on_lost_ignore && !m_state.lost && t >= lease.expires_at()
      && !m_state.unconfirmed_past_expiry) {
    m_state.unconfirmed_past_expiry = true;
    util::log_warning("lease on lock '{}' may have expired (Redis unreachable); the command "
                      "goes on unprotected (--on-lost ignore)",
                      name());
  }
  if (m_options.max_hold && t >= m_started + *m_options.max_hold) {
    begin_stop(StopReason::max_hold, t,
               fmt::format("the command reached --max-hold {}; stopping it",
                           util::format_duration(*m_options.max_hold)));
  }
  if (m_state.kill_at && t >= *m_state.kill_at) {
    hard_kill();
  }
}

TimePoint Supervisor::next_wakeup() const
{
  const lock::Lease& lease = m_state.lease;
  TimePoint next = now() + 60s;
  if (m_state.renewing) {
    next = std::min(next, lease.in_flight() ? lease.request_deadline() : lease.next_renewal_at());
  }
  if (!m_state.lost && !m_options.on_lost_ignore) {
    next = std::min(next, m_state.reason == StopReason::none ? lease.terminate_at() : lease.kill_at());
  }
  if (m_options.on_lost_ignore && !m_state.lost && !m_state.unconfirmed_past_expiry) {
    next = std::min(next, lease.expires_at());
  }
  if (m_options.max_hold && m_state.reason == StopReason::none) {
    next = std::min(next, m_started + *m_options.max_hold);
  }
  if (m_state.kill_at && !m_state.killed) {
    next = std::min(next, *m_state.kill_at);
  }
  return next;
}

void Supervisor::send_renewal(TimePoint t, bool with_source)
{
  try {
    m_client.send_renew(m_token, m_options.ttl, with_source);
    m_state.lease.renewal_sent(t);
  } catch (const Error& error) {
    util::log_verbose("renewal of lock '{}' failed: {}", name(), error.what());
    m_state.lease.renewal_failed(t);
  }
}

void Supervisor::on_redis_io(short revents)
{
  try {
    m_client.connection().process_io(revents);
    while (auto reply = m_client.connection().next_reply()) {
      on_renewal_reply(**reply);
    }
  } catch (const Error& error) {
    util::log_verbose("renewal of lock '{}' failed: {}", name(), error.what());
    m_client.connection().reset();
    m_state.lease.renewal_failed(now());
  }
}

void Supervisor::on_renewal_reply(const redisReply& reply)
{
  std::optional<bool> held = m_client.parse_renew(reply);
  if (!held) { // NOSCRIPT: the script cache was flushed; send the body, same request time
    m_client.send_renew(m_token, m_options.ttl, true);
    return;
  }
  if (*held) {
    m_state.lease.renewal_confirmed();
    m_state.unconfirmed_past_expiry = false;
    if (!m_state.stopping) {
      give_guard_deadline();
    }
    util::log_verbose("renewed lease on lock '{}' for {}", name(),
                      util::format_duration(m_options.ttl));
    return;
  }
  m_state.lease.renewal_failed(now());
  m_state.renewing = false;
  m_state.lost = true;
  if (m_options.on_lost_ignore) {
    util::log_error("lost lock '{}': it expired or was released by someone else; the command "
                    "goes on unprotected (--on-lost ignore)",
                    name());
  } else {
    begin_stop(StopReason::lost, now(),
               fmt::format("lost lock '{}': it expired or was released by someone else; "
                           "stopping the command",
                           name()));
  }
}

void Supervisor::give_guard_deadline() const
{
  if (!m_options.on_lost_ignore) {
    m_child.set_deadlines(m_state.lease.backstop_terminate_at(), m_state.lease.backstop_kill_at());
  }
}

void Supervisor::begin_stop(StopReason reason, TimePoint t, const std::string& message)
{
  if (m_state.reason == StopReason::none || reason == StopReason::lost) {
    if (m_state.reason != StopReason::lost) {
      m_state.reason = reason;
    }
  }
  if (m_state.stopping) {
    return;
  }
  m_state.stopping = true;
  util::log_error("{}", message);
  m_state.kill_at = t + m_state.lease.policy().effective_kill_after();
  // The guard stops the rest of the tree too (descendants in other groups or sessions), and
  // sends the SIGKILL even if dlock cannot.
  m_child.set_deadlines(t, *m_state.kill_at);
  m_child.signal_group(SIGTERM);
  m_child.signal_group(SIGCONT); // a stopped command acts on SIGTERM only once continued
}

void Supervisor::hard_kill()
{
  if (!m_state.killed) {
    m_state.killed = true;
    util::log_verbose("sending SIGKILL to the command and everything it started");
    m_child.kill_all();
  }
}

void Supervisor::pause_while_stopped(int sig)
{
  if (!m_child.has_terminal()) {
    util::log_verbose("the command was stopped by signal {}; the lease on lock '{}' is still "
                      "renewed",
                      sig, name());
    return;
  }
  // Ctrl-Z: the shell must see dlock stopped, so a renewer process keeps the lease meanwhile.
  void* memory = ::mmap(nullptr, sizeof(SharedState), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    util::log_warning("cannot stop with the command (mmap failed); dlock goes on renewing");
    return;
  }
  auto* shared = new (memory) SharedState(m_state);
  pid_t parent = ::getpid();
  pid_t renewer = ::fork();
  if (renewer == 0) {
    renew_for_stopped_parent(shared, parent);
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
  m_state = shared->latest();
  ::munmap(memory, sizeof(SharedState));
  m_client.connection().reset(); // the renewer used the socket: its state is unknown here
  if (m_state.lease.in_flight()) {
    m_state.lease.renewal_failed(now());
  }
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
  while (!m_state.stopping) {
    on_timers(now());
    shared->publish(m_state);
    if (m_state.stopping) {
      break;
    }
    redis::Connection& connection = m_client.connection();
    std::array<pollfd, 2> fds{pollfd{m_child.events_fd(), POLLIN, 0},
                              pollfd{connection.fd(), connection.poll_events(), 0}};
    nfds_t count = fds[1].fd >= 0 && fds[1].events != 0 ? 2 : 1;
    if (::poll(fds.data(), count, poll_timeout()) > 0) {
      if (fds[0].revents != 0) {
        break; // the command ended (killed) or was continued: dlock must see to it
      }
      on_redis_io(fds[1].revents);
      shared->publish(m_state);
    }
  }
  // Stopping the command, or its end, needs dlock itself (the exit status, the release).
  shared->publish(m_state);
  ::kill(parent, SIGCONT);
  ::_exit(0);
}

} // namespace dlock::commands

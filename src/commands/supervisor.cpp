#include "commands/supervisor.hpp"

#include "util/event_loop.hpp"
#include "util/log.hpp"

#include <utility>

namespace dlock::commands {

Supervisor::Supervisor(lock::Store& store, hold::KeptLock lock, lock::Watchdog watchdog,
                       process::ProcessGroup& child, process::SignalFd& signals, hold::Clock& clock)
  : m_shown(lock::join_names(lock.names)), m_keeper(clock, store, std::move(lock), watchdog, *this),
    m_child(child), m_signals(signals)
{
}

void Supervisor::start(const process::CommandSpec& spec)
{
  m_keeper.carry_out(m_keeper.watchdog().start());
  m_child.spawn(spec);
}

CommandEnd Supervisor::wait_for_exit()
{
  while (true) {
    m_keeper.on_time();
    m_keeper.take_answers();
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
    m_keeper.wait(loop);
    if (end) {
      return *end;
    }
    m_keeper.take_answers();
  }
}

void Supervisor::disconnected(const lock::Outcome& outcome)
{
  if (outcome.replaced_by) {
    util::log_verbose("a --replace asks this holder of lock '{}' to stand down; confirming the "
                      "lease now",
                      m_shown);
    return;
  }
  util::log_verbose("lost the connection to the lock store ({}); renewing the lease on lock "
                    "'{}' soon",
                    outcome.error ? outcome.error->what() : "closed", m_shown);
}

void Supervisor::renewal_error(const Error& error)
{
  util::log_verbose("renewal of lock '{}' failed: {}", m_shown, error.what());
}

void Supervisor::act(const lock::Actions& actions)
{
  for (const auto& notice : actions.notices) {
    if (!notice) {
      continue;
    }
    std::string text = lock::describe(*notice, m_shown, m_keeper.loss_cause());
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
  const lock::Lease& lease = m_keeper.watchdog().lease();
  if (actions.arm_guard) {
    m_child.set_deadlines(lease.backstop_terminate_at(), lease.backstop_kill_at());
  }
  if (actions.terminate) {
    // The guard stops the rest of the tree too (descendants in other groups or sessions), and
    // sends the SIGKILL even if dlock cannot.
    m_child.set_deadlines(m_keeper.clock().now(), m_keeper.watchdog().kill_at());
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
  if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT) {
    m_stop_signal = sig;
  }
  m_child.signal_group(sig);
}

std::optional<CommandEnd> Supervisor::on_event(const process::CommandEvent& event)
{
  using Kind = process::CommandEvent::Kind;
  switch (event.kind) {
  case Kind::exited:
    return CommandEnd{event.value, event.signal,
                      event.signal != 0 && event.signal == m_terminal_signal,
                      m_stop_signal != 0 ? m_stop_signal : m_terminal_signal};
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
    m_keeper.carry_out(
      m_keeper.watchdog().guard_stopped(m_keeper.clock().now(), event.value == SIGKILL));
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
  if (!m_keeper.start_renewer(m_child.events_fd())) {
    return;
  }
  m_child.reclaim_terminal();
  process::stop_like(sig);
  // Continued (fg, bg or kill -CONT): take the lease back.
  m_keeper.take_back();
  m_child.resume();
}

} // namespace dlock::commands

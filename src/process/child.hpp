#pragma once

#include "util/clock.hpp"
#include "util/fd.hpp"

#include <signal.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dlock::process {

// What to run and with which environment changes.
struct CommandSpec {
  std::vector<std::string> argv;                        // argv[0] is looked up in PATH
  std::vector<std::pair<std::string, std::string>> env; // set on top of dlock's environment
  std::vector<std::string> unset;                       // removed from dlock's environment
  // dlock's descriptors the command inherits (file://'s lock, as flock(1) does); it gets no
  // other descriptor but 0, 1 and 2: a command that drops privileges must not inherit
  // dlock's store session.
  std::vector<int> inherit;
  // dlock's descriptors whose close ends the lock (a database session's socket): the guard
  // keeps copies, never the command's, until the command's whole tree is dead, so that a
  // dlock killed outright does not free the lock while its command still runs.
  std::vector<int> hold;
};

// Something that happened to the command, as its guard reports it.
struct CommandEvent {
  enum class Kind {
    stopped,         // value: the stopping signal (Ctrl-Z is SIGTSTP)
    continued,       // the command was continued
    terminal_signal, // value: SIGINT or SIGQUIT, sent by the terminal to the command's group
    deadline_passed, // value: SIGTERM or SIGKILL, sent by the guard as the lease ran out
    exited,          // value: the shell status (code, or 128+N); nothing it started is left
    guard_lost,      // the guard died: the command was killed, its status is unknown
  };
  Kind kind;
  int value = 0;
  int signal = 0; // exited: N when the command died of signal N
};

// The process group the command runs in, led by a guard process that dlock forks before it
// takes the lock (see process/guard.hpp). The guard starts the command as its child, so that
// every descendant stays below it even after setsid; it kills them all when the command
// exits or dlock dies (even by SIGKILL), and it enforces the lease deadlines it is given even
// when dlock itself is frozen. The group gets the terminal while dlock is in the foreground.
class ProcessGroup {
public:
  // Forks the guard; child_mask is the signal mask the command starts with; program, the
  // command's argv[0], which the guard looks up in $PATH while dlock waits for the lock.
  ProcessGroup(const sigset_t& child_mask, const std::string& program);
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;
  // Kills whatever is left of the command's tree and reaps the guard.
  ~ProcessGroup();

  // Starts the command in the group, the terminal first given to the group when dlock is in
  // its foreground, unless dlock is one side of a pipeline (`dlock run ... | less`: the
  // terminal stays with the pipeline). Throws Error(126/127) when the command cannot be
  // executed.
  void spawn(const CommandSpec& spec);
  // Sends sig to the whole group (the guard ignores it); never SIGKILL or SIGSTOP, which
  // would reach the guard too: see kill_all.
  void signal_group(int sig) const noexcept;
  // SIGKILLs everything the command started, in any group or session, now: directly, and
  // through the guard, which reaps it all and then reports the command's end.
  void kill_all() const noexcept;
  // From now on the guard itself SIGTERMs the whole tree at terminate_at and SIGKILLs it at
  // kill_at, unless later times come first; once SIGTERM is sent, times only move earlier.
  void set_deadlines(util::TimePoint terminate_at, util::TimePoint kill_at) const noexcept;
  // The descriptor to poll for the guard's reports.
  int events_fd() const noexcept { return m_reports.get(); }
  // The next report, if one is waiting.
  std::optional<CommandEvent> next_event();

  // Whether dlock has a controlling terminal.
  bool has_terminal() const noexcept { return m_tty.get() >= 0; }
  // Whether job control applies (see process::job_control): the terminal's foreground group
  // is dlock's or the command's, so that a stop of the command was the terminal's Ctrl-Z.
  bool job_control() const noexcept;
  // Takes the terminal back from the command's group, if it has it.
  void reclaim_terminal() noexcept;
  // Gives the terminal to the command's group if dlock is in the foreground (after fg).
  void hand_terminal_over() noexcept;
  // Continues a stopped command, in the foreground if dlock is there.
  void resume() noexcept;

private:
  void send(const void* data, std::size_t size) const noexcept;
  void pass_descriptors(const std::vector<int>& fds) const noexcept;

  pid_t m_guard = -1; // also the process group id
  bool m_started = false;
  bool m_exited = false;
  util::UniqueFd m_requests; // to the guard; closing it tells the guard dlock is gone
  util::UniqueFd m_reports;  // from the guard, non-blocking
  util::UniqueFd m_passing;  // to the guard: the descriptors the command inherits (SCM_RIGHTS)
  util::UniqueFd m_tty;      // the controlling terminal, if any
  bool m_may_take_terminal = false; // no pipeline sibling shares dlock's group (and terminal)
};

// Replaces dlock with the command, as the shell's exec does (for a run nested in a command
// that holds its lock already, whose own guard and lease cover it), with no descriptor but 0,
// 1 and 2; throws Error (126, 127) if it cannot be run.
[[noreturn]] void exec_in_place(const CommandSpec& spec);

} // namespace dlock::process

#pragma once

#include "util/fd.hpp"

#include <signal.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dlock::process {

// What to run and with which extra environment variables.
struct CommandSpec {
  std::vector<std::string> argv;                           // argv[0] is looked up in PATH
  std::vector<std::pair<std::string, std::string>> env;   // set on top of dlock's environment
};

// The process group the command runs in, led by a small guard process that dlock forks
// before it takes the lock. The guard holds a pipe from dlock: if dlock dies for any reason,
// even SIGKILL, the pipe closes and the guard SIGKILLs its whole group, so no part of the
// command goes on running without the lock. The command joins the group as it starts, so
// there is no moment at which it runs unguarded. The guard ignores the signals dlock
// forwards to the group and dies with the group's final SIGKILL.
class ProcessGroup {
public:
  // Forks the guard; child_mask is the signal mask the guard and the command start with.
  explicit ProcessGroup(const sigset_t& child_mask);
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;
  // Kills whatever is left of the group and reaps the command and the guard.
  ~ProcessGroup();

  // Starts the command in the group (posix_spawn, so no copy of dlock's memory is made);
  // when dlock is in the foreground of a terminal the group gets the terminal first.
  // Throws Error(126/127) when the command cannot be executed.
  void spawn(const CommandSpec& spec);
  // Sends sig to the whole group (the guard ignores all but SIGKILL).
  void signal_group(int sig) const noexcept;
  // If the command has exited: kills anything left in its group, reaps it and returns its
  // status as a shell would (exit code, or 128+N for signal N). nullopt while it runs.
  std::optional<int> try_wait();

private:
  void give_back_terminal() noexcept;

  sigset_t m_child_mask{};
  pid_t m_guard = -1;   // also the process group id
  pid_t m_command = -1;
  util::UniqueFd m_guard_pipe;
  bool m_owns_terminal = false;
  bool m_reaped = false;
};

} // namespace dlock::process

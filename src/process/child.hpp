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

// The command dlock runs, in its own process group. A small guard process, outside both
// dlock's and the command's groups, holds a pipe from dlock: if dlock dies for any reason,
// even SIGKILL, the pipe closes and the guard SIGKILLs the whole group, so no part of the
// command goes on running without the lock. When the command is in the foreground of a
// terminal, its group is given the terminal so that it can read it and get ^C itself.
class ChildProcess {
public:
  // Starts the command; throws Error(126/127) when it cannot be executed.
  static ChildProcess spawn(const CommandSpec& spec, const sigset_t& child_mask);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // Kills whatever is left of the group and reaps the command and the guard.
  ~ChildProcess();

  pid_t pid() const noexcept { return m_pid; }
  // Sends sig to the command's whole process group.
  void signal_group(int sig) const noexcept;
  // If the command has exited: kills anything left in its group, reaps it and returns its
  // status as a shell would (exit code, or 128+N for signal N). nullopt while it runs.
  std::optional<int> try_wait();

private:
  ChildProcess(pid_t pid, pid_t guard, util::UniqueFd guard_pipe, bool owns_terminal);
  void give_back_terminal() noexcept;

  pid_t m_pid = -1;
  pid_t m_guard = -1;
  util::UniqueFd m_guard_pipe;
  bool m_owns_terminal = false;
  bool m_reaped = false;
};

} // namespace dlock::process

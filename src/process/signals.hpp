#pragma once

#include "util/fd.hpp"

#include <signal.h>

#include <initializer_list>
#include <optional>

namespace dlock::process {

// Blocks a set of signals for this process and delivers them as data on a signalfd, so the
// event loop handles them between polls and no handler ever does real work. The previous
// mask is restored on destruction and given to children before exec.
class SignalFd {
public:
  explicit SignalFd(std::initializer_list<int> signals);
  ~SignalFd();
  SignalFd(const SignalFd&) = delete;
  SignalFd& operator=(const SignalFd&) = delete;

  // The descriptor to poll for POLLIN.
  int fd() const noexcept { return m_fd.get(); }
  // The next pending signal, or nullopt when none is queued.
  std::optional<int> read();
  // The signal mask that was in force before this object blocked its set.
  const sigset_t& original_mask() const noexcept { return m_original; }

private:
  util::UniqueFd m_fd;
  sigset_t m_original{};
};

// Whether job control applies to dlock: it has a controlling terminal whose foreground process
// group is dlock's own, or also_group (the command's, while it has the terminal). Otherwise
// (cron, a script's background job, no terminal) a SIGTSTP is kill(1)'s, not a terminal's:
// stopping dlock's group would stop its caller, and no shell would continue it.
bool job_control(pid_t also_group = 0) noexcept;

// Stops dlock the way sig stopped its command, so that the shell sees the job stopped:
// SIGTSTP, SIGTTIN and SIGTTOU (what a terminal sends) go to dlock's whole process group, as
// the terminal would have sent them without dlock; SIGSTOP stops dlock alone. Returns once
// dlock is continued (fg, bg, or kill -CONT). Only where job_control() holds.
void stop_like(int sig) noexcept;

// SIGINT and SIGQUIT: a shell script stops when its child dies of one of them (bash's "wait
// and cooperative exit"), so dlock dies of them too rather than exiting 128+N.
inline bool stops_calling_script(int sig) { return sig == SIGINT || sig == SIGQUIT; }

// Ends dlock by sig (SIGINT or SIGQUIT, without a core dump), so that a calling shell script
// stops as it would had its command died of it; with to_group, sig first goes to dlock's own
// process group, where the terminal would have sent it without dlock. Never returns.
[[noreturn]] void die_of_signal(int sig, bool to_group) noexcept;

} // namespace dlock::process

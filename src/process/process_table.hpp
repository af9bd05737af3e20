#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dlock::process {

// The live (not zombie) descendants of root, read from /proc, parents before children. This
// kernel may lack /proc/PID/task/TID/children, so every /proc/PID/stat is read.
std::vector<pid_t> live_descendants(pid_t root);

// Sends sig to every live descendant of the calling process. With the caller a child
// subreaper, that is every process the command started, whatever session or group it moved to.
void signal_descendants(int sig) noexcept;

// Whether a process of dlock's own group other than dlock and its ancestors lives: a
// pipeline's other side (`dlock run ... | less`), which may need the terminal itself.
bool group_has_siblings();

// The script a process works for, starting from its parent: up through the processes that
// are forks of their own parent (the same executable and command line: the subshell of a
// `$(...)` with a redirection, a `( ... )`, a pipeline's part), the first one that is not.
pid_t calling_script(pid_t parent);

// When pid started (clock ticks after boot, from /proc/PID/stat); nullopt if it does not live.
// With the pid, it names one process: a pid alone may have been reused since it was read.
std::optional<std::uint64_t> start_time(pid_t pid);

// The process's name as the kernel keeps it (/proc/PID/comm: at most 15 bytes, read with a
// bounded read), or "" if it cannot be read: what acquire records of its caller, whose
// command line may hold secrets.
std::string program_name(pid_t pid);

// Tells when a process that need not be a child ends, without polling: a pidfd to poll
// (Linux 5.3), else a liveness check whenever asked.
class ProcessWatch {
public:
  explicit ProcessWatch(pid_t pid);
  ~ProcessWatch();
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;

  // POLLIN once the process has ended; -1 without pidfd support.
  int fd() const noexcept { return m_fd; }
  bool ended() const noexcept;
  pid_t pid() const noexcept { return m_pid; }
  // Whether the process watched is the one that started at start: checked after its pidfd
  // was opened, so that a process that took the pid since cannot pass for it (without pidfd
  // support, Linux < 5.3, only as of now).
  bool started_at(std::uint64_t start) const;
  // Sends sig through the pidfd, which reaches the process watched or none (never one that
  // took its pid); kill(2) without pidfd support. False if it was not sent.
  bool signal(int sig) const noexcept;

private:
  pid_t m_pid;
  int m_fd = -1;
};

} // namespace dlock::process

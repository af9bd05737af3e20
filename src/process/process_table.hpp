#pragma once

#include <sys/types.h>

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

} // namespace dlock::process

#pragma once

#include <unistd.h>

namespace dlock::util {

// Runs body in a process just forked (a --keep holder, a renewer, the guard, a waiting helper)
// and ends that process with _exit(failed) if body returns or throws: an exception must never
// unwind into the frames it was forked from, whose destructors (a held lock's release, a
// process group's kill) belong to the parent.
template<typename Body> [[noreturn]] void run_forked(Body&& body, int failed = 70) noexcept
{
  try {
    body();
  } catch (...) {
    // nothing of the parent's may run here: the process ends below
  }
  ::_exit(failed);
}

} // namespace dlock::util

#pragma once

#include <signal.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace dlock::process::guard {

// One message on the pipes between dlock and its guard: fixed size and below PIPE_BUF, so
// each write is atomic even when a second writer (the renewer of a stopped dlock) shares
// the pipe.
struct Message {
  std::int32_t kind = 0;
  std::int32_t value = 0;
  std::int64_t a = 0;
  std::int64_t b = 0;
};

// From dlock to the guard.
enum Request : std::int32_t {
  spawn = 1,     // value: argc; a: bytes of NUL-terminated argv then environment that follow;
                 // b: descriptors for the command, sent before it on the passing socket
  deadlines = 2, // a, b: SIGTERM and SIGKILL times, steady_clock nanoseconds
  hold = 3,      // b: descriptors the guard keeps till the command's tree is dead, sent before
};

// From the guard to dlock.
enum Report : std::int32_t {
  started = 1,         // value: the command's pid
  spawn_failed = 2,    // value: errno of the failed exec
  stopped = 3,         // value: the signal that stopped the command
  continued = 4,       // the command was continued
  terminal_signal = 5, // value: SIGINT or SIGQUIT that the terminal sent to the group
  deadline_passed = 6, // value: SIGTERM or SIGKILL, sent because dlock did not extend the lease
  exited = 7,          // value: the command's wait status; everything it started is gone
};

// The most descriptors a command inherits from dlock (one lock file per key).
constexpr std::size_t most_inherited = 64;

// The guard's life, in the process forked for it: leads the command's process group, is
// the command's parent and a child subreaper (so every descendant, even one that called
// setsid, stays below it), enforces the lease deadlines dlock sends even when dlock is
// frozen, kills the whole tree when the command exits or dlock goes away, and reports what
// happens to the command. Closes every descriptor inherited from dlock but 0, 1, 2 and its
// three channels at once; the command gets only 0, 1, 2 and what dlock passes on passing_fd.
// Exits once it has reported the command's end (everything is dead by then). Never returns.
// program: the command's argv[0] as given, looked up in $PATH here, while dlock still waits for
// the store, rather than after the lock is taken.
[[noreturn]] void guard_main(int requests_fd, int reports_fd, int passing_fd,
                             const sigset_t& command_mask, const std::string& program);

} // namespace dlock::process::guard

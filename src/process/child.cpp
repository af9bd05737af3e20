#include "process/child.hpp"

#include "process/guard.hpp"
#include "process/process_table.hpp"
#include "process/signals.hpp"
#include "util/error.hpp"
#include "util/event_loop.hpp"
#include "util/files.hpp"
#include "util/forked.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern char** environ;

namespace dlock::process {

namespace {

// dlock's own environment with spec's changes: the NUL-terminated entries the guard execs with.
std::string environment_block(const CommandSpec& spec)
{
  auto named = [](std::string_view entry, std::string_view name) {
    return entry.size() > name.size() && entry.substr(0, name.size()) == name
           && entry[name.size()] == '=';
  };
  std::string block;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    bool replaced = false;
    for (const auto& [name, value] : spec.env) {
      replaced = replaced || named(text, name);
    }
    for (const auto& name : spec.unset) {
      replaced = replaced || named(text, name);
    }
    if (!replaced) {
      block.append(text).push_back('\0');
    }
  }
  for (const auto& [name, value] : spec.env) {
    block.append(name).append("=").append(value).push_back('\0');
  }
  return block;
}

int shell_status(int status)
{
  if (WIFEXITED(status)) {
    return WEXITSTATUS(status);
  }
  if (WIFSIGNALED(status)) {
    return 128 + WTERMSIG(status);
  }
  return 128;
}

std::int64_t nanos(util::TimePoint t)
{
  if (t == util::TimePoint::max()) {
    return INT64_MAX;
  }
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// tcsetpgrp from a process that may be in the background: SIGTTOU must not stop it.
void set_foreground(int tty, pid_t group) noexcept
{
  auto previous = ::signal(SIGTTOU, SIG_IGN);
  ::tcsetpgrp(tty, group);
  ::signal(SIGTTOU, previous);
}

} // namespace

ProcessGroup::ProcessGroup(const sigset_t& child_mask, const std::string& program)
{
  int requests[2];
  int reports[2];
  if (::pipe2(requests, O_CLOEXEC) != 0) {
    throw Error(ExitCode::internal, "pipe failed: {}", std::strerror(errno));
  }
  if (::pipe2(reports, O_CLOEXEC) != 0) {
    int saved = errno;
    ::close(requests[0]);
    ::close(requests[1]);
    throw Error(ExitCode::internal, "pipe failed: {}", std::strerror(saved));
  }
  int passing[2];
  if (::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, passing) != 0) {
    int saved = errno;
    for (int fd : {requests[0], requests[1], reports[0], reports[1]}) {
      ::close(fd);
    }
    throw Error(ExitCode::internal, "socketpair failed: {}", std::strerror(saved));
  }
  pid_t guard = ::fork();
  if (guard == 0) {
    util::run_forked(
      [&] { guard::guard_main(requests[0], reports[1], passing[1], child_mask, program); });
  }
  ::close(requests[0]);
  ::close(reports[1]);
  ::close(passing[1]);
  m_requests.reset(requests[1]);
  m_reports.reset(reports[0]);
  m_passing.reset(passing[0]);
  if (guard < 0) {
    throw Error(ExitCode::internal, "fork failed: {}", std::strerror(errno));
  }
  ::setpgid(guard, guard); // also here, so the group exists before the command joins it
  m_guard = guard;
  ::fcntl(m_reports.get(), F_SETFL, ::fcntl(m_reports.get(), F_GETFL) | O_NONBLOCK);
  m_tty.reset(::open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC));
}

ProcessGroup::~ProcessGroup()
{
  if (m_started && !m_exited) {
    kill_all();
  }
  reclaim_terminal();
  m_requests.reset(); // the guard kills what is left of the tree, and exits
  if (m_guard > 0) {
    ::kill(m_guard, SIGCONT); // in case someone stopped it
    while (::waitpid(m_guard, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

void ProcessGroup::send(const void* data, std::size_t size) const noexcept
{
  const auto* bytes = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(m_requests.get(), bytes, size);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return; // the guard is gone; next_event reports it
    }
    bytes += n;
    size -= static_cast<std::size_t>(n);
  }
}

void ProcessGroup::pass_descriptors(const std::vector<int>& fds) const noexcept
{
  if (fds.empty() || fds.size() > guard::most_inherited) {
    return;
  }
  char byte = 0;
  iovec data{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * guard::most_inherited)]{};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
  while (::sendmsg(m_passing.get(), &message, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
  // On failure the command runs without them: they only make the kernel keep the lock
  // while the command lives, and the guard already ends the command before the release.
}

void ProcessGroup::spawn(const CommandSpec& spec)
{
  if (spec.argv.empty()) {
    throw Error(ExitCode::usage, "no command given");
  }
  std::string payload;
  for (const auto& arg : spec.argv) {
    payload.append(arg).push_back('\0');
  }
  payload += environment_block(spec);
  guard::Message request;
  request.kind = guard::spawn;
  request.value = static_cast<std::int32_t>(spec.argv.size());
  request.a = static_cast<std::int64_t>(payload.size());
  request.b = static_cast<std::int64_t>(spec.inherit.size());

  if (!spec.hold.empty() && spec.hold.size() <= guard::most_inherited) {
    guard::Message keep;
    keep.kind = guard::hold;
    keep.b = static_cast<std::int64_t>(spec.hold.size());
    pass_descriptors(spec.hold); // queued before the request that says to expect them
    send(&keep, sizeof keep);
  }
  m_may_take_terminal = m_tty && !group_has_siblings();
  hand_terminal_over();
  pass_descriptors(spec.inherit); // queued before the request that says to expect them
  send(&request, sizeof request);
  send(payload.data(), payload.size());
  while (true) {
    util::EventLoop loop; // the guard answers at once: started, or why not
    loop.watch(m_reports.get(), POLLIN, [](short) {});
    loop.wait();
    guard::Message reply;
    ssize_t n = ::read(m_reports.get(), &reply, sizeof reply);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
      continue;
    }
    if (n != static_cast<ssize_t>(sizeof reply)) {
      reclaim_terminal();
      throw Error(ExitCode::internal, "the guard process died before starting the command");
    }
    if (reply.kind == guard::started) {
      m_started = true;
      return;
    }
    if (reply.kind == guard::spawn_failed) {
      reclaim_terminal();
      ExitCode code = reply.value == ENOENT ? ExitCode::not_found : ExitCode::cannot_execute;
      throw Error(code, "cannot run '{}': {}", spec.argv[0], std::strerror(reply.value));
    }
  }
}

void exec_in_place(const CommandSpec& spec)
{
  std::string block = environment_block(spec);
  std::vector<char*> envp;
  for (std::size_t pos = 0; pos < block.size(); pos = block.find('\0', pos) + 1) {
    envp.push_back(block.data() + pos);
  }
  envp.push_back(nullptr);
  std::vector<char*> argv;
  for (const std::string& word : spec.argv) {
    argv.push_back(const_cast<char*>(word.c_str()));
  }
  argv.push_back(nullptr);
  std::fflush(stdout);
  // As under the guard, the command gets 0, 1 and 2 alone: the store's client libraries (the
  // ZooKeeper one) leave descriptors without close-on-exec. Marked, not closed: an exec that
  // fails returns to a dlock that still has them.
  if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    for (int fd : util::open_descriptors()) {
      ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
    }
  }
  ::signal(SIGPIPE, SIG_DFL);                   // dlock ignores it; a command must not inherit that
  ::execvpe(argv[0], argv.data(), envp.data()); // runs a script without "#!" with /bin/sh
  int error = errno;
  ExitCode code = error == ENOENT ? ExitCode::not_found : ExitCode::cannot_execute;
  throw Error(code, "cannot run '{}': {}", spec.argv[0], std::strerror(error));
}

void ProcessGroup::signal_group(int sig) const noexcept
{
  if (m_started && !m_exited) {
    ::kill(-m_guard, sig);
  }
}

void ProcessGroup::kill_all() const noexcept
{
  if (!m_started || m_exited) {
    return;
  }
  util::TimePoint t = util::monotonic_now();
  set_deadlines(t, t);
  try {
    for (pid_t pid : live_descendants(m_guard)) {
      ::kill(pid, SIGKILL); // in case the guard cannot act (stopped by someone)
    }
  } catch (...) {
    // out of memory: the guard still kills them all
  }
}

void ProcessGroup::set_deadlines(util::TimePoint terminate_at,
                                 util::TimePoint kill_at) const noexcept
{
  guard::Message message;
  message.kind = guard::deadlines;
  message.a = nanos(terminate_at);
  message.b = nanos(kill_at);
  send(&message, sizeof message);
}

std::optional<CommandEvent> ProcessGroup::next_event()
{
  if (m_exited) {
    return std::nullopt;
  }
  guard::Message report;
  ssize_t n = 0;
  do {
    n = ::read(m_reports.get(), &report, sizeof report);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EAGAIN) {
    return std::nullopt;
  }
  using Kind = CommandEvent::Kind;
  if (n != static_cast<ssize_t>(sizeof report)) {
    kill_all();
    m_exited = true;
    reclaim_terminal();
    return CommandEvent{Kind::guard_lost, 0};
  }
  switch (report.kind) {
  case guard::stopped:
    return CommandEvent{Kind::stopped, report.value};
  case guard::continued:
    return CommandEvent{Kind::continued, 0};
  case guard::terminal_signal:
    return CommandEvent{Kind::terminal_signal, report.value};
  case guard::deadline_passed:
    return CommandEvent{Kind::deadline_passed, report.value};
  case guard::exited:
    m_exited = true;
    reclaim_terminal();
    return CommandEvent{Kind::exited, shell_status(report.value),
                        WIFSIGNALED(report.value) ? WTERMSIG(report.value) : 0};
  default:
    return next_event();
  }
}

bool ProcessGroup::job_control() const noexcept { return m_tty && process::job_control(m_guard); }

void ProcessGroup::reclaim_terminal() noexcept
{
  if (m_tty && m_guard > 0 && ::tcgetpgrp(m_tty.get()) == m_guard) {
    set_foreground(m_tty.get(), ::getpgrp());
  }
}

void ProcessGroup::hand_terminal_over() noexcept
{
  if (m_may_take_terminal && m_guard > 0 && ::tcgetpgrp(m_tty.get()) == ::getpgrp()) {
    set_foreground(m_tty.get(), m_guard);
  }
}

void ProcessGroup::resume() noexcept
{
  hand_terminal_over();
  signal_group(SIGCONT);
}

} // namespace dlock::process

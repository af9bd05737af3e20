#include "commands/acquire_keep.hpp"

#include "commands/keep_record.hpp"
#include "hold/acquisition.hpp"
#include "hold/lease_keeper.hpp"
#include "process/process_table.hpp"
#include "process/signals.hpp"
#include "util/forked.hpp"
#include "util/syslog.hpp"
#include "util/text.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace dlock::commands {

using util::Millis;
using util::TimePoint;

namespace {

// The keep process's answer, one "field value" line each: the attempt's outcome (hold::Taken),
// or the error it ended with. Values are single lines; the parent caps what it reads.
std::string encode(const hold::Taken& taken)
{
  std::string fences;
  for (std::int64_t fence : taken.fences) {
    fences += (fences.empty() ? "" : ",") + std::to_string(fence);
  }
  return fmt::format(
    "acquired {}\nfence {}\nsent_at {}\nvalidity {}\nsignal {}\nsuperseded {}\n"
    "fences {}\nheld_by {}\n",
    taken.acquired ? 1 : 0, taken.fence,
    std::chrono::duration_cast<std::chrono::nanoseconds>(taken.sent_at.time_since_epoch()).count(),
    taken.validity ? taken.validity->count() : -1, taken.signal, taken.superseded ? 1 : 0, fences,
    util::one_line(taken.held_by.c_str()));
}

std::string encode(ExitCode code, std::string_view message)
{
  return fmt::format("error {}\nmessage {}\n", static_cast<int>(code),
                     util::one_line(std::string(message).c_str()));
}

// The answer read back: the outcome, or the keep process's error thrown here.
hold::Taken decode(const std::string& answer)
{
  hold::Taken taken;
  std::optional<int> error;
  std::string message;
  std::size_t at = 0;
  while (at < answer.size()) {
    std::size_t end = answer.find('\n', at);
    std::string line = answer.substr(at, end == std::string::npos ? end : end - at);
    at = end == std::string::npos ? answer.size() : end + 1;
    std::size_t space = line.find(' ');
    std::string field = line.substr(0, space);
    std::string value = space == std::string::npos ? "" : line.substr(space + 1);
    auto number = [&value] { return std::strtoll(value.c_str(), nullptr, 10); };
    if (field == "acquired") {
      taken.acquired = number() == 1;
    } else if (field == "fence") {
      taken.fence = number();
    } else if (field == "sent_at") {
      taken.sent_at = TimePoint(std::chrono::nanoseconds(number()));
    } else if (field == "validity" && number() >= 0) {
      taken.validity = Millis(number());
    } else if (field == "signal") {
      taken.signal = static_cast<int>(number());
    } else if (field == "superseded") {
      taken.superseded = number() == 1;
    } else if (field == "fences") {
      for (std::size_t from = 0; from < value.size();) {
        std::size_t comma = value.find(',', from);
        taken.fences.push_back(std::strtoll(value.c_str() + from, nullptr, 10));
        from = comma == std::string::npos ? value.size() : comma + 1;
      }
    } else if (field == "held_by") {
      taken.held_by = value;
    } else if (field == "error") {
      error = static_cast<int>(number());
    } else if (field == "message") {
      message = value;
    }
  }
  if (error) {
    throw Error(static_cast<ExitCode>(*error), "{}", message);
  }
  return taken;
}

// What the keep process runs: holds the lock for owner until it ends, the lock is released,
// --max-hold, or the lease is lost; then exits. Detached from the terminal and the caller's
// descriptors, it reports to syslog.
class KeepLoop final : private hold::LeaseEvents {
public:
  KeepLoop(Context& context, std::vector<lock::LockName> names, std::string token, Millis ttl,
           const KeepOptions& options, pid_t owner)
    : m_context(context), m_names(std::move(names)), m_shown(lock::join_names(m_names)),
      m_token(std::move(token)), m_ttl(ttl), m_options(options), m_owner(owner), m_record(m_token)
  {
  }

  // Keeps the lock the acquisition took (its lease ran from taken.sent_at).
  [[noreturn]] void run(const hold::Taken& taken)
  {
    detach();
    util::set_syslog(true); // the keep process's only voice: it has no terminal
    try {
      keep(taken);
    } catch (const std::exception& error) {
      // The lock is held and no longer renewed: a loss, told as one (and it expires).
      lose(fmt::format("the holder process failed: {}", error.what()));
    } catch (...) {
      lose("the holder process failed");
    }
  }

private:
  [[noreturn]] void keep(const hold::Taken& taken)
  {
    process::SignalFd signals({SIGTERM, SIGINT, SIGHUP});
    m_record.keep_process_started(::getpid());
    process::ProcessWatch& owner = m_owner_watch.emplace(m_owner);

    hold::Clock& clock = hold::system_clock();
    lock::WatchdogPolicy policy;
    policy.lease.ttl = taken.validity.value_or(m_ttl);
    policy.lease.request_limit = m_context.request_timeout;
    policy.lease.drift = m_context.store.traits().clock_drift(m_ttl);
    // No command to stop: the lease counts as lost when it could expire, not earlier.
    policy.lease.kill_after = Millis(0);
    policy.max_hold = m_options.max_hold;
    m_context.store.limit_blocking(policy.lease.request_timeout());
    const TimePoint started = clock.now();
    hold::LeaseKeeper keeper(clock, m_context.store,
                             hold::KeptLock{m_names, m_token, m_options.kind, m_ttl},
                             lock::Watchdog(policy, taken.sent_at, started), *this);
    util::syslog_event(
      util::EventLevel::info, "holding",
      {{"key", m_shown}, {"owner_pid", std::to_string(m_owner)}, {"by", "acquire --keep"}});
    hold::KeepEnd end = keeper.keep_for(owner, signals);
    switch (end.why) {
    case hold::KeepEnd::Why::owner_ended:
      finish(fmt::format("pid {} ended", m_owner));
    case hold::KeepEnd::Why::signal:
      finish(fmt::format("signal {}", end.signal));
    case hold::KeepEnd::Why::stopped:
      break;
    }
    switch (keeper.watchdog().stop_reason()) {
    case lock::StopReason::lost:
      // Replaced (--replace): not released, since the script may still be at work; the
      // replacer has it when the lease ends.
      lose(keeper.replaced() ? keeper.loss_cause()
                             : "the lock is no longer held by this token (it expired or was "
                               "taken over, e.g. release --force)");
    case lock::StopReason::max_hold:
      finish("--max-hold ran out");
    case lock::StopReason::unconfirmed:
    case lock::StopReason::none:
      break;
    }
    if (m_options.max_hold && clock.now() >= started + *m_options.max_hold) {
      finish("--max-hold ran out"); // at the same time: --max-hold first, as it always was
    }
    lose("no renewal was confirmed before the lease could expire (the lock store did not answer)");
  }

  // The loop above reads the watchdog's decisions once it stops.
  void act(const lock::Actions&) override {}

  void round_ended(hold::RenewalVerdict verdict, const std::string& first_error) override
  {
    if (verdict == hold::RenewalVerdict::failed) {
      util::syslog_event(util::EventLevel::warning, "renewal_failed",
                         {{"key", m_shown}, {"reason", first_error}, {"by", "acquire --keep"}});
    }
    if (verdict == hold::RenewalVerdict::refused && m_record.released()) {
      quit(); // released with the token: nothing was lost
    }
  }

  // Out of the caller's session and terminal (its descriptors went when it was forked):
  // `T=$(dlock acquire --keep ...)` returns once dlock exits, and a CI runner that waits for
  // its step's output is not held.
  static void detach()
  {
    ::setsid();
    int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd <= 2 && null >= 0; ++fd) {
      ::dup2(null, fd);
    }
    if (null > 2) {
      ::close(null);
    }
  }

  // Releases every key and exits.
  [[noreturn]] void finish(const std::string& why)
  {
    try {
      hold::release_all(m_context.store, m_names, m_token, m_context.request_timeout);
      util::syslog_event(util::EventLevel::info, "released",
                         {{"key", m_shown}, {"why", why}, {"by", "acquire --keep"}});
    } catch (const Error& error) {
      util::syslog_event(
        util::EventLevel::warning, "release_failed",
        {{"key", m_shown}, {"why", why}, {"reason", error.what()}, {"by", "acquire --keep"}});
    }
    quit();
  }

  [[noreturn]] void lose(const std::string& reason)
  {
    m_record.record_lost(reason);
    util::syslog_event(util::EventLevel::warning, "lost",
                       {{"key", m_shown}, {"reason", reason}, {"by", "acquire --keep"}});
    if (m_options.on_lost_signal != 0 && m_owner_watch) {
      m_owner_watch->signal(m_options.on_lost_signal); // the owner itself, not a pid reused
    }
    m_context.store.abandon();
    ::_exit(0);
  }

  [[noreturn]] void quit()
  {
    m_context.store.abandon();
    m_record.forget();
    ::_exit(0);
  }

  Context& m_context;
  std::vector<lock::LockName> m_names;
  std::string m_shown;
  std::string m_token;
  Millis m_ttl;
  KeepOptions m_options;
  pid_t m_owner;
  std::optional<process::ProcessWatch> m_owner_watch; // its pidfd, opened once detached
  KeepRecord m_record;
};

// The keep process's answer is a few lines: anything past this is not its.
constexpr std::size_t max_answer = 64 * 1024;

bool write_all(int fd, std::string_view text)
{
  while (!text.empty()) {
    ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// What the forked keep process does: takes the lock as its holder, answers on answer_fd, and
// keeps what it took.
[[noreturn]] void take_and_keep(Context& context, std::vector<lock::LockName> names,
                                hold::WaitPolicy policy, lock::AcquireRequest request,
                                const KeepOptions& options, pid_t owner, int answer_fd)
{
  // None of the caller's descriptors but stderr, which says what the wait is; the store has
  // opened nothing yet.
  int moved = ::fcntl(answer_fd, F_DUPFD_CLOEXEC, 3);
  if (moved >= 0) {
    answer_fd = moved;
  }
  ::close_range(3, static_cast<unsigned>(answer_fd) - 1, 0);
  ::close_range(static_cast<unsigned>(answer_fd) + 1, ~0u, 0);
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::close(null);
  }
  process::SignalFd signals({SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2});
  request.holder.pid = ::getpid();
  request.holder.command =
    fmt::format("acquire --keep for pid {}: {}", owner, request.holder.command)
      .substr(0, lock::max_command_length);
  hold::Taken taken;
  std::string answer;
  try {
    taken = hold::Acquisition(hold::system_clock(), context.store, signals, policy, names, request)
              .finish();
    answer = encode(taken);
  } catch (const Error& error) {
    answer = encode(error.code(), error.what());
  } catch (const std::exception& error) {
    answer = encode(ExitCode::internal, fmt::format("internal error: {}", error.what()));
  }
  bool told = write_all(answer_fd, answer);
  ::close(answer_fd);
  if (taken.acquired && !told) {
    // Nobody got the token, so nobody could ever release the lock: give it back.
    try {
      hold::release_all(context.store, names, request.token, context.request_timeout);
    } catch (const Error&) {
      // it expires, or goes with this process's session
    }
  }
  if (!taken.acquired || !told) {
    context.store.abandon();
    ::_exit(0);
  }
  KeepLoop(context, std::move(names), request.token, request.ttl, options, owner).run(taken);
}

} // namespace

KeepProcess::KeepProcess(Context& context, std::vector<lock::LockName> names,
                         hold::WaitPolicy policy, lock::AcquireRequest request,
                         const KeepOptions& options, pid_t owner)
{
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw Error(ExitCode::internal, "acquire --keep: pipe failed: {}", std::strerror(errno));
  }
  m_pid = ::fork();
  if (m_pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error(ExitCode::internal, "acquire --keep: fork failed: {}", std::strerror(errno));
  }
  if (m_pid == 0) {
    util::run_forked([&] {
      take_and_keep(context, std::move(names), policy, std::move(request), options, owner, fds[1]);
    });
  }
  ::close(fds[1]);
  m_answer = fds[0];
}

KeepProcess::~KeepProcess()
{
  if (m_answer >= 0) {
    ::close(m_answer);
  }
}

hold::Taken KeepProcess::outcome(process::SignalFd& signals)
{
  std::string answer;
  int signal = 0;
  char buffer[512];
  while (m_answer >= 0) {
    pollfd fds[2] = {{m_answer, POLLIN, 0}, {signals.fd(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) {
        continue;
      }
      throw Error(ExitCode::internal, "acquire --keep: poll failed: {}", std::strerror(errno));
    }
    if ((fds[1].revents & POLLIN) != 0) {
      if (std::optional<int> got = signals.read(); got && signal == 0) {
        signal = *got;
        ::kill(m_pid, SIGTERM); // it gives up, or lets go of what it took
      }
    }
    if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      ssize_t n = ::read(m_answer, buffer, sizeof buffer);
      if (n > 0 && answer.size() < max_answer) {
        answer.append(buffer, static_cast<std::size_t>(n));
      } else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
        ::close(m_answer);
        m_answer = -1;
      }
    }
  }
  if (signal != 0) {
    await_exit();
    return hold::Taken{.signal = signal};
  }
  if (answer.empty()) {
    await_exit();
    throw Error(ExitCode::internal, "acquire --keep: the holder process ended before it answered");
  }
  hold::Taken taken;
  try {
    taken = decode(answer);
  } catch (const Error&) {
    await_exit();
    throw;
  }
  if (!taken.acquired) {
    await_exit();
  }
  return taken;
}

void KeepProcess::await_exit() noexcept
{
  // It exits as soon as it has closed its store's sessions; past this, it is left to init.
  constexpr int longest_ms = 5000;
  process::ProcessWatch watch(m_pid);
  if (watch.fd() >= 0) {
    pollfd ended{watch.fd(), POLLIN, 0};
    while (::poll(&ended, 1, longest_ms) < 0 && errno == EINTR) {
    }
  }
  ::waitpid(m_pid, nullptr, WNOHANG);
}

void KeepProcess::stop() noexcept
{
  if (m_pid > 0) {
    ::kill(m_pid, SIGTERM);
  }
}

} // namespace dlock::commands

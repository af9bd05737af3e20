#include "commands/acquire_keep.hpp"

#include "commands/keep_record.hpp"
#include "hold/acquisition.hpp"
#include "hold/lease_keeper.hpp"
#include "process/process_table.hpp"
#include "process/signals.hpp"
#include "util/forked.hpp"
#include "util/syslog.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>

namespace dlock::commands {

using util::Millis;
using util::TimePoint;

namespace {

// The go message: when the lease started (steady clock, ns) and its validity (ms, -1: TTL).
struct Go {
  std::int64_t sent_at_ns = 0;
  std::int64_t validity_ms = -1;
};

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

  [[noreturn]] void run(int go_fd)
  {
    detach(go_fd);
    Go go;
    if (::read(go_fd, &go, sizeof go) != static_cast<ssize_t>(sizeof go)) {
      ::_exit(0); // nothing was taken, or dlock is gone
    }
    ::close(go_fd);
    util::set_syslog(true); // the keep process's only voice: it has no terminal
    try {
      keep(go);
    } catch (const std::exception& error) {
      // The lock is held and no longer renewed: a loss, told as one (and it expires).
      lose(fmt::format("the holder process failed: {}", error.what()));
    } catch (...) {
      lose("the holder process failed");
    }
  }

private:
  [[noreturn]] void keep(const Go& go)
  {
    process::SignalFd signals({SIGTERM, SIGINT, SIGHUP});
    m_record.keep_process_started(::getpid());
    process::ProcessWatch& owner = m_owner_watch.emplace(m_owner);

    hold::Clock& clock = hold::system_clock();
    lock::WatchdogPolicy policy;
    policy.lease.ttl = go.validity_ms >= 0 ? Millis(go.validity_ms) : m_ttl;
    policy.lease.request_limit = m_context.request_timeout;
    policy.lease.drift = m_context.store.traits().clock_drift(m_ttl);
    // No command to stop: the lease counts as lost when it could expire, not earlier.
    policy.lease.kill_after = Millis(0);
    policy.max_hold = m_options.max_hold;
    m_context.store.limit_blocking(policy.lease.request_timeout());
    const TimePoint started = clock.now();
    hold::LeaseKeeper keeper(
      clock, m_context.store, hold::KeptLock{m_names, m_token, m_options.kind, m_ttl},
      lock::Watchdog(policy, TimePoint(std::chrono::nanoseconds(go.sent_at_ns)), started), *this);
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

  // Out of the caller's session, terminal and descriptors: `T=$(dlock acquire --keep ...)`
  // returns once dlock exits, and a CI runner that waits for its step's output is not held.
  void detach(int& go_fd)
  {
    ::setsid();
    int null = ::open("/dev/null", O_RDWR);
    for (int fd = 0; fd <= 2 && null >= 0; ++fd) {
      ::dup2(null, fd);
    }
    int moved = ::fcntl(go_fd, F_DUPFD_CLOEXEC, 3);
    if (moved >= 0) {
      go_fd = moved;
    }
    ::close_range(3, static_cast<unsigned>(go_fd) - 1, 0);
    ::close_range(static_cast<unsigned>(go_fd) + 1, ~0u, 0);
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

} // namespace

KeepProcess::KeepProcess(Context& context, std::vector<lock::LockName> names, std::string token,
                         Millis ttl, const KeepOptions& options, pid_t owner)
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
      ::close(fds[1]);
      KeepLoop loop(context, std::move(names), std::move(token), ttl, options, owner);
      loop.run(fds[0]);
    });
  }
  ::close(fds[0]);
  m_go = fds[1];
}

KeepProcess::~KeepProcess() { abort(); }

void KeepProcess::go(TimePoint sent_at, std::optional<Millis> validity)
{
  Go message{
    std::chrono::duration_cast<std::chrono::nanoseconds>(sent_at.time_since_epoch()).count(),
    validity ? validity->count() : -1};
  ssize_t n = ::write(m_go, &message, sizeof message);
  abort();
  if (n != static_cast<ssize_t>(sizeof message)) {
    throw Error(ExitCode::internal, "acquire --keep: the holder process did not start");
  }
}

void KeepProcess::abort() noexcept
{
  if (m_go >= 0) {
    ::close(m_go);
    m_go = -1;
  }
}

void KeepProcess::stop() noexcept
{
  abort();
  if (m_pid > 0) {
    ::kill(m_pid, SIGTERM);
  }
}

} // namespace dlock::commands

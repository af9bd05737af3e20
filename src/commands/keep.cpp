#include "commands/keep.hpp"

#include "commands/acquire_wait.hpp"
#include "commands/renewal_round.hpp"
#include "lock/holder.hpp"
#include "lock/lease.hpp"
#include "process/process_table.hpp"
#include "process/signals.hpp"
#include "util/event_loop.hpp"
#include "util/files.hpp"
#include "util/forked.hpp"
#include "util/json.hpp"
#include "util/sha256.hpp"
#include "util/syslog.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

namespace dlock::commands {

using util::Millis;
using util::TimePoint;

namespace {

// A directory of the user's own that nobody else can write, created if missing; "" if none.
std::string state_directory()
{
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  std::string dir = runtime != nullptr && *runtime == '/' ? std::string(runtime) + "/dlock"
                                                          : fmt::format("/tmp/dlock-{}", ::getuid());
  ::mkdir(dir.c_str(), 0700);
  struct stat st{};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || util::untrusted_because(st)) {
    return {}; // the config files' rule: another user could plant the holder's records there
  }
  return dir;
}

void write_file(const std::string& path, const std::string& text)
{
  if (path.empty()) {
    return;
  }
  std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << text;
  }
  ::rename(temporary.c_str(), path.c_str());
}

std::optional<std::string> read_file(const std::string& path)
{
  std::ifstream in(path);
  if (path.empty() || !in) {
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string utc_now()
{
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", utc.tm_year + 1900, utc.tm_mon + 1,
                     utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec);
}

// The go message: when the lease started (steady clock, ns) and its validity (ms, -1: TTL).
struct Go {
  std::int64_t sent_at_ns = 0;
  std::int64_t validity_ms = -1;
};

TimePoint now() { return util::monotonic_now(); }

// Holds the lock for owner until it ends, the lock is released, --max-hold, or the lease is
// lost; then exits. Runs in the forked holder, detached from the terminal and the caller's
// descriptors, reporting to syslog.
class Holder {
public:
  Holder(Context& context, std::vector<lock::LockName> names, std::string token, Millis ttl,
         const KeepOptions& options, pid_t owner)
    : m_context(context),
      m_names(std::move(names)),
      m_shown(lock::join_names(m_names)),
      m_token(std::move(token)),
      m_ttl(ttl),
      m_options(options),
      m_owner(owner),
      m_record(m_token)
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
    util::set_syslog(true); // the holder's only voice: it has no terminal
    try {
      hold(go);
    } catch (const std::exception& error) {
      // The lock is held and no longer renewed: a loss, told as one (and it expires).
      lose(fmt::format("the holder process failed: {}", error.what()));
    } catch (...) {
      lose("the holder process failed");
    }
  }

private:
  [[noreturn]] void hold(const Go& go)
  {
    process::SignalFd signals({SIGTERM, SIGINT, SIGHUP});
    m_record.holder_started(::getpid());
    process::ProcessWatch& owner = m_owner_watch.emplace(m_owner);

    lock::LeasePolicy policy;
    policy.ttl = go.validity_ms >= 0 ? Millis(go.validity_ms) : m_ttl;
    policy.request_limit = m_context.request_timeout;
    policy.drift = m_context.store.traits().clock_drift(m_ttl);
    lock::Lease lease(policy, TimePoint(std::chrono::nanoseconds(go.sent_at_ns)));
    const TimePoint hold_until =
      m_options.max_hold ? now() + *m_options.max_hold : TimePoint::max();
    m_context.store.limit_blocking(policy.request_timeout());
    RenewalRound round;
    util::syslog_event(util::EventLevel::info, "holding",
                       {{"key", m_shown}, {"owner_pid", std::to_string(m_owner)}, {"by", "acquire --keep"}});

    while (true) {
      TimePoint t = now();
      if (owner.ended()) {
        finish(fmt::format("pid {} ended", m_owner));
      }
      if (t >= hold_until) {
        finish("--max-hold ran out");
      }
      if (lease.in_flight() && t >= lease.request_deadline()) {
        m_context.store.abandon();
        round.reset();
        lease.renewal_failed(t);
      }
      if (t >= lease.kill_at()) {
        lose("no renewal was confirmed before the lease could expire (the lock store did not answer)");
      }
      if (!lease.in_flight() && t >= lease.next_renewal_at()) {
        round.start(m_context.store, m_names, lock::RenewRequest{m_token, m_ttl, false, {}, m_options.kind.has_slots()});
        lease.renewal_sent(t);
      }
      util::EventLoop loop;
      int signal = 0;
      loop.watch(signals.fd(), POLLIN, [&](short) {
        while (auto sig = signals.read()) {
          signal = *sig;
        }
      });
      bool owner_ended = false;
      if (owner.fd() >= 0) {
        loop.watch(owner.fd(), POLLIN, [&](short) { owner_ended = true; });
      }
      m_context.store.watch(loop);
      TimePoint wake = std::min({lease.in_flight() ? lease.request_deadline() : lease.next_renewal_at(),
                                 lease.kill_at(), hold_until});
      if (owner.fd() < 0) {
        wake = std::min(wake, now() + std::chrono::seconds(1)); // no pidfd: look now and then
      }
      loop.wake_at(wake);
      loop.wait();
      if (signal != 0) {
        finish(fmt::format("signal {}", signal));
      }
      if (owner_ended) {
        finish(fmt::format("pid {} ended", m_owner));
      }
      while (std::optional<lock::Outcome> outcome = m_context.store.next_outcome()) {
        if (outcome->op == lock::Outcome::Op::disconnected) {
          lease.renew_soon(now(), outcome->lease_ended);
          continue;
        }
        if (outcome->op != lock::Outcome::Op::renew) {
          continue;
        }
        switch (round.add(*outcome)) {
        case RenewalRound::Verdict::pending:
          break;
        case RenewalRound::Verdict::confirmed:
          lease.renewal_confirmed();
          break;
        case RenewalRound::Verdict::failed:
          util::syslog_event(util::EventLevel::warning, "renewal_failed",
                             {{"key", m_shown}, {"reason", round.error()}, {"by", "acquire --keep"}});
          lease.renewal_failed(now());
          break;
        case RenewalRound::Verdict::refused:
          if (m_record.released()) {
            quit(); // released with the token: nothing was lost
          }
          lose("the lock is no longer held by this token (it expired or was taken over, e.g. "
               "release --force)");
        }
      }
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
      release_all(m_context, m_names, m_token);
      util::syslog_event(util::EventLevel::info, "released",
                         {{"key", m_shown}, {"why", why}, {"by", "acquire --keep"}});
    } catch (const Error& error) {
      util::syslog_event(util::EventLevel::warning, "release_failed",
                         {{"key", m_shown}, {"why", why}, {"reason", error.what()},
                          {"by", "acquire --keep"}});
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

KeepRecord::KeepRecord(const std::string& token)
  : m_fingerprint(util::sha256_hex("dlock keep holder\n" + token).substr(0, 32))
{
  std::string dir = state_directory();
  if (!dir.empty()) {
    m_base = dir + "/" + lock::token_fingerprint(token); // never the token itself
  }
}

std::string KeepRecord::path(const char* suffix) const
{
  return m_base.empty() ? std::string() : m_base + suffix;
}

void KeepRecord::holder_started(pid_t pid) const
{
  ::unlink(path(".lost").c_str());
  std::optional<std::uint64_t> start = process::start_time(pid);
  write_file(path(".holder"), fmt::format("{} {} {}\n", pid, start.value_or(0), m_fingerprint));
}

bool KeepRecord::signal_holder(int sig) const
{
  std::optional<std::string> text = read_file(path(".holder"));
  if (!text) {
    return false;
  }
  std::istringstream fields(*text);
  long pid = 0;
  std::uint64_t start = 0;
  std::string fingerprint;
  if (!(fields >> pid >> start >> fingerprint) || pid <= 1 || start == 0
      || fingerprint != m_fingerprint) {
    return false;
  }
  process::ProcessWatch holder(static_cast<pid_t>(pid));
  return holder.started_at(start) && holder.signal(sig);
}

void KeepRecord::mark_released() const { write_file(path(".released"), "1"); }

void KeepRecord::unmark_released() const { ::unlink(path(".released").c_str()); }

bool KeepRecord::released() const { return read_file(path(".released")).has_value(); }

void KeepRecord::record_lost(const std::string& reason) const
{
  write_file(path(".lost"), utc_now() + ": " + reason);
  ::unlink(path(".holder").c_str());
}

std::optional<std::string> KeepRecord::lost() const { return read_file(path(".lost")); }

void KeepRecord::forget() const
{
  for (const char* suffix : {".holder", ".released", ".lost"}) {
    ::unlink(path(suffix).c_str());
  }
}

Keeper::Keeper(Context& context, std::vector<lock::LockName> names, std::string token, Millis ttl,
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
      ::close(fds[1]);
      Holder holder(context, std::move(names), std::move(token), ttl, options, owner);
      holder.run(fds[0]);
    });
  }
  ::close(fds[0]);
  m_go = fds[1];
}

Keeper::~Keeper() { abort(); }

void Keeper::go(TimePoint sent_at, std::optional<Millis> validity)
{
  Go message{std::chrono::duration_cast<std::chrono::nanoseconds>(sent_at.time_since_epoch()).count(),
             validity ? validity->count() : -1};
  ssize_t n = ::write(m_go, &message, sizeof message);
  abort();
  if (n != static_cast<ssize_t>(sizeof message)) {
    throw Error(ExitCode::internal, "acquire --keep: the holder process did not start");
  }
}

void Keeper::abort() noexcept
{
  if (m_go >= 0) {
    ::close(m_go);
    m_go = -1;
  }
}

void Keeper::stop() noexcept
{
  abort();
  if (m_pid > 0) {
    ::kill(m_pid, SIGTERM);
  }
}

} // namespace dlock::commands

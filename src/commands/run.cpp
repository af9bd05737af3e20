#include "commands/run.hpp"

#include "commands/acquire_wait.hpp"
#include "lock/client.hpp"
#include "lock/lease.hpp"
#include "process/child.hpp"
#include "process/signals.hpp"
#include "util/log.hpp"
#include "util/random.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <array>

namespace dlock::commands {

using namespace std::chrono_literals;
using util::Millis;
using util::TimePoint;

namespace {

TimePoint now() { return util::monotonic_now(); }

std::string join(const std::vector<std::string>& words)
{
  std::string line;
  for (const auto& word : words) {
    if (!line.empty()) {
      line.push_back(' ');
    }
    line += word;
  }
  return line;
}

// Releases the lock on the way out of any path that does not release it explicitly.
class HeldLock {
public:
  HeldLock(lock::LockClient& client, std::string token, Millis ttl, Millis timeout)
    : m_client(client), m_token(std::move(token)), m_ttl(ttl), m_timeout(timeout)
  {
  }
  HeldLock(const HeldLock&) = delete;
  HeldLock& operator=(const HeldLock&) = delete;
  ~HeldLock() noexcept
  {
    if (!m_done) {
      try {
        release();
      } catch (const Error& error) {
        util::log_warning("could not release lock '{}' ({}); it expires within {}",
                          m_client.keys().name, error.what(), util::format_duration(m_ttl));
      } catch (...) {
      }
    }
  }
  // Compare-and-delete; true if we still held it. Throws on Redis errors.
  bool release()
  {
    m_done = true;
    return m_client.release(m_token, now() + m_timeout);
  }

private:
  lock::LockClient& m_client;
  std::string m_token;
  Millis m_ttl;
  Millis m_timeout;
  bool m_done = false;
};

// Why dlock is stopping the command; the first two end in 76, the last in 124.
enum class StopReason { none, lost, unconfirmed, max_hold };

// Supervises a running command: renews the lease, forwards signals, enforces deadlines.
class Supervisor {
public:
  Supervisor(lock::LockClient& client, const cli::RunOptions& options, std::string token,
             lock::Lease lease, process::ProcessGroup& child, process::SignalFd& signals)
    : m_client(client),
      m_options(options),
      m_token(std::move(token)),
      m_lease(lease),
      m_child(child),
      m_signals(signals),
      m_started(now())
  {
  }

  // Runs until the command exits; returns its shell status.
  int wait_for_exit()
  {
    while (true) {
      on_timers(now());
      std::array<pollfd, 2> fds{pollfd{m_signals.fd(), POLLIN, 0},
                                pollfd{m_client.connection().fd(),
                                       m_client.connection().poll_events(), 0}};
      nfds_t count = fds[1].fd >= 0 && fds[1].events != 0 ? 2 : 1;
      auto wait = std::chrono::duration_cast<Millis>(next_wakeup() - now());
      int timeout = static_cast<int>(std::clamp<long long>(wait.count() + 1, 0, 60'000));
      int ready = ::poll(fds.data(), count, timeout);
      if (ready <= 0) {
        continue;
      }
      if ((fds[0].revents & POLLIN) != 0) {
        while (auto sig = m_signals.read()) {
          if (*sig != SIGCHLD) {
            util::log_verbose("forwarding signal {} to the command", *sig);
            m_child.signal_group(*sig);
          }
        }
        if (auto status = m_child.try_wait()) {
          return *status;
        }
      }
      if (count == 2 && fds[1].revents != 0) {
        on_redis_io(fds[1].revents);
      }
    }
  }

  StopReason stop_reason() const { return m_reason; }
  // With --on-lost ignore: the lease was lost, or may have lapsed, while the command ran.
  bool ran_unprotected() const { return m_lost || m_unconfirmed_past_expiry; }

private:
  void on_timers(TimePoint t)
  {
    if (m_renewing) {
      if (m_lease.in_flight() && t >= m_lease.request_deadline()) {
        util::log_verbose("renewal of lock '{}' got no reply in {}; retrying", name(),
                          util::format_duration(m_lease.policy().request_timeout()));
        m_client.connection().reset();
        m_lease.renewal_failed(t);
      }
      if (!m_lease.in_flight() && t >= m_lease.next_renewal_at()) {
        send_renewal(t, false);
      }
    }
    if (!m_lost && !m_options.on_lost_ignore) {
      if (t >= m_lease.terminate_at()) {
        begin_stop(StopReason::unconfirmed, t,
                   fmt::format("could not confirm the lease on lock '{}' with Redis for {}; "
                               "stopping the command before the lease can expire",
                               name(), util::format_duration(std::chrono::duration_cast<Millis>(
                                         t - (m_lease.expires_at() - m_options.ttl)))));
      }
      if (t >= m_lease.kill_at()) {
        hard_kill();
      }
    }
    if (m_options.on_lost_ignore && !m_lost && t >= m_lease.expires_at() && !m_unconfirmed_past_expiry) {
      m_unconfirmed_past_expiry = true;
      util::log_warning("lease on lock '{}' may have expired (Redis unreachable); the command "
                        "goes on unprotected (--on-lost ignore)",
                        name());
    }
    if (m_options.max_hold && t >= m_started + *m_options.max_hold) {
      begin_stop(StopReason::max_hold, t,
                 fmt::format("the command reached --max-hold {}; stopping it",
                             util::format_duration(*m_options.max_hold)));
    }
    if (m_kill_at && t >= *m_kill_at) {
      hard_kill();
    }
  }

  TimePoint next_wakeup() const
  {
    TimePoint next = now() + 60s;
    if (m_renewing) {
      next = std::min(next, m_lease.in_flight() ? m_lease.request_deadline() : m_lease.next_renewal_at());
    }
    if (!m_lost && !m_options.on_lost_ignore) {
      next = std::min(next, m_reason == StopReason::none ? m_lease.terminate_at() : m_lease.kill_at());
    }
    if (m_options.on_lost_ignore && !m_lost && !m_unconfirmed_past_expiry) {
      next = std::min(next, m_lease.expires_at());
    }
    if (m_options.max_hold && m_reason == StopReason::none) {
      next = std::min(next, m_started + *m_options.max_hold);
    }
    if (m_kill_at && !m_killed) {
      next = std::min(next, *m_kill_at);
    }
    return next;
  }

  void send_renewal(TimePoint t, bool with_source)
  {
    try {
      m_client.send_renew(m_token, m_options.ttl, with_source);
      m_lease.renewal_sent(t);
    } catch (const Error& error) {
      util::log_verbose("renewal of lock '{}' failed: {}", name(), error.what());
      m_lease.renewal_failed(t);
    }
  }

  void on_redis_io(short revents)
  {
    try {
      m_client.connection().process_io(revents);
      while (auto reply = m_client.connection().next_reply()) {
        on_renewal_reply(**reply);
      }
    } catch (const Error& error) {
      util::log_verbose("renewal of lock '{}' failed: {}", name(), error.what());
      m_client.connection().reset();
      m_lease.renewal_failed(now());
    }
  }

  void on_renewal_reply(const redisReply& reply)
  {
    std::optional<bool> held = m_client.parse_renew(reply);
    if (!held) { // NOSCRIPT: the script cache was flushed; send the body, same request time
      m_client.send_renew(m_token, m_options.ttl, true);
      return;
    }
    if (*held) {
      m_lease.renewal_confirmed();
      m_unconfirmed_past_expiry = false;
      util::log_verbose("renewed lease on lock '{}' for {}", name(),
                        util::format_duration(m_options.ttl));
      return;
    }
    m_lease.renewal_failed(now());
    m_renewing = false;
    m_lost = true;
    if (m_options.on_lost_ignore) {
      util::log_error("lost lock '{}': it expired or was released by someone else; the command "
                      "goes on unprotected (--on-lost ignore)",
                      name());
    } else {
      begin_stop(StopReason::lost, now(),
                 fmt::format("lost lock '{}': it expired or was released by someone else; "
                             "stopping the command",
                             name()));
    }
  }

  void begin_stop(StopReason reason, TimePoint t, const std::string& message)
  {
    if (m_reason == StopReason::none || reason == StopReason::lost) {
      if (m_reason != StopReason::lost) {
        m_reason = reason;
      }
    }
    if (m_stopping) {
      return;
    }
    m_stopping = true;
    util::log_error("{}", message);
    m_child.signal_group(SIGTERM);
    m_kill_at = t + m_lease.policy().effective_kill_after();
  }

  void hard_kill()
  {
    if (!m_killed) {
      m_killed = true;
      util::log_verbose("sending SIGKILL to the command's process group");
      m_child.signal_group(SIGKILL);
    }
  }

  const std::string& name() const { return m_client.keys().name; }

  lock::LockClient& m_client;
  const cli::RunOptions& m_options;
  std::string m_token;
  lock::Lease m_lease;
  process::ProcessGroup& m_child;
  process::SignalFd& m_signals;
  TimePoint m_started;
  bool m_renewing = true;
  bool m_lost = false;
  bool m_unconfirmed_past_expiry = false;
  bool m_stopping = false;
  bool m_killed = false;
  StopReason m_reason = StopReason::none;
  std::optional<TimePoint> m_kill_at;
};

} // namespace

int run(const cli::GlobalOptions& global, const cli::RunOptions& options)
{
  lock::validate_lock_name(options.key);
  process::SignalFd signals({SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2});
  // The guard is forked now, while nothing is at stake, so that once the lock is ours only a
  // cheap posix_spawn stands between the acquisition and the command.
  process::ProcessGroup group(signals.original_mask());
  redis::Connection connection(global.connect);
  lock::LockClient client(connection, lock::LockKeys::make(global.prefix, options.key));
  const std::string token = util::random_token();
  const lock::HolderInfo me = lock::HolderInfo::current(join(options.command));
  const Millis request_timeout = global.connect.connect_timeout;

  WaitPolicy wait_policy =
    make_wait_policy(options.no_wait, options.fair, options.wait, request_timeout);
  WaitOutcome outcome = acquire_with_wait(client, token, options.ttl, me, wait_policy, signals);
  if (outcome.signal != 0) {
    util::log_verbose("interrupted by signal {} while waiting for lock '{}'", outcome.signal,
                      options.key);
    return 128 + outcome.signal;
  }
  if (!outcome.acquired) {
    return options.conflict_exit_code;
  }
  util::log_verbose("acquired lock '{}' (fencing token {})", options.key, outcome.fence);
  HeldLock held(client, token, options.ttl, request_timeout);

  lock::LeasePolicy policy;
  policy.ttl = options.ttl;
  policy.kill_after = options.kill_after.value_or(options.ttl / 4);
  policy.request_limit = request_timeout;
  lock::Lease lease(policy, outcome.sent_at);

  process::CommandSpec spec;
  spec.argv = options.command;
  spec.env = {{"DLOCK_KEY", options.key},
              {"DLOCK_TOKEN", token},
              {"DLOCK_FENCING_TOKEN", std::to_string(outcome.fence)},
              {"DLOCK_TTL_MS", std::to_string(options.ttl.count())}};
  int status = 0;
  connection.limit_blocking(policy.request_timeout());
  Supervisor supervisor(client, options, token, lease, group, signals);
  try {
    group.spawn(spec);
    status = supervisor.wait_for_exit();
  } catch (...) {
    group.signal_group(SIGKILL); // never release while any of the command may still run
    throw;
  }

  bool stopped_for_loss = supervisor.stop_reason() == StopReason::lost
                          || supervisor.stop_reason() == StopReason::unconfirmed;
  bool released = false;
  bool gone_at_release = false;
  try {
    released = held.release();
    gone_at_release = !released;
  } catch (const Error& error) {
    util::log_warning("could not release lock '{}' ({}); it expires within {}", options.key,
                      error.what(), util::format_duration(options.ttl));
  }
  if (released) {
    util::log_verbose("released lock '{}'", options.key);
  }
  if (gone_at_release && !stopped_for_loss && !supervisor.ran_unprotected()) {
    util::log_error("lock '{}' had already been lost when the command ended (it expired or was "
                    "released by someone else)",
                    options.key);
  }
  // A confirmed release proves the lease never lapsed, even if renewals went unanswered.
  bool unprotected = supervisor.ran_unprotected() && !released;
  if (stopped_for_loss || gone_at_release || unprotected) {
    return static_cast<int>(ExitCode::lost);
  }
  if (supervisor.stop_reason() == StopReason::max_hold) {
    return static_cast<int>(ExitCode::max_hold);
  }
  return status;
}

} // namespace dlock::commands

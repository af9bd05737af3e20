#pragma once

#include "stores/redis/connection.hpp"
#include "stores/redis/url.hpp"

#include <optional>
#include <string>

namespace dlock::redis {

// Finds the master that a group of Sentinels monitors under one name, so that the data
// connection follows a failover: it is asked before every (re)connection.
class SentinelLocator {
public:
  // sentinel_password: the Sentinels' own (they may have none, or another than the data nodes').
  SentinelLocator(SentinelUrl url, std::optional<std::string> sentinel_password,
                  util::Millis timeout, TlsOptions tls);

  // The master's address now. The Sentinels are asked in turn, the last one that answered
  // first, each within its share of budget. Throws Error(unavailable) with what each said, or
  // the auth or config Error they all gave (a wrong Sentinel password is not an outage).
  Endpoint locate(util::Millis budget);

  const SentinelUrl& url() const noexcept { return m_url; }
  // How to reach the Sentinel that answered last (the first one before any answered).
  ConnectOptions last_answered() const;

private:
  SentinelUrl m_url;
  ConnectOptions m_options; // for each Sentinel; endpoint set per attempt
  std::size_t m_first = 0;  // the Sentinel to ask first
};

// Listens to a Sentinel for the announcement of a failover (+switch-master), so that a holder
// moves to the new master at once, instead of renewing on the old one until the Sentinels
// demote it, which can take seconds while the new master counts the lease down.
class SwitchListener {
public:
  explicit SwitchListener(std::shared_ptr<SentinelLocator> locator);

  // Has loop watch the subscription for this round, (re)subscribing first if needed (not more
  // often than once a second). on_switch gets the new master's address when the Sentinels
  // switch the master this store uses.
  void watch(util::EventLoop& loop, const std::function<void(const std::string&)>& on_switch);
  // Drops the subscription (the next watch makes a new one).
  void reset() noexcept { m_connection.reset(); }

private:
  void on_message(const redisReply& message,
                  const std::function<void(const std::string&)>& on_switch);

  std::shared_ptr<SentinelLocator> m_locator;
  std::optional<Connection> m_connection;
  util::TimePoint m_next_try{};
};

// ConnectOptions for the data connection of a Sentinel URL: found through locator before each
// connection, and checked to be the master (ROLE) before any command of the caller's goes out.
ConnectOptions sentinel_data_options(std::shared_ptr<SentinelLocator> locator,
                                     std::optional<std::string> password, util::Millis timeout,
                                     TlsOptions tls);

} // namespace dlock::redis

#include "stores/redis/sentinel.hpp"

#include <algorithm>
#include <charconv>

namespace dlock::redis {

SentinelLocator::SentinelLocator(SentinelUrl url, std::optional<std::string> sentinel_password,
                                 util::Millis timeout, TlsOptions tls)
  : m_url(std::move(url))
{
  m_options.password = std::move(sentinel_password);
  m_options.connect_timeout = timeout;
  m_options.tls = std::move(tls);
  m_options.password_hint = "--sentinel-password-file FILE or DLOCK_SENTINEL_PASSWORD";
}

namespace {

// The master's address from a GET-MASTER-ADDR-BY-NAME reply: [host, port]; nullopt for nil
// (the Sentinel monitors no master of that name).
std::optional<std::pair<std::string, int>> parse_address(const redisReply& reply)
{
  throw_if_error(reply, "asking a Sentinel for the master");
  if (reply.type == REDIS_REPLY_NIL) {
    return std::nullopt;
  }
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 2
      || reply.element[0]->type != REDIS_REPLY_STRING
      || reply.element[1]->type != REDIS_REPLY_STRING) {
    throw Error(ExitCode::internal, "asking a Sentinel for the master: unexpected reply ({})",
                describe(reply));
  }
  std::string_view port_text(reply.element[1]->str, reply.element[1]->len);
  int port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port < 1 || port > 65535) {
    throw Error(ExitCode::internal, "a Sentinel gave the master's port as '{}'", port_text);
  }
  return std::pair{std::string(reply.element[0]->str, reply.element[0]->len), port};
}

} // namespace

Endpoint SentinelLocator::locate(util::Millis budget)
{
  util::TimePoint deadline = util::monotonic_now() + budget;
  std::size_t count = m_url.sentinels.size();
  std::vector<std::string> failures;
  std::optional<Error> refusal; // an auth or config error, the same from every Sentinel
  bool all_refused = true;
  for (std::size_t i = 0; i < count; ++i) {
    std::size_t index = (m_first + i) % count;
    const Endpoint& sentinel = m_url.sentinels[index];
    // An even share of what is left, so that one Sentinel that hangs cannot use it all.
    auto left = std::chrono::duration_cast<util::Millis>(deadline - util::monotonic_now());
    auto share = std::max(util::Millis(1), left / static_cast<long>(count - i));
    ConnectOptions options = m_options;
    options.endpoint = sentinel;
    options.connect_timeout = std::min(options.connect_timeout, share);
    try {
      Connection connection(std::move(options));
      connection.limit_blocking(share);
      Reply reply = connection.call({"SENTINEL", "GET-MASTER-ADDR-BY-NAME", m_url.master},
                                    util::monotonic_now() + share);
      auto address = parse_address(*reply);
      if (!address) {
        failures.push_back(
          fmt::format("{}: no master named '{}'", sentinel.redacted(), m_url.master));
        all_refused = false;
        continue;
      }
      m_first = index;
      Endpoint master = m_url.data;
      master.host = std::move(address->first);
      master.port = address->second;
      return master;
    } catch (const Error& error) {
      failures.push_back(error.what());
      bool refused = error.code() == ExitCode::auth || error.code() == ExitCode::config;
      if (refused && !refusal) {
        refusal = error;
      }
      all_refused = all_refused && refused;
    }
  }
  if (all_refused && refusal) {
    throw *refusal;
  }
  std::string said;
  for (const std::string& failure : failures) {
    said += (said.empty() ? "" : "; ") + failure;
  }
  throw Error(ExitCode::unavailable, "no Sentinel gave the address of master '{}' ({})",
              m_url.master, said);
}

ConnectOptions SentinelLocator::last_answered() const
{
  ConnectOptions options = m_options;
  options.endpoint = m_url.sentinels[m_first];
  return options;
}

SwitchListener::SwitchListener(std::shared_ptr<SentinelLocator> locator)
  : m_locator(std::move(locator))
{
}

void SwitchListener::watch(util::EventLoop& loop,
                           const std::function<void(const std::string&)>& on_switch)
{
  util::TimePoint now = util::monotonic_now();
  if ((!m_connection || m_connection->fd() < 0) && now >= m_next_try) {
    m_next_try = now + std::chrono::seconds(1);
    m_connection.emplace(m_locator->last_answered());
    try {
      m_connection->subscribe("+switch-master");
    } catch (const Error&) {
      m_connection.reset(); // no Sentinel to listen to now: the data connection still works
    }
  }
  if (!m_connection || m_connection->fd() < 0) {
    loop.wake_at(m_next_try);
    return;
  }
  loop.watch(m_connection->fd(), m_connection->poll_events(), [this, on_switch](short revents) {
    try {
      m_connection->process_io(revents);
      while (std::optional<Reply> message = m_connection->next_reply()) {
        on_message(**message, on_switch);
      }
    } catch (const Error&) {
      m_connection.reset();
    }
  });
}

void SwitchListener::on_message(const redisReply& message,
                                const std::function<void(const std::string&)>& on_switch)
{
  // ["message", "+switch-master", "NAME OLD-IP OLD-PORT NEW-IP NEW-PORT"]
  if (message.type != REDIS_REPLY_ARRAY || message.elements != 3
      || message.element[2]->type != REDIS_REPLY_STRING
      || std::string_view(message.element[0]->str, message.element[0]->len) != "message") {
    return; // the subscription's confirmation
  }
  std::string_view text(message.element[2]->str, message.element[2]->len);
  std::vector<std::string_view> words;
  while (!text.empty()) {
    std::size_t space = text.find(' ');
    words.push_back(text.substr(0, space));
    text = space == std::string_view::npos ? std::string_view() : text.substr(space + 1);
  }
  if (words.size() == 5 && words[0] == m_locator->url().master) {
    on_switch(fmt::format("{}:{}", words[3], words[4]));
  }
}

ConnectOptions sentinel_data_options(std::shared_ptr<SentinelLocator> locator,
                                     std::optional<std::string> password, util::Millis timeout,
                                     TlsOptions tls)
{
  ConnectOptions options;
  options.endpoint = locator->url().data;
  options.password = std::move(password);
  options.connect_timeout = timeout;
  options.tls = std::move(tls);
  options.role_label = fmt::format("master '{}'", locator->url().master);
  options.require_master = true;
  options.locate = [locator](util::Millis budget) { return locator->locate(budget); };
  return options;
}

} // namespace dlock::redis

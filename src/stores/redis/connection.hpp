#pragma once

#include "stores/redis/reply.hpp"
#include "stores/redis/tls.hpp"
#include "stores/redis/url.hpp"
#include "util/clock.hpp"
#include "util/duration.hpp"
#include "util/event_loop.hpp"

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <hiredis/hiredis.h>

namespace dlock::redis {

// Frees a hiredis context, closing its socket (and ending its TLS session).
struct ContextDeleter {
  void operator()(redisContext* context) const noexcept { redisFree(context); }
};
using ContextPtr = std::unique_ptr<redisContext, ContextDeleter>;

// Everything needed to open (and reopen) a connection to one server.
struct ConnectOptions {
  Endpoint endpoint;
  std::optional<std::string> password; // wins over a password in the URL
  util::Millis connect_timeout{2000};
  TlsOptions tls; // used for rediss:// only
  // Finds the server afresh before each connection, within the time given (Sentinel's
  // master); endpoint is replaced by what it returns. Empty: endpoint is the server.
  std::function<Endpoint(util::Millis)> locate;
  // The role the server plays, for messages ("master 'mymaster'"); empty for a plain URL.
  std::string role_label;
  // ROLE is checked in the handshake: a node that is not a master gets none of the caller's
  // commands (a Sentinel's answer can be stale during a failover).
  bool require_master = false;
  // How the user gives this server's password, for the message when it wants one.
  std::string password_hint = "--password-file FILE or DLOCK_PASSWORD";
};

// One non-blocking connection to Redis. It can be driven from a poll loop (send, fd,
// poll_events, process_io, next_reply) or used blocking with a deadline (call). It connects
// lazily and sends AUTH and SELECT first; the caller's commands are held back until both
// succeeded, so nothing runs after a refused handshake. Any I/O failure drops the socket; the
// next send reconnects.
class Connection {
public:
  explicit Connection(ConnectOptions options);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Queues a command, connecting first if needed; its reply comes from next_reply in order.
  void send(const std::vector<std::string>& argv);
  // Sends argv and waits for its reply until deadline, discarding replies to earlier sends;
  // throws Error(unavailable) on timeout or I/O failure, classified errors on handshake errors.
  Reply call(const std::vector<std::string>& argv, util::TimePoint deadline);
  // Waits until deadline for the reply to the oldest outstanding send (for pipelining).
  Reply receive(util::TimePoint deadline);
  // Sends SUBSCRIBE channel; from then on next_reply also returns the messages published on
  // it, which no send asked for (a connection in this mode is for nothing else).
  void subscribe(const std::string& channel);

  // The socket to poll, or -1 when not connected.
  int fd() const noexcept;
  // POLLOUT as needed to make progress; POLLIN whenever connected, so that a server closing
  // an idle connection is noticed at once (0 when not connected).
  short poll_events() const noexcept;
  // Does the I/O that poll reported; throws Error on failure (after dropping the socket).
  void process_io(short revents);
  // The next complete reply to a send, if one has arrived; handshake replies are checked here
  // (a refusal throws its classified Error), and so are a peer that is not a Redis server and
  // a server that wants a password none was given for.
  std::optional<Reply> next_reply();
  // Has loop watch the socket for this round, doing the I/O when it is ready.
  void watch(util::EventLoop& loop);
  // Whether a connection attempt is under way (for timeout messages).
  bool connecting() const noexcept { return m_connecting; }
  // Replies still owed to send calls.
  std::size_t pending() const noexcept;
  // Drops the socket and anything in flight (after a timeout); the next send reconnects.
  void reset() noexcept;
  // The server, with any password redacted, for messages.
  std::string describe_endpoint() const;
  // The server's address (the last one located, through Sentinel).
  const Endpoint& endpoint() const noexcept { return m_options.endpoint; }
  // The options this connection was made with, to reach other nodes of the same deployment.
  const ConnectOptions& options() const noexcept { return m_options; }
  // Caps the time a TLS connect may block (its handshake is not driven by poll), so that a
  // caller with a deadline, like the lease supervisor, is never held up for longer.
  void limit_blocking(util::Millis limit) noexcept { m_blocking_limit = limit; }

private:
  // What a reply answers: a handshake step, or one of the caller's sends.
  enum class Expect { auth, select, role, user };

  const std::optional<std::string>& password() const noexcept;
  bool handshaking() const noexcept;
  void connect();
  ContextPtr connect_plain();
  ContextPtr connect_tls();
  [[noreturn]] void fail(ExitCode code, const std::string& message);
  void append(const std::vector<std::string>& argv, Expect expect);
  // Throws on a refused step; after the last one, sends the commands held back meanwhile.
  void on_handshake_reply(Expect step, const redisReply& reply);
  // Throws Error(auth) saying how to give a password when the server wants one and got none.
  void check_password_needed(const redisReply& reply);
  // Throws Error(unavailable) unless a ROLE reply says master.
  void check_master(const redisReply& reply);

  ConnectOptions m_options;
  bool m_located = false; // options.locate has given the endpoint at least once
  ContextPtr m_context;   // null while not connected
  bool m_connecting = false;
  bool m_write_pending = false;
  bool m_subscribed = false;     // replies arrive unasked (subscribe)
  std::deque<Expect> m_expected; // handshake steps first, then the caller's sends
  std::string m_held; // the caller's commands, encoded, while the handshake is unanswered
  std::unique_ptr<TlsContext> m_tls; // made on the first rediss:// connect; files read once
  util::Millis m_blocking_limit = util::Millis::max();
};

} // namespace dlock::redis

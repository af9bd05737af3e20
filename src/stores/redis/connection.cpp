#include "stores/redis/connection.hpp"

#include "util/event_loop.hpp"

#include "util/text.hpp"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace dlock::redis {

namespace {

// Most elements of one array reply (see where it is set).
constexpr long long max_reply_elements = 1 << 20;

} // namespace

Connection::Connection(ConnectOptions options) : m_options(std::move(options)) {}

Connection::~Connection() { reset(); }

std::string Connection::describe_endpoint() const
{
  if (m_options.role_label.empty()) {
    return m_options.endpoint.redacted();
  }
  return m_located ? fmt::format("{} at {}", m_options.role_label, m_options.endpoint.redacted())
                   : m_options.role_label;
}

void Connection::reset() noexcept
{
  m_context.reset();
  m_connecting = false;
  m_write_pending = false;
  m_subscribed = false;
  m_expected.clear();
  m_held.clear();
}

void Connection::fail(ExitCode code, const std::string& message)
{
  reset();
  // TLS 1.3 servers reject a missing client certificate only after the handshake.
  bool maybe_mtls = m_options.endpoint.tls && m_options.tls.cert_file.empty()
                    && message.find("reset by peer") != std::string::npos;
  throw Error(code, "{}: {}{}", describe_endpoint(), message,
              maybe_mtls ? " (does the server require a client certificate? see --tls-cert)" : "");
}

namespace {

// A context that failed to connect becomes an Error(unavailable); it is freed either way.
ContextPtr checked(redisContext* raw, const std::string& endpoint)
{
  ContextPtr context(raw);
  if (!context) {
    throw Error(ExitCode::internal, "out of memory creating a Redis connection");
  }
  if (context->err != 0) {
    throw Error(ExitCode::unavailable, "cannot connect to {}: {}", endpoint, context->errstr);
  }
  return context;
}

} // namespace

ContextPtr Connection::connect_plain()
{
  const Endpoint& endpoint = m_options.endpoint;
  return checked(endpoint.transport == Endpoint::Transport::unix_socket
                   ? redisConnectUnixNonBlock(endpoint.socket_path.c_str())
                   : redisConnectNonBlock(endpoint.host.c_str(), endpoint.port),
                 describe_endpoint());
}

ContextPtr Connection::connect_tls()
{
  if (!m_tls) {
    m_tls = std::make_unique<TlsContext>(m_options.tls);
  }
  auto budget = std::min(m_options.connect_timeout, m_blocking_limit);
  timeval timeout{static_cast<time_t>(budget.count() / 1000),
                  static_cast<suseconds_t>((budget.count() % 1000) * 1000)};
  const Endpoint& endpoint = m_options.endpoint;
  ContextPtr context = checked(
    redisConnectWithTimeout(endpoint.host.c_str(), endpoint.port, timeout), describe_endpoint());
  redisSetTimeout(context.get(), timeout);
  m_tls->secure(context.get(), endpoint.host, describe_endpoint());
  // From here on the connection is driven by poll like a plain one.
  context->flags &= ~REDIS_BLOCK;
  ::fcntl(context->fd, F_SETFL, ::fcntl(context->fd, F_GETFL) | O_NONBLOCK);
  return context;
}

const std::optional<std::string>& Connection::password() const noexcept
{
  return m_options.password ? m_options.password : m_options.endpoint.password;
}

bool Connection::handshaking() const noexcept
{
  return !m_expected.empty() && m_expected.front() != Expect::user;
}

void Connection::connect()
{
  if (m_options.locate) {
    m_options.endpoint = m_options.locate(std::min(m_options.connect_timeout, m_blocking_limit));
    m_located = true;
  }
  const Endpoint& endpoint = m_options.endpoint;
  const auto& password = this->password();
  if (!password && !endpoint.user.empty()) {
    throw Error(ExitCode::config, "{}: user '{}' given without a password", describe_endpoint(),
                endpoint.user);
  }
  if (endpoint.tls) {
    m_context = connect_tls();
    m_connecting = false;
  } else {
    m_context = connect_plain();
    m_connecting = true;
  }
  // Keep the socket out of the command dlock runs.
  ::fcntl(m_context->fd, F_SETFD, FD_CLOEXEC);
  // An array reply larger than any dlock asks for (a SCAN page, a key's slot holders) is another
  // tenant's data: refused as a protocol error instead of growing without bound (the hiredis
  // default is 2^32-1 elements). Bulk strings have no such knob: the scripts bound them.
  m_context->reader->maxelements = max_reply_elements;
  m_write_pending = true;

  // AUTH and SELECT go out together; the commands sent meanwhile wait for both replies (see
  // append), which costs one round trip, and only on connections that have a handshake.
  if (password) {
    if (endpoint.user.empty()) {
      append({"AUTH", *password}, Expect::auth);
    } else {
      append({"AUTH", endpoint.user, *password}, Expect::auth);
    }
  }
  if (endpoint.db != 0) {
    append({"SELECT", std::to_string(endpoint.db)}, Expect::select);
  }
  if (m_options.require_master) {
    append({"ROLE"}, Expect::role);
  }
}

void Connection::append(const std::vector<std::string>& argv, Expect expect)
{
  std::vector<const char*> pointers;
  std::vector<size_t> lengths;
  pointers.reserve(argv.size());
  lengths.reserve(argv.size());
  for (const auto& arg : argv) {
    pointers.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  char* command = nullptr;
  auto length = redisFormatCommandArgv(&command, static_cast<int>(argv.size()), pointers.data(),
                                       lengths.data());
  if (length < 0) {
    fail(ExitCode::internal, "cannot queue a command");
  }
  // A command must not reach the server before AUTH and SELECT succeeded: after a refused
  // one it would run as the wrong user or in the wrong database (and take a lock there).
  auto size = static_cast<std::size_t>(length);
  bool hold = expect == Expect::user && handshaking();
  int appended = REDIS_OK;
  if (hold) {
    m_held.append(command, size);
  } else {
    appended = redisAppendFormattedCommand(m_context.get(), command, size);
  }
  redisFreeCommand(command);
  if (appended != REDIS_OK) {
    fail(ExitCode::internal, "cannot queue a command");
  }
  m_expected.push_back(expect);
  m_write_pending = m_write_pending || !hold;
}

void Connection::send(const std::vector<std::string>& argv)
{
  if (m_context == nullptr) {
    connect();
  }
  append(argv, Expect::user);
  if (m_connecting) {
    // A connection to a near server (loopback) is often made by now: the first command then
    // leaves at once, and dlock's work meanwhile (forking the guard) overlaps its round trip.
    // A refused one is left to the event loop, which reports it as it always did.
    pollfd ready{m_context->fd, POLLOUT, 0};
    if (::poll(&ready, 1, 0) == 1 && ready.revents == POLLOUT) {
      process_io(POLLOUT);
    }
  }
  if (!m_connecting) {
    process_io(POLLOUT); // write at once; the socket buffer takes small commands
  }
}

void Connection::subscribe(const std::string& channel)
{
  send({"SUBSCRIBE", channel});
  m_subscribed = true;
}

int Connection::fd() const noexcept { return m_context != nullptr ? m_context->fd : -1; }

short Connection::poll_events() const noexcept
{
  if (m_context == nullptr) {
    return 0;
  }
  short events = 0;
  if (m_connecting || m_write_pending) {
    events |= POLLOUT;
  }
  if (!m_connecting) {
    events |= POLLIN; // replies, or the server closing an idle connection
  }
  return events;
}

std::size_t Connection::pending() const noexcept
{
  std::size_t count = 0;
  for (Expect e : m_expected) {
    count += e == Expect::user ? 1 : 0;
  }
  return count;
}

void Connection::process_io(short revents)
{
  if (m_context == nullptr) {
    return;
  }
  if (m_connecting) {
    if ((revents & (POLLOUT | POLLERR | POLLHUP)) == 0) {
      return;
    }
    int error = 0;
    socklen_t length = sizeof error;
    if (::getsockopt(m_context->fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) {
      error = errno;
    }
    if (error != 0) {
      fail(ExitCode::unavailable, fmt::format("cannot connect: {}", std::strerror(error)));
    }
    m_connecting = false;
  }
  if (m_write_pending && (revents & (POLLOUT | POLLERR | POLLHUP)) != 0) {
    int done = 0;
    if (redisBufferWrite(m_context.get(), &done) != REDIS_OK) {
      fail(ExitCode::unavailable, fmt::format("write failed: {}", m_context->errstr));
    }
    m_write_pending = done == 0;
  }
  if ((revents & (POLLIN | POLLERR | POLLHUP)) != 0) {
    if (redisBufferRead(m_context.get()) != REDIS_OK) {
      fail(ExitCode::unavailable, fmt::format("connection lost: {}", m_context->errstr));
    }
  }
}

namespace {

// The first bytes dlock has received and not parsed yet, copied because hiredis empties its
// buffer on a protocol error, and the message should show what the peer sent.
std::string unparsed_head(const redisReader& reader)
{
  if (reader.buf == nullptr || reader.pos >= reader.len) {
    return {};
  }
  return std::string(reader.buf + reader.pos, std::min<std::size_t>(reader.len - reader.pos, 60));
}

// Its first line, printable.
std::string first_line(std::string_view text)
{
  text = text.substr(0, text.find('\n'));
  if (!text.empty() && text.back() == '\r') {
    text.remove_suffix(1);
  }
  return util::printable(text);
}

} // namespace

std::optional<Reply> Connection::next_reply()
{
  while (m_context != nullptr && (!m_expected.empty() || m_subscribed)) {
    std::string head = unparsed_head(*m_context->reader);
    void* raw = nullptr;
    if (redisGetReplyFromReader(m_context.get(), &raw) != REDIS_OK) {
      // An HTTP or SSH server, or anything else that is not Redis, on that address.
      fail(ExitCode::unavailable,
           fmt::format("the server does not speak the Redis protocol (it sent \"{}\")",
                       first_line(head)));
    }
    if (raw == nullptr) {
      return std::nullopt;
    }
    Reply reply(static_cast<redisReply*>(raw));
    if (m_expected.empty()) {
      return reply; // a message on a subscribed channel
    }
    Expect expect = m_expected.front();
    m_expected.pop_front();
    check_password_needed(*reply);
    if (expect == Expect::user) {
      return reply;
    }
    on_handshake_reply(expect, *reply);
  }
  return std::nullopt;
}

void Connection::on_handshake_reply(Expect step, const redisReply& reply)
{
  if (reply.type == REDIS_REPLY_ERROR) {
    std::string message(reply.str, reply.len);
    ExitCode code = classify_error(message);
    if (step == Expect::select && code == ExitCode::internal) {
      fail(ExitCode::config,
           fmt::format("the server refuses database {}: {}", m_options.endpoint.db, message));
    }
    fail(code, message);
  }
  if (step == Expect::role) {
    check_master(reply);
  }
  if (!handshaking() && !m_held.empty()) {
    if (redisAppendFormattedCommand(m_context.get(), m_held.data(), m_held.size()) != REDIS_OK) {
      fail(ExitCode::internal, "cannot queue a command");
    }
    m_held.clear();
    m_write_pending = true;
    process_io(POLLOUT); // write at once, as send does
  }
}

void Connection::check_password_needed(const redisReply& reply)
{
  if (!password() && reply.type == REDIS_REPLY_ERROR
      && asks_for_password(std::string_view(reply.str, reply.len))) {
    fail(ExitCode::auth,
         fmt::format("the server requires a password: give it with {}", m_options.password_hint));
  }
}

void Connection::check_master(const redisReply& reply)
{
  if (reply.type == REDIS_REPLY_ARRAY && reply.elements > 0
      && reply.element[0]->type == REDIS_REPLY_STRING) {
    std::string_view role(reply.element[0]->str, reply.element[0]->len);
    if (role == "master") {
      return;
    }
    fail(ExitCode::unavailable,
         fmt::format("the node is a {}, not the master (a failover may be under way)", role));
  }
  fail(ExitCode::unavailable, fmt::format("unexpected reply to ROLE ({})", describe(reply)));
}

Reply Connection::call(const std::vector<std::string>& argv, util::TimePoint deadline)
{
  std::size_t discard = pending();
  send(argv);
  for (; discard > 0; --discard) {
    receive(deadline);
  }
  return receive(deadline);
}

Reply Connection::receive(util::TimePoint deadline)
{
  std::optional<Reply> reply;
  auto arrived = [&] {
    reply = next_reply();
    if (!reply && (m_context == nullptr || pending() == 0)) {
      throw Error(ExitCode::internal, "{}: no reply is outstanding", describe_endpoint());
    }
    return reply.has_value();
  };
  if (!util::run_until(deadline, arrived, [this](util::EventLoop& loop) { watch(loop); })) {
    bool was_connecting = m_connecting;
    reset();
    throw Error(ExitCode::unavailable, "{}: {}", describe_endpoint(),
                was_connecting ? "timed out connecting" : "timed out waiting for a reply");
  }
  return std::move(*reply);
}

void Connection::watch(util::EventLoop& loop)
{
  loop.watch(fd(), poll_events(), [this](short revents) { process_io(revents); });
}

} // namespace dlock::redis

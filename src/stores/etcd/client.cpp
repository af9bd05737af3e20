#include "stores/etcd/client.hpp"

#include "stores/etcd/http1.hpp"
#include "stores/etcd/libcurl.hpp"
#include "util/fd.hpp"
#include "util/log.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

namespace dlock::etcd {

struct Client::Transfer {
  std::uint64_t id = 0;
  std::string path;
  std::string body;
  bool streaming = false;
  Done done;
  Message message;
  Ended ended;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  curl_slist* connect_to = nullptr;
  std::string received;
  bool too_long = false; // received would have passed max_answer_bytes: the transfer stopped
  std::size_t endpoints_tried = 1;
  bool reauthenticated = false;
  bool waiting_for_token = false;
  // Plain HTTP/1.1 (etcd://): the connection, what is left to send, the answer as it comes.
  enum class Phase { connecting, sending, receiving, finished };
  util::UniqueFd fd;
  Phase phase = Phase::connecting;
  bool reused = false;     // on a kept connection
  std::size_t address = 0; // which of the endpoint's addresses it connects to
  std::string out;         // the request
  std::size_t sent = 0;    // of out
  std::string in;          // bytes received, not yet decoded
  http1::AnswerDecoder decoder;
  util::TimePoint deadline;     // of the whole request (of a stream: of its connection)
  std::optional<Error> failure; // finished: the transport's error
  bool unreachable = false;     // finished: the endpoint could not be reached

  ~Transfer() { release(); }
  void release() noexcept
  {
    fd.reset();
    if (easy != nullptr) {
      curl().curl_easy_cleanup(easy);
      easy = nullptr;
    }
    for (curl_slist** list : {&headers, &connect_to}) {
      if (*list != nullptr) {
        curl().curl_slist_free_all(*list);
        *list = nullptr;
      }
    }
  }
};

namespace {

constexpr const char* auth_path = "/v3/auth/authenticate";

// How many idle connections are kept: the requests' one, and one a stream gave back.
constexpr std::size_t max_idle = 2;

// The TCP options libcurl sets: no Nagle delay, keepalive probes after 60 s idle.
void tune_socket(int fd)
{
  int on = 1, idle = 60;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &idle, sizeof idle);
}

// Keeps libcurl's sockets out of the command dlock runs (libcurl opens them without
// SOCK_CLOEXEC).
int close_on_exec(void*, curl_socket_t fd, curlsocktype)
{
  int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) {
    ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
  return CURL_SOCKOPT_OK;
}

// Whether result means that the endpoint could not be reached at all (another may be).
bool unreachable(CURLcode result, CURL* easy)
{
  if (result == CURLE_COULDNT_CONNECT || result == CURLE_COULDNT_RESOLVE_HOST) {
    return true;
  }
  if (result == CURLE_OPERATION_TIMEDOUT) {
    long connected = 0;
    curl().curl_easy_getinfo(easy, CURLINFO_NUM_CONNECTS, &connected);
    double connect_time = 0;
    curl().curl_easy_getinfo(easy, CURLINFO_CONNECT_TIME, &connect_time);
    return connect_time == 0;
  }
  return false;
}

} // namespace

Client::Client(EtcdUrl url, std::optional<std::string> password, stores::TlsFiles tls,
               util::Millis request_timeout)
  : m_url(std::move(url)), m_password(std::move(password)), m_tls(std::move(tls)),
    m_timeout(request_timeout), m_plain(!m_url.tls)
{
  if (!m_password) {
    m_password = m_url.password;
  }
  m_plain = !m_url.tls;
  if (m_plain) {
    return;
  }
  m_multi = curl().curl_multi_init();
  if (m_multi == nullptr) {
    throw Error(ExitCode::internal, "libcurl could not make a multi handle");
  }
  curl().curl_multi_setopt(m_multi, CURLMOPT_SOCKETFUNCTION, &Client::on_socket);
  curl().curl_multi_setopt(m_multi, CURLMOPT_SOCKETDATA, this);
  curl().curl_multi_setopt(m_multi, CURLMOPT_TIMERFUNCTION, &Client::on_timer);
  curl().curl_multi_setopt(m_multi, CURLMOPT_TIMERDATA, this);
}

Client::~Client()
{
  cancel_requests();
  m_idle.clear();
  if (m_multi != nullptr) {
    curl().curl_multi_cleanup(m_multi);
  }
}

// Keeps what arrives, up to max_answer_bytes not yet delivered (a whole answer, or a stream's
// messages not yet read); past it, stops the transfer (libcurl fails it with a write error).
std::size_t Client::on_data(char* data, std::size_t size, std::size_t count, void* user)
{
  auto* t = static_cast<Transfer*>(user);
  std::size_t bytes = size * count;
  if (t->received.size() + bytes > max_answer_bytes) {
    t->too_long = true;
    return 0;
  }
  t->received.append(data, bytes);
  return bytes;
}

int Client::on_socket(void*, int fd, int what, void* self, void*)
{
  auto* client = static_cast<Client*>(self);
  if (what == CURL_POLL_REMOVE) {
    client->m_sockets.erase(fd);
  } else {
    client->m_sockets[fd] = what;
  }
  return 0;
}

int Client::on_timer(void*, long timeout_ms, void* self)
{
  auto* client = static_cast<Client*>(self);
  if (timeout_ms < 0) {
    client->m_timer.reset();
  } else {
    client->m_timer = util::monotonic_now() + util::Millis(timeout_ms);
  }
  return 0;
}

std::uint64_t Client::post(const std::string& path, const Json& body, Done done)
{
  return start(path, body, std::move(done), nullptr, nullptr);
}

std::uint64_t Client::stream(const std::string& path, const Json& body, Message message,
                             Ended ended)
{
  return start(path, body, nullptr, std::move(message), std::move(ended));
}

std::uint64_t Client::start(const std::string& path, const Json& body, Done done, Message message,
                            Ended ended)
{
  auto t = std::make_unique<Transfer>();
  t->id = m_next_id++;
  t->path = path;
  t->body = body.dump();
  t->streaming = static_cast<bool>(message);
  t->done = std::move(done);
  t->message = std::move(message);
  t->ended = std::move(ended);
  Transfer& ref = *t;
  m_transfers.emplace(t->id, std::move(t));
  if (m_url.user && !m_token && path != auth_path) {
    authenticate_then(ref.id);
  } else {
    send(ref);
  }
  return ref.id;
}

void Client::authenticate_then(std::uint64_t id)
{
  m_transfers.at(id)->waiting_for_token = true;
  if (m_authenticating) {
    return;
  }
  m_authenticating = true;
  post(auth_path, authenticate_request(*m_url.user, m_password.value_or("")), [this](Answer& a) {
    m_authenticating = false;
    std::string token = a.error ? "" : string_field(a.body, "token");
    if (!a.error && token.empty()) {
      a.error = Error(ExitCode::auth,
                      "etcd at {} gave no auth token to user '{}' (is "
                      "authentication enabled?)",
                      current(), *m_url.user);
    }
    if (!a.error) {
      m_token = token;
    }
    std::vector<std::uint64_t> waiting;
    for (auto& [queued, t] : m_transfers) {
      if (t->waiting_for_token) {
        waiting.push_back(queued);
      }
    }
    for (std::uint64_t queued : waiting) {
      auto found = m_transfers.find(queued);
      if (found == m_transfers.end()) {
        continue;
      }
      found->second->waiting_for_token = false;
      if (!a.error) {
        send(*found->second);
        continue;
      }
      Handle t = std::move(found->second);
      m_transfers.erase(found);
      if (t->done) {
        Answer failed{a.error, {}};
        t->done(failed);
      } else if (t->ended) {
        t->ended(*a.error);
      }
    }
  });
}

void Client::send(Transfer& t)
{
  if (m_plain) {
    send_plain(t);
  } else {
    send_curl(t);
  }
}

void Client::send_curl(Transfer& t)
{
  const LibCurl& c = curl();
  t.release();
  t.received.clear();
  t.too_long = false;
  t.easy = c.curl_easy_init();
  if (t.easy == nullptr) {
    throw Error(ExitCode::internal, "libcurl could not make a handle");
  }
  CURL* e = t.easy;
  std::string url = m_url.base(m_endpoint) + t.path;
  if (!m_tls.server_name.empty() && m_url.tls) {
    // Connect to the endpoint, but check (and send SNI for) the given name.
    const std::string& endpoint = m_url.endpoints[m_endpoint];
    std::string port = endpoint.substr(endpoint.rfind(':') + 1);
    std::string connect_to = m_tls.server_name + ":" + port + ":" + endpoint;
    url = "https://" + m_tls.server_name + ":" + port + t.path;
    t.connect_to = c.curl_slist_append(nullptr, connect_to.c_str());
    c.curl_easy_setopt(e, CURLOPT_CONNECT_TO, t.connect_to);
  }
  c.curl_easy_setopt(e, CURLOPT_URL, url.c_str());
  c.curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, t.body.c_str());
  t.headers = c.curl_slist_append(t.headers, "Content-Type: application/json");
  t.headers = c.curl_slist_append(t.headers, "Expect:"); // no 100-continue round trip
  if (m_token && t.path != auth_path) {
    t.headers = c.curl_slist_append(t.headers, ("Authorization: " + *m_token).c_str());
  }
  c.curl_easy_setopt(e, CURLOPT_HTTPHEADER, t.headers);
  c.curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Client::on_data);
  c.curl_easy_setopt(e, CURLOPT_WRITEDATA, &t);
  c.curl_easy_setopt(e, CURLOPT_PRIVATE,
                     reinterpret_cast<void*>(static_cast<std::uintptr_t>(t.id)));
  c.curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  c.curl_easy_setopt(e, CURLOPT_SOCKOPTFUNCTION, &close_on_exec);
  c.curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(m_timeout.count()));
  c.curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
                     t.streaming ? 0L : static_cast<long>(m_timeout.count()));
  c.curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  c.curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, m_url.tls ? "https" : "http");
  if (!m_tls.ca_file.empty()) {
    c.curl_easy_setopt(e, CURLOPT_CAINFO, m_tls.ca_file.c_str());
  }
  if (!m_tls.cert_file.empty()) {
    c.curl_easy_setopt(e, CURLOPT_SSLCERT, m_tls.cert_file.c_str());
  }
  if (!m_tls.key_file.empty()) {
    c.curl_easy_setopt(e, CURLOPT_SSLKEY, m_tls.key_file.c_str());
  }
  c.curl_multi_add_handle(m_multi, e);
}

void Client::cancel(std::uint64_t id) noexcept
{
  auto found = m_transfers.find(id);
  if (found == m_transfers.end()) {
    return;
  }
  if (found->second->easy != nullptr) {
    curl().curl_multi_remove_handle(m_multi, found->second->easy);
  }
  m_transfers.erase(found); // a plain transfer's connection closes with it
}

void Client::cancel_requests_except(const std::vector<std::uint64_t>& keep) noexcept
{
  std::vector<std::uint64_t> ids;
  for (auto& [id, t] : m_transfers) {
    if (std::find(keep.begin(), keep.end(), id) == keep.end()) {
      ids.push_back(id);
    }
  }
  for (std::uint64_t id : ids) {
    cancel(id);
  }
  m_authenticating = false;
}

void Client::deliver_lines(std::uint64_t id)
{
  while (true) {
    auto found = m_transfers.find(id);
    if (found == m_transfers.end()) {
      return;
    }
    Transfer& t = *found->second;
    std::size_t end = t.received.find('\n');
    if (end == std::string::npos) {
      return;
    }
    std::string line = t.received.substr(0, end);
    t.received.erase(0, end + 1);
    Json parsed = Json::parse(line, nullptr, false);
    if (parsed.is_object() && parsed.contains("result")) {
      Message message = t.message; // the callback may cancel this stream
      message(parsed["result"]);
      continue;
    }
    std::optional<Error> error = answer_error(500, parsed, "etcd at " + current());
    Ended ended = std::move(t.ended);
    cancel(id);
    if (ended) {
      ended(error.value_or(Error(ExitCode::unavailable, "etcd at {} ended a watch", current())));
    }
  }
}

// The error of an answer longer than max_answer_bytes.
Error too_long_error(const std::string& where)
{
  return Error(ExitCode::unavailable,
               "{} sent more than {} MiB in one answer: not read "
               "(another tenant's keys under dlock's prefix?)",
               where, max_answer_bytes >> 20);
}

void Client::finish(std::uint64_t id, int code)
{
  auto found = m_transfers.find(id);
  if (found == m_transfers.end()) {
    return;
  }
  Transfer& t = *found->second;
  auto result = static_cast<CURLcode>(code);
  curl().curl_multi_remove_handle(m_multi, t.easy);
  long status = 0;
  curl().curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &status);
  std::string where = "etcd at " + current();
  std::optional<Error> error;
  if (result == CURLE_WRITE_ERROR && t.too_long) {
    error = too_long_error(where);
  } else if (result != CURLE_OK) {
    ExitCode exit = result == CURLE_SSL_CERTPROBLEM || result == CURLE_SSL_CACERT_BADFILE
                        || result == CURLE_READ_ERROR
                      ? ExitCode::config
                      : ExitCode::unavailable;
    error = Error(exit, "{}: {}", where, curl().curl_easy_strerror(result));
  }
  complete(id, std::move(error), result != CURLE_OK && unreachable(result, t.easy), status);
}

void Client::complete(std::uint64_t id, std::optional<Error> error, bool unreachable, long status)
{
  auto found = m_transfers.find(id);
  if (found == m_transfers.end()) {
    return;
  }
  Transfer& t = *found->second;
  if (error && unreachable && t.endpoints_tried < m_url.endpoints.size()) {
    util::log_verbose("{}; trying the next endpoint", error->what());
    m_endpoint = (m_endpoint + 1) % m_url.endpoints.size();
    m_idle.clear(); // connections to the endpoint left
    ++t.endpoints_tried;
    send(t);
    return;
  }
  if (!error && t.streaming && !t.received.empty()) {
    t.received += '\n';
    deliver_lines(id);
    found = m_transfers.find(id);
    if (found == m_transfers.end()) {
      return;
    }
  }
  std::string where = "etcd at " + current();
  Answer answer{std::move(error), {}};
  if (!answer.error) {
    answer.body = Json::parse(found->second->received, nullptr, false);
    if (m_url.user && !t.reauthenticated && t.path != auth_path && token_invalid(answer.body)) {
      t.reauthenticated = true; // the server restarted or the token expired: log in again
      m_token.reset();
      authenticate_then(id);
      return;
    }
    answer.error = answer_error(status, answer.body, where);
    if (!answer.error && t.streaming) {
      answer.error = Error(ExitCode::unavailable, "{} ended a watch", where);
    }
  }
  Handle done = std::move(found->second);
  m_transfers.erase(found);
  if (done->done) {
    done->done(answer);
  } else if (done->ended) {
    done->ended(*answer.error);
  }
}

const std::vector<Client::Address>& Client::addresses(std::size_t endpoint)
{
  auto known = m_addresses.find(endpoint);
  if (known != m_addresses.end()) {
    return known->second;
  }
  const std::string& text = m_url.endpoints[endpoint]; // "host:port", "[v6]:port"
  std::size_t colon = text.rfind(':');
  std::string host = text.substr(0, colon);
  std::string port = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  std::vector<Address> list;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &found) == 0) {
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      const auto* bytes = reinterpret_cast<const unsigned char*>(a->ai_addr);
      list.push_back(Address{a->ai_family, {bytes, bytes + a->ai_addrlen}});
    }
    ::freeaddrinfo(found);
  }
  if (list.empty()) { // not kept: the name may resolve later
    static const std::vector<Address> none;
    return none;
  }
  return m_addresses[endpoint] = std::move(list);
}

void Client::send_plain(Transfer& t)
{
  t.fd.reset();
  t.in.clear();
  t.received.clear();
  t.too_long = false;
  t.decoder = http1::AnswerDecoder();
  t.sent = 0;
  t.failure.reset();
  t.unreachable = false;
  std::string authorization = m_token && t.path != auth_path ? *m_token : "";
  t.out = http1::post_request(m_url.endpoints[m_endpoint], t.path, t.body, authorization);
  t.deadline = util::monotonic_now() + m_timeout;
  // A kept connection first; a stream, which keeps its connection till it ends, takes one only
  // when another is left for the requests.
  while (!m_idle.empty() && (!t.streaming || m_idle.size() > 1)) {
    util::UniqueFd fd = std::move(m_idle.back());
    m_idle.pop_back();
    char byte = 0;
    if (::recv(fd.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) < 0
        && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      t.fd = std::move(fd);
      t.reused = true;
      t.phase = Transfer::Phase::sending;
      write_plain(t);
      return;
    }
    // closed by the server (or it sent what nobody asked for): fd closes here
  }
  t.reused = false;
  t.address = 0;
  connect_plain(t);
}

void Client::connect_plain(Transfer& t)
{
  const std::vector<Address>& list = addresses(m_endpoint);
  std::string where = "etcd at " + current();
  if (list.empty()) {
    t.failure = Error(ExitCode::unavailable, "{}: could not resolve its host", where);
    t.unreachable = true;
    t.phase = Transfer::Phase::finished;
    return;
  }
  int error = 0;
  for (; t.address < list.size(); ++t.address) {
    const Address& a = list[t.address];
    util::UniqueFd fd(::socket(a.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) {
      error = errno;
      continue;
    }
    tune_socket(fd.get());
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(a.bytes.data()),
                  static_cast<socklen_t>(a.bytes.size()))
          == 0
        || errno == EINPROGRESS) {
      t.fd = std::move(fd);
      t.phase = Transfer::Phase::connecting;
      return;
    }
    error = errno;
  }
  t.failure = Error(ExitCode::unavailable, "{}: cannot connect: {}", where, std::strerror(error));
  t.unreachable = true;
  t.phase = Transfer::Phase::finished;
}

void Client::lost_plain(Transfer& t, const std::string& what)
{
  if (t.reused && !t.decoder.started()) {
    t.fd.reset();
    t.reused = false;
    t.address = 0;
    t.sent = 0;
    t.in.clear();
    connect_plain(t); // the same request on a new connection
    return;
  }
  t.fd.reset();
  t.failure = Error(ExitCode::unavailable, "etcd at {}: {}", current(), what);
  t.phase = Transfer::Phase::finished;
}

void Client::write_plain(Transfer& t)
{
  while (t.sent < t.out.size()) {
    ssize_t n = ::send(t.fd.get(), t.out.data() + t.sent, t.out.size() - t.sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        lost_plain(t, fmt::format("connection lost: {}", std::strerror(errno)));
      }
      return;
    }
    t.sent += static_cast<std::size_t>(n);
  }
  t.out.clear();
  t.phase = Transfer::Phase::receiving;
}

void Client::read_plain(Transfer& t)
{
  char buffer[16384];
  while (true) {
    ssize_t n = ::recv(t.fd.get(), buffer, sizeof buffer, 0);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    }
    http1::AnswerDecoder::State state;
    if (n > 0) {
      t.in.append(buffer, static_cast<std::size_t>(n));
      state = t.decoder.feed(t.in, t.received);
    } else {
      if (n < 0 || t.decoder.end_of_input() != http1::AnswerDecoder::State::done) {
        lost_plain(t, n < 0 ? fmt::format("connection lost: {}", std::strerror(errno))
                            : std::string("it closed the connection before its answer ended"));
        return;
      }
      state = http1::AnswerDecoder::State::done;
    }
    if (t.received.size() + t.in.size() > max_answer_bytes) {
      t.too_long = true;
      state = http1::AnswerDecoder::State::bad;
    }
    if (state == http1::AnswerDecoder::State::more) {
      continue;
    }
    if (state == http1::AnswerDecoder::State::bad) {
      t.fd.reset();
      std::string where = "etcd at " + current();
      t.failure = t.too_long
                    ? too_long_error(where)
                    : Error(ExitCode::unavailable, "{} answered what is not HTTP/1.1", where);
      t.phase = Transfer::Phase::finished;
      return;
    }
    // Done: the connection serves the next request if the answer left it clean.
    if (n > 0 && !t.streaming && t.decoder.reusable() && t.in.empty() && m_idle.size() < max_idle) {
      m_idle.push_back(std::move(t.fd));
    }
    t.fd.reset();
    t.phase = Transfer::Phase::finished;
    return;
  }
}

void Client::on_plain_ready(std::uint64_t id, short revents)
{
  auto found = m_transfers.find(id);
  if (found == m_transfers.end() || !found->second->fd) {
    return;
  }
  Transfer& t = *found->second;
  if (t.phase == Transfer::Phase::connecting) {
    int error = 0;
    socklen_t size = sizeof error;
    if (::getsockopt(t.fd.get(), SOL_SOCKET, SO_ERROR, &error, &size) != 0) {
      error = errno;
    }
    if (error == 0 && (revents & (POLLERR | POLLHUP)) != 0) {
      error = ECONNREFUSED;
    }
    if (error != 0) {
      t.fd.reset();
      ++t.address;
      const std::vector<Address>& list = addresses(m_endpoint);
      if (t.address < list.size()) {
        connect_plain(t);
        return;
      }
      t.failure = Error(ExitCode::unavailable, "etcd at {}: cannot connect: {}", current(),
                        std::strerror(error));
      t.unreachable = true;
      t.phase = Transfer::Phase::finished;
      return;
    }
    t.phase = Transfer::Phase::sending;
  }
  if (t.phase == Transfer::Phase::sending) {
    write_plain(t);
    return;
  }
  if (t.phase == Transfer::Phase::receiving) {
    read_plain(t);
  }
}

void Client::pump()
{
  int running = 0;
  util::TimePoint now = util::monotonic_now();
  if (m_timer && now >= *m_timer) {
    m_timer.reset();
    curl().curl_multi_socket_action(m_multi, CURL_SOCKET_TIMEOUT, 0, &running);
  }
  if (m_plain) {
    for (auto& [id, t] : m_transfers) {
      bool timed = !t->streaming || t->phase == Transfer::Phase::connecting;
      if (t->phase != Transfer::Phase::finished && !t->waiting_for_token && timed
          && now >= t->deadline) {
        bool connecting = t->phase == Transfer::Phase::connecting;
        t->fd.reset();
        t->failure = Error(ExitCode::unavailable, "etcd at {}: no answer within {} ms", current(),
                           m_timeout.count());
        t->unreachable = connecting;
        t->phase = Transfer::Phase::finished;
      }
    }
  }
  std::vector<std::uint64_t> streams;
  for (auto& [id, t] : m_transfers) {
    if (t->streaming && t->received.find('\n') != std::string::npos) {
      streams.push_back(id);
    }
  }
  for (std::uint64_t id : streams) {
    deliver_lines(id);
  }
  if (m_plain) {
    std::vector<std::uint64_t> ended;
    for (auto& [id, t] : m_transfers) {
      if (t->phase == Transfer::Phase::finished && !t->waiting_for_token) {
        ended.push_back(id);
      }
    }
    for (std::uint64_t id : ended) {
      auto found = m_transfers.find(id);
      if (found != m_transfers.end()) {
        bool unreachable = found->second->unreachable;
        std::optional<Error> failure = std::move(found->second->failure);
        complete(id, std::move(failure), unreachable, found->second->decoder.status());
      }
    }
    return;
  }
  std::vector<std::pair<std::uint64_t, int>> finished;
  int left = 0;
  while (CURLMsg* message = curl().curl_multi_info_read(m_multi, &left)) {
    if (message->msg != CURLMSG_DONE) {
      continue;
    }
    void* id = nullptr;
    curl().curl_easy_getinfo(message->easy_handle, CURLINFO_PRIVATE, &id);
    finished.emplace_back(static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(id)),
                          static_cast<int>(message->data.result));
  }
  for (auto [id, result] : finished) {
    finish(id, result);
  }
}

void Client::watch(util::EventLoop& loop)
{
  for (auto [fd, what] : m_sockets) {
    short events = 0;
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT) {
      events |= POLLIN;
    }
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT) {
      events |= POLLOUT;
    }
    int socket = fd;
    loop.watch(fd, events, [this, socket](short revents) {
      int mask = 0;
      if ((revents & (POLLIN | POLLHUP)) != 0) {
        mask |= CURL_CSELECT_IN;
      }
      if ((revents & POLLOUT) != 0) {
        mask |= CURL_CSELECT_OUT;
      }
      if ((revents & POLLERR) != 0) {
        mask |= CURL_CSELECT_ERR;
      }
      int running = 0;
      curl().curl_multi_socket_action(m_multi, socket, mask, &running);
    });
  }
  if (m_timer) {
    loop.wake_at(*m_timer);
  }
  for (auto& [id, t] : m_transfers) {
    if (!m_plain || t->waiting_for_token) {
      continue;
    }
    if (t->phase == Transfer::Phase::finished) {
      loop.wake_at(util::monotonic_now()); // pump() answers it
      continue;
    }
    if (!t->streaming || t->phase == Transfer::Phase::connecting) {
      loop.wake_at(t->deadline);
    }
    short events = t->phase == Transfer::Phase::receiving ? POLLIN : POLLOUT;
    std::uint64_t transfer = id;
    loop.watch(t->fd.get(), events,
               [this, transfer](short revents) { on_plain_ready(transfer, revents); });
  }
}

Answer Client::call(const std::string& path, const Json& body, util::TimePoint deadline)
{
  std::optional<Answer> got;
  std::uint64_t id = post(path, body, [&got](Answer& a) { got = std::move(a); });
  auto arrived = [&] {
    pump();
    return got.has_value();
  };
  if (!util::run_until(deadline, arrived, [this](util::EventLoop& loop) { watch(loop); })) {
    cancel(id);
    return Answer{Error(ExitCode::unavailable, "etcd at {} did not answer in time", current()), {}};
  }
  return std::move(*got);
}

} // namespace dlock::etcd

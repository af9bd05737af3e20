#include "stores/etcd/client.hpp"

#include "stores/etcd/libcurl.hpp"
#include "util/log.hpp"

#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cstdint>
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

  ~Transfer() { release(); }
  void release() noexcept
  {
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
    m_timeout(request_timeout)
{
  if (!m_password) {
    m_password = m_url.password;
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
  curl().curl_multi_cleanup(m_multi);
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
  m_transfers.erase(found);
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

void Client::finish(std::uint64_t id, int code)
{
  auto found = m_transfers.find(id);
  if (found == m_transfers.end()) {
    return;
  }
  Transfer& t = *found->second;
  auto result = static_cast<CURLcode>(code);
  curl().curl_multi_remove_handle(m_multi, t.easy);
  if (result != CURLE_OK && unreachable(result, t.easy)
      && t.endpoints_tried < m_url.endpoints.size()) {
    util::log_verbose("etcd at {} cannot be reached ({}); trying the next endpoint", current(),
                      curl().curl_easy_strerror(result));
    m_endpoint = (m_endpoint + 1) % m_url.endpoints.size();
    ++t.endpoints_tried;
    send(t);
    return;
  }
  if (result == CURLE_OK && t.streaming && !t.received.empty()) {
    t.received += '\n';
    deliver_lines(id);
    found = m_transfers.find(id);
    if (found == m_transfers.end()) {
      return;
    }
  }
  long status = 0;
  curl().curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &status);
  std::string where = "etcd at " + current();
  Answer answer;
  if (result == CURLE_WRITE_ERROR && t.too_long) {
    answer.error = Error(ExitCode::unavailable,
                         "{} sent more than {} MiB in one answer: not read "
                         "(another tenant's keys under dlock's prefix?)",
                         where, max_answer_bytes >> 20);
  } else if (result != CURLE_OK) {
    ExitCode exit = result == CURLE_SSL_CERTPROBLEM || result == CURLE_SSL_CACERT_BADFILE
                        || result == CURLE_READ_ERROR
                      ? ExitCode::config
                      : ExitCode::unavailable;
    answer.error = Error(exit, "{}: {}", where, curl().curl_easy_strerror(result));
  } else {
    answer.body = Json::parse(t.received, nullptr, false);
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

void Client::pump()
{
  int running = 0;
  if (m_timer && util::monotonic_now() >= *m_timer) {
    m_timer.reset();
    curl().curl_multi_socket_action(m_multi, CURL_SOCKET_TIMEOUT, 0, &running);
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

#pragma once

#include "stores/config.hpp"
#include "stores/etcd/api.hpp"
#include "util/clock.hpp"
#include "util/duration.hpp"
#include "util/event_loop.hpp"
#include "util/fd.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dlock::etcd {

// One answer of the gateway: the body, or the error that stands for it.
struct Answer {
  std::optional<Error> error;
  Json body;
};

// etcd's JSON gateway, driven by dlock's EventLoop: over plain TCP with HTTP/1.1 (http1.hpp)
// for etcd://, over libcurl's multi interface for etcds:// (TLS). Requests are started at once
// and answered by callbacks run from pump(); they share one kept-alive connection, a stream
// (a watch) has its own; several endpoints are tried in turn when one cannot be reached; an
// authenticated URL gets a token first (and again when the server forgets it).
class Client {
public:
  using Done = std::function<void(Answer&)>;
  using Message = std::function<void(const Json& result)>;
  using Ended = std::function<void(const Error& why)>;

  Client(EtcdUrl url, std::optional<std::string> password, stores::TlsFiles tls,
         util::Millis request_timeout);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // POSTs body to path (such as "/v3/kv/range"); done gets the answer, or the error.
  std::uint64_t post(const std::string& path, const Json& body, Done done);
  // A streaming POST (a watch): each result message goes to message, and ended is called once
  // if the stream ends (not when it is cancelled).
  std::uint64_t stream(const std::string& path, const Json& body, Message message, Ended ended);
  // Drops a request or stream; its callbacks are not called.
  void cancel(std::uint64_t id) noexcept;
  // Drops every request, streams kept or not.
  void cancel_requests() noexcept { cancel_requests_except({}); }
  // Drops every request but those in keep.
  void cancel_requests_except(const std::vector<std::uint64_t>& keep) noexcept;
  bool active(std::uint64_t id) const { return m_transfers.contains(id); }

  // Runs libcurl's due timers, delivers stream messages and finished requests' callbacks.
  void pump();
  // Has loop watch libcurl's sockets and its next timer, for one round.
  void watch(util::EventLoop& loop);
  // Blocking request until deadline (status, list): the answer, or a time-out error.
  Answer call(const std::string& path, const Json& body, util::TimePoint deadline);

  // The URL as messages show it, and the endpoint requests go to now.
  std::string shown() const { return m_url.shown(); }
  std::string current() const { return m_url.base(m_endpoint); }

private:
  struct Transfer;
  using Handle = std::unique_ptr<Transfer>;
  // One of an endpoint's addresses, as resolved once.
  struct Address {
    int family = 0;
    std::vector<unsigned char> bytes; // a sockaddr of that family
  };

  std::uint64_t start(const std::string& path, const Json& body, Done done, Message message,
                      Ended ended);
  void send(Transfer& t);
  // The answer of transfer id: the transport's error (unreachable: the endpoint could not be
  // reached, another may be), else the HTTP status of the body received.
  void complete(std::uint64_t id, std::optional<Error> error, bool unreachable, long status);
  // libcurl's transfers (etcds://).
  void send_curl(Transfer& t);
  void finish(std::uint64_t id, int result);
  // Plain HTTP/1.1 transfers (etcd://): a kept connection or a new one, then the request and
  // the answer as the socket allows; failure ends the transfer (pump() answers it).
  void send_plain(Transfer& t);
  void connect_plain(Transfer& t);
  void write_plain(Transfer& t);
  void read_plain(Transfer& t);
  void on_plain_ready(std::uint64_t id, short revents);
  // A kept connection that failed before any byte of its answer is tried once more on a new
  // one (the server may have closed it while idle); any other failure is the transfer's.
  void lost_plain(Transfer& t, const std::string& what);
  const std::vector<Address>& addresses(std::size_t endpoint);
  void deliver_lines(std::uint64_t id);
  void authenticate_then(std::uint64_t id);
  static std::size_t on_data(char* data, std::size_t size, std::size_t count, void* transfer);
  static int on_socket(void* easy, int fd, int what, void* self, void* socket_data);
  static int on_timer(void* multi, long timeout_ms, void* self);

  EtcdUrl m_url;
  std::optional<std::string> m_password;
  stores::TlsFiles m_tls;
  util::Millis m_timeout;
  bool m_plain;                       // etcd:// (no TLS): no libcurl
  void* m_multi = nullptr;            // libcurl's, for etcds:// only
  std::vector<util::UniqueFd> m_idle; // kept-alive connections to the current endpoint
  std::map<std::size_t, std::vector<Address>> m_addresses; // by endpoint
  std::size_t m_endpoint = 0;
  std::optional<std::string> m_token; // etcd's auth token, once authenticated
  bool m_authenticating = false;
  std::map<int, int> m_sockets; // fd → CURL_POLL_*
  std::optional<util::TimePoint> m_timer;
  std::map<std::uint64_t, Handle> m_transfers;
  std::uint64_t m_next_id = 1;
};

} // namespace dlock::etcd

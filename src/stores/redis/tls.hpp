#pragma once

#include "stores/config.hpp"
#include "util/duration.hpp"

#include <memory>
#include <string>

#include <hiredis/hiredis.h>

namespace dlock::redis {

// The TLS files of the store configuration.
using TlsOptions = stores::TlsFiles;

// A description for --version: "OpenSSL 3.0.x" or "no" (loads the TLS module).
std::string tls_description();

// Verified TLS for one server, done by the dlock-tls.so module (loaded on first use, see
// tls_module.hpp): the chain is checked against the CA and the certificate must name the
// host. Files are read once, when the context is made.
class TlsContext {
public:
  // Throws Error(config) for unreadable or invalid files, a missing module, or no TLS support.
  explicit TlsContext(const TlsOptions& options);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  // Runs the handshake on a connected, blocking context (its timeout bounds it) and checks
  // the certificate for host; throws Error(unavailable) naming why verification failed.
  void secure(redisContext* context, const std::string& host, const std::string& endpoint) const;

private:
  struct State;
  std::unique_ptr<State> m_state;
  std::string m_server_name;
};

} // namespace dlock::redis

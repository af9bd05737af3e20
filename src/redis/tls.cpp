#include "redis/tls.hpp"

#include "util/error.hpp"

#include <hiredis/hiredis.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#ifdef DLOCK_HAVE_TLS
#include <arpa/inet.h>
#if defined(HIREDICT_MAJOR) && __has_include(<hiredict/hiredict_ssl.h>)
// Debian's hiredis compatibility shim (libhiredict-shims-dev) only #defines the names.
#include <hiredict/hiredict_ssl.h>
#endif
#include <hiredis/hiredis_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#endif

namespace dlock::redis {

namespace {

void require_readable(const std::string& path, const char* option)
{
  if (!path.empty() && ::access(path.c_str(), R_OK) != 0) {
    throw Error(ExitCode::config, "cannot read {} file '{}': {}", option, path, std::strerror(errno));
  }
}

#ifdef DLOCK_HAVE_TLS
std::string openssl_error()
{
  unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) {
    return "unknown error";
  }
  char buffer[256];
  ERR_error_string_n(code, buffer, sizeof buffer);
  return buffer;
}

bool is_ip_address(const std::string& host)
{
  unsigned char buffer[16];
  return ::inet_pton(AF_INET, host.c_str(), buffer) == 1 || ::inet_pton(AF_INET6, host.c_str(), buffer) == 1;
}
#endif

} // namespace

#ifdef DLOCK_HAVE_TLS

struct TlsContext::State {
  SSL_CTX* ctx = nullptr;
  ~State()
  {
    if (ctx != nullptr) {
      SSL_CTX_free(ctx);
    }
  }
};

bool tls_supported() { return true; }

std::string tls_description() { return OpenSSL_version(OPENSSL_VERSION); }

TlsContext::TlsContext(const TlsOptions& options)
  : m_state(std::make_unique<State>()), m_server_name(options.server_name)
{
  require_readable(options.ca_file, "--tls-ca");
  require_readable(options.cert_file, "--tls-cert");
  require_readable(options.key_file, "--tls-key");
  if (options.cert_file.empty() != options.key_file.empty()) {
    throw Error(ExitCode::config, "--tls-cert and --tls-key must be given together");
  }
  m_state->ctx = SSL_CTX_new(TLS_client_method());
  if (m_state->ctx == nullptr) {
    throw Error(ExitCode::internal, "cannot create a TLS context: {}", openssl_error());
  }
  SSL_CTX_set_min_proto_version(m_state->ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(m_state->ctx, SSL_VERIFY_PEER, nullptr);
  if (!options.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(m_state->ctx, options.ca_file.c_str(), nullptr) != 1) {
      throw Error(ExitCode::config, "--tls-ca '{}' holds no usable certificate: {}", options.ca_file,
                  openssl_error());
    }
  } else if (SSL_CTX_set_default_verify_paths(m_state->ctx) != 1) {
    throw Error(ExitCode::config, "cannot load the system's CA certificates: {}", openssl_error());
  }
  if (!options.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(m_state->ctx, options.cert_file.c_str()) != 1) {
      throw Error(ExitCode::config, "--tls-cert '{}' is not a usable certificate: {}",
                  options.cert_file, openssl_error());
    }
    if (SSL_CTX_use_PrivateKey_file(m_state->ctx, options.key_file.c_str(), SSL_FILETYPE_PEM) != 1
        || SSL_CTX_check_private_key(m_state->ctx) != 1) {
      throw Error(ExitCode::config, "--tls-key '{}' is not the key of --tls-cert: {}",
                  options.key_file, openssl_error());
    }
  }
}

TlsContext::~TlsContext() = default;

void TlsContext::secure(redisContext* context, const std::string& host,
                        const std::string& endpoint) const
{
  const std::string& name = m_server_name.empty() ? host : m_server_name;
  SSL* ssl = SSL_new(m_state->ctx);
  if (ssl == nullptr) {
    throw Error(ExitCode::internal, "cannot create a TLS session: {}", openssl_error());
  }
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  if (is_ip_address(name)) {
    X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl, name.c_str());
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0);
  }
  errno = 0;
  if (redisInitiateSSL(context, ssl) != REDIS_OK) {
    int saved_errno = errno;
    long verify = SSL_get_verify_result(ssl);
    std::string detail = saved_errno == EAGAIN || saved_errno == EWOULDBLOCK ? "timed out"
                         : ERR_peek_error() != 0                            ? openssl_error()
                                                                            : context->errstr;
    std::string why = verify != X509_V_OK
                        ? fmt::format("certificate verification failed: {} (expected name '{}')",
                                      X509_verify_cert_error_string(verify), name)
                        : fmt::format("TLS handshake failed: {}", detail);
    SSL_free(ssl);
    throw Error(ExitCode::unavailable, "{}: {}", endpoint, why);
  }
}

#else

struct TlsContext::State {};

bool tls_supported() { return false; }

std::string tls_description() { return "no"; }

TlsContext::TlsContext(const TlsOptions& options)
{
  require_readable(options.ca_file, "--tls-ca");
  throw Error(ExitCode::config,
              "this dlock was built without TLS support (hiredis {}.{} has none); rediss:// "
              "needs hiredis >= 1.0 with hiredis_ssl",
              HIREDIS_MAJOR, HIREDIS_MINOR);
}

TlsContext::~TlsContext() = default;

void TlsContext::secure(redisContext*, const std::string&, const std::string&) const {}

#endif

} // namespace dlock::redis

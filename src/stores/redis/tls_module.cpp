// dlock-tls.so: verified TLS for hiredis connections (see tls_module.hpp for why a module).
#include "stores/redis/tls_module.hpp"

#include "util/error.hpp"

#include <arpa/inet.h>
#if defined(HIREDICT_MAJOR) && __has_include(<hiredict/hiredict_ssl.h>)
// Debian's hiredis compatibility shim (libhiredict-shims-dev) only #defines the names.
#include <hiredict/hiredict_ssl.h>
#endif
#include <hiredis/hiredis_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

namespace dlock::redis {

namespace {

void require_readable(const std::string& path, const char* option)
{
  if (!path.empty() && ::access(path.c_str(), R_OK) != 0) {
    throw Error(ExitCode::config, "cannot read {} file '{}': {}", option, path,
                std::strerror(errno));
  }
}

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
  return ::inet_pton(AF_INET, host.c_str(), buffer) == 1
         || ::inet_pton(AF_INET6, host.c_str(), buffer) == 1;
}

struct SslCtxDeleter {
  void operator()(SSL_CTX* ctx) const noexcept { SSL_CTX_free(ctx); }
};
struct SslDeleter {
  void operator()(SSL* ssl) const noexcept { SSL_free(ssl); }
};

// Verified TLS for one server: the chain is checked against the CA, and the certificate must
// name the host (DNS name or IP address) as a browser would; hiredis alone only sends SNI.
class Tls {
public:
  Tls(const std::string& ca_file, const std::string& cert_file, const std::string& key_file);
  void secure(redisContext* context, const std::string& name) const;

private:
  std::unique_ptr<SSL_CTX, SslCtxDeleter> m_ctx;
};

Tls::Tls(const std::string& ca_file, const std::string& cert_file, const std::string& key_file)
{
  require_readable(ca_file, "--tls-ca");
  require_readable(cert_file, "--tls-cert");
  require_readable(key_file, "--tls-key");
  if (cert_file.empty() != key_file.empty()) {
    throw Error(ExitCode::config, "--tls-cert and --tls-key must be given together");
  }
  m_ctx.reset(SSL_CTX_new(TLS_client_method()));
  if (!m_ctx) {
    throw Error(ExitCode::internal, "cannot create a TLS context: {}", openssl_error());
  }
  SSL_CTX_set_min_proto_version(m_ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_verify(m_ctx.get(), SSL_VERIFY_PEER, nullptr);
  if (!ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(m_ctx.get(), ca_file.c_str(), nullptr) != 1) {
      throw Error(ExitCode::config, "--tls-ca '{}' holds no usable certificate: {}", ca_file,
                  openssl_error());
    }
  } else if (SSL_CTX_set_default_verify_paths(m_ctx.get()) != 1) {
    throw Error(ExitCode::config, "cannot load the system's CA certificates: {}", openssl_error());
  }
  if (!cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(m_ctx.get(), cert_file.c_str()) != 1) {
      throw Error(ExitCode::config, "--tls-cert '{}' is not a usable certificate: {}", cert_file,
                  openssl_error());
    }
    if (SSL_CTX_use_PrivateKey_file(m_ctx.get(), key_file.c_str(), SSL_FILETYPE_PEM) != 1
        || SSL_CTX_check_private_key(m_ctx.get()) != 1) {
      throw Error(ExitCode::config, "--tls-key '{}' is not the key of --tls-cert: {}", key_file,
                  openssl_error());
    }
  }
}

void Tls::secure(redisContext* context, const std::string& name) const
{
  std::unique_ptr<SSL, SslDeleter> ssl(SSL_new(m_ctx.get()));
  if (!ssl) {
    throw Error(ExitCode::internal, "cannot create a TLS session: {}", openssl_error());
  }
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl.get());
  if (is_ip_address(name)) {
    X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl.get(), name.c_str());
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0);
  }
  errno = 0;
  if (redisInitiateSSL(context, ssl.get()) != REDIS_OK) {
    int saved_errno = errno;
    long verify = SSL_get_verify_result(ssl.get());
    std::string detail = saved_errno == EAGAIN || saved_errno == EWOULDBLOCK ? "timed out"
                         : ERR_peek_error() != 0                             ? openssl_error()
                                                                             : context->errstr;
    std::string why = verify != X509_V_OK
                        ? fmt::format("certificate verification failed: {} (expected name '{}')",
                                      X509_verify_cert_error_string(verify), name)
                        : fmt::format("TLS handshake failed: {}", detail);
    throw Error(ExitCode::unavailable, "{}", why);
  }
  ssl.release(); // the context owns the session now: redisFree frees it
}

// Runs body, turning an Error into (exit code, message) for the C interface.
template<typename Body> bool guarded(int* exit_code, char* error, std::size_t error_size, Body body)
{
  try {
    body();
    return true;
  } catch (const Error& failure) {
    *exit_code = static_cast<int>(failure.code());
    std::snprintf(error, error_size, "%s", failure.what());
  } catch (const std::exception& failure) {
    *exit_code = static_cast<int>(ExitCode::internal);
    std::snprintf(error, error_size, "%s", failure.what());
  }
  return false;
}

} // namespace

} // namespace dlock::redis

extern "C" {

__attribute__((visibility("default"))) void* dlock_tls_create(const char* ca_file,
                                                              const char* cert_file,
                                                              const char* key_file, int* exit_code,
                                                              char* error, std::size_t error_size)
{
  dlock::redis::Tls* tls = nullptr;
  dlock::redis::guarded(exit_code, error, error_size,
                        [&] { tls = new dlock::redis::Tls(ca_file, cert_file, key_file); });
  return tls;
}

__attribute__((visibility("default"))) int dlock_tls_secure(void* tls, redisContext* context,
                                                            const char* name, int* exit_code,
                                                            char* error, std::size_t error_size)
{
  return dlock::redis::guarded(exit_code, error, error_size,
                               [&] { static_cast<dlock::redis::Tls*>(tls)->secure(context, name); })
           ? 0
           : -1;
}

__attribute__((visibility("default"))) void dlock_tls_free(void* tls)
{
  delete static_cast<dlock::redis::Tls*>(tls);
}

__attribute__((visibility("default"))) const char* dlock_tls_version()
{
  return OpenSSL_version(OPENSSL_VERSION);
}
}

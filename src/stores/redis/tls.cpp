#include "stores/redis/tls.hpp"

#include "stores/redis/tls_module.hpp"
#include "util/error.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace dlock::redis {

#ifdef DLOCK_HAVE_TLS

namespace {

// The module's entry points, resolved once.
struct Module {
  dlock_tls_create_fn create = nullptr;
  dlock_tls_secure_fn secure = nullptr;
  dlock_tls_free_fn free = nullptr;
  dlock_tls_version_fn version = nullptr;
};

// Where dlock-tls.so may be: beside the executable (a build tree), then where it is installed
// relative to the executable (bin/../lib/dlock), then the configured install path.
std::vector<std::string> module_candidates()
{
  std::vector<std::string> paths;
  std::array<char, PATH_MAX> exe{};
  ssize_t n = ::readlink("/proc/self/exe", exe.data(), exe.size() - 1);
  if (n > 0) {
    std::string path(exe.data(), static_cast<std::size_t>(n));
    std::string dir = path.substr(0, path.rfind('/') + 1);
    paths.push_back(dir + "dlock-tls.so");
    paths.push_back(dir + DLOCK_TLS_MODULE_RELATIVE);
  }
  paths.emplace_back(DLOCK_TLS_MODULE_PATH);
  return paths;
}

struct DlCloser {
  void operator()(void* handle) const noexcept { ::dlclose(handle); }
};

const Module& module()
{
  static const Module loaded = [] {
    std::string errors;
    for (const std::string& path : module_candidates()) {
      std::unique_ptr<void, DlCloser> handle(::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL));
      if (!handle) {
        errors += std::string(errors.empty() ? "" : "; ") + ::dlerror();
        continue;
      }
      Module m;
      auto resolve = [&](const char* name) { return ::dlsym(handle.get(), name); };
      m.create = reinterpret_cast<dlock_tls_create_fn>(resolve("dlock_tls_create"));
      m.secure = reinterpret_cast<dlock_tls_secure_fn>(resolve("dlock_tls_secure"));
      m.free = reinterpret_cast<dlock_tls_free_fn>(resolve("dlock_tls_free"));
      m.version = reinterpret_cast<dlock_tls_version_fn>(resolve("dlock_tls_version"));
      if (m.create != nullptr && m.secure != nullptr && m.free != nullptr && m.version != nullptr) {
        handle.release(); // loaded for good: its functions are used until the process exits
        return m;
      }
      errors += "; " + path + " lacks the dlock_tls_* functions";
    }
    throw Error(ExitCode::config, "TLS support is not installed: cannot load dlock-tls.so ({})",
                errors);
  }();
  return loaded;
}

} // namespace

// Frees what the module's create made.
struct ModuleTlsDeleter {
  void operator()(void* tls) const noexcept { module().free(tls); }
};

struct TlsContext::State {
  std::unique_ptr<void, ModuleTlsDeleter> tls;
};

std::string tls_description()
{
  try {
    return module().version();
  } catch (const Error& error) {
    return fmt::format("built in, but {}", error.what());
  }
}

TlsContext::TlsContext(const TlsOptions& options)
  : m_state(std::make_unique<State>()), m_server_name(options.server_name)
{
  std::array<char, 512> error{};
  int code = 0;
  m_state->tls.reset(module().create(options.ca_file.c_str(), options.cert_file.c_str(),
                                     options.key_file.c_str(), &code, error.data(), error.size()));
  if (!m_state->tls) {
    throw Error(static_cast<ExitCode>(code), "{}", error.data());
  }
}

void TlsContext::secure(redisContext* context, const std::string& host,
                        const std::string& endpoint) const
{
  const std::string& name = m_server_name.empty() ? host : m_server_name;
  std::array<char, 512> error{};
  int code = 0;
  if (module().secure(m_state->tls.get(), context, name.c_str(), &code, error.data(), error.size())
      != 0) {
    throw Error(static_cast<ExitCode>(code), "{}: {}", endpoint, error.data());
  }
}

#else

struct TlsContext::State {};

std::string tls_description() { return "no"; }

TlsContext::TlsContext(const TlsOptions& options)
{
  if (!options.ca_file.empty() && ::access(options.ca_file.c_str(), R_OK) != 0) {
    throw Error(ExitCode::config, "cannot read --tls-ca file '{}': {}", options.ca_file,
                std::strerror(errno));
  }
  throw Error(ExitCode::config,
              "this dlock was built without TLS support (hiredis {}.{} has none); rediss:// "
              "needs hiredis >= 1.0 with hiredis_ssl",
              HIREDIS_MAJOR, HIREDIS_MINOR);
}

void TlsContext::secure(redisContext*, const std::string&, const std::string&) const {}

#endif

TlsContext::~TlsContext() = default;

} // namespace dlock::redis

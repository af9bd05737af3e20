#include "util/shared_library.hpp"

#include "util/error.hpp"

#include <dlfcn.h>

namespace dlock::util {

SharedLibrary::SharedLibrary(const char* soname, const char* scheme, const char* what,
                             const char* package)
  : m_handle(::dlopen(soname, RTLD_NOW | RTLD_LOCAL)), m_scheme(scheme), m_what(what)
{
  if (m_handle == nullptr) {
    throw Error(ExitCode::config, "{} needs {} (install the {} package): {}", scheme, what, package,
                ::dlerror());
  }
}

void* SharedLibrary::address(const char* name)
{
  void* found = ::dlsym(m_handle, name);
  if (found == nullptr) {
    m_missing += std::string(m_missing.empty() ? "" : ", ") + name;
  }
  return found;
}

void SharedLibrary::require_all(const char* version) const
{
  if (!m_missing.empty()) {
    throw Error(ExitCode::config, "{} needs {} {} or later; the installed one lacks {}", m_scheme,
                m_what, version, m_missing);
  }
}

} // namespace dlock::util

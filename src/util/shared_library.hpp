#pragma once

#include <string>

namespace dlock::util {

// A store's client library, loaded with dlopen on first use rather than linked, so that runs
// of the other stores do not pay for loading it (and its own dependencies) at start-up. The
// handle stays open for the life of the process: its functions are used until it exits.
class SharedLibrary {
public:
  // Opens soname; throws Error(config) "SCHEME needs WHAT (install the PACKAGE package): why".
  SharedLibrary(const char* soname, const char* scheme, const char* what, const char* package);

  // Sets function to the symbol called name, or notes name as missing.
  template<class Function> void resolve(Function*& function, const char* name)
  {
    function = reinterpret_cast<Function*>(address(name));
  }
  // The address of a data symbol (a constant, a table), or nullptr with name noted as missing.
  void* address(const char* name);
  // Throws Error(config) "SCHEME needs WHAT VERSION or later; the installed one lacks ..."
  // when a symbol was missing.
  void require_all(const char* version) const;

private:
  void* m_handle;
  const char* m_scheme;
  const char* m_what;
  std::string m_missing;
};

} // namespace dlock::util

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

// Where a store's client library is and how messages name it.
struct LibrarySpec {
  const char* soname;  // "libpq.so.5"
  const char* scheme;  // "postgres://", the URLs that need it
  const char* what;    // "libpq", as messages name it
  const char* package; // "libpq5", the Debian package that has it
  const char* version; // "10", the oldest version that has every function dlock uses
};

// The one way a store loads its client library: opens it, has fill(lib, library) resolve the
// members of a Lib (DLOCK_LIBRARY_RESOLVE), and throws Error(config) if any was missing.
template<class Lib, class Fill> Lib load_library(const LibrarySpec& spec, Fill fill)
{
  SharedLibrary library(spec.soname, spec.scheme, spec.what, spec.package);
  Lib lib;
  fill(lib, library);
  library.require_all(spec.version);
  return lib;
}

} // namespace dlock::util

// A library's functions come as an X-macro list (LIST(X) calls X(name) for each): inside the
// struct, DLOCK_LIBRARY_POINTERS(LIST) declares a pointer for each; inside a load_library fill
// with parameters (lib, library), LIST(DLOCK_LIBRARY_RESOLVE) resolves them.
#define DLOCK_LIBRARY_POINTER(name) decltype(&::name) name = nullptr;
#define DLOCK_LIBRARY_POINTERS(LIST) LIST(DLOCK_LIBRARY_POINTER)
#define DLOCK_LIBRARY_RESOLVE(name) library.resolve(lib.name, #name);

#include "util/log.hpp"

#include "util/text.hpp"

#include <unistd.h>

#include <cerrno>
#include <string>

namespace dlock::util {

namespace {
Verbosity g_verbosity = Verbosity::normal;
}

void set_verbosity(Verbosity verbosity) { g_verbosity = verbosity; }

Verbosity verbosity() { return g_verbosity; }

void write_line(std::string_view message)
{
  std::string line = "dlock: ";
  // Every line escaped once more, here: a message may quote what another tenant of the store
  // or another user wrote (a server's error, a holder record), and escaping is idempotent.
  line.append(printable(message));
  line.push_back('\n');
  const char* data = line.data();
  std::size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, data, left);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return; // stderr is gone; nothing better to do
    }
    data += n;
    left -= static_cast<std::size_t>(n);
  }
}

} // namespace dlock::util

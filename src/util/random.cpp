#include "util/random.hpp"

#include "util/error.hpp"

#include <sys/random.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace dlock::util {

namespace {

void fill_random(void* buffer, std::size_t size)
{
  auto* bytes = static_cast<unsigned char*>(buffer);
  std::size_t done = 0;
  while (done < size) {
    ssize_t n = getrandom(bytes + done, size - done, 0);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      throw Error(ExitCode::internal, "getrandom failed: {}", std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
}

} // namespace

std::string random_token()
{
  std::array<unsigned char, 16> bytes{};
  fill_random(bytes.data(), bytes.size());
  static constexpr char hex[] = "0123456789abcdef";
  std::string token;
  token.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) {
    token.push_back(hex[b >> 4]);
    token.push_back(hex[b & 0xf]);
  }
  return token;
}

} // namespace dlock::util

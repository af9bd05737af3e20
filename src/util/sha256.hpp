#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace dlock::util {

// SHA-256 (FIPS 180-4) of bytes, without OpenSSL: stores derive database lock keys from lock
// names with it, and linking libcrypto would slow every start (OpenSSL lives in the TLS module).
std::array<std::uint8_t, 32> sha256(std::string_view bytes);

// The digest in lower-case hex (64 characters).
std::string sha256_hex(std::string_view bytes);

} // namespace dlock::util

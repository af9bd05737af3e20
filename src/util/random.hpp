#pragma once

#include <string>

namespace dlock::util {

// A lock token: 128 bits from the kernel CSPRNG (getrandom), hex-encoded.
std::string random_token();

} // namespace dlock::util

#pragma once

#include <cstdint>
#include <string>

namespace dlock::util {

// A lock token: 128 bits from the kernel CSPRNG (getrandom), hex-encoded.
std::string random_token();

// A uniformly random integer in [0, bound) from the kernel CSPRNG, for backoff jitter.
std::uint64_t random_below(std::uint64_t bound);

} // namespace dlock::util

#pragma once

#include <string>
#include <string_view>

namespace dlock::util {

// Hex SHA-1 of data; lets dlock EVALSHA its Lua scripts without a SCRIPT LOAD round trip.
std::string sha1_hex(std::string_view data);

} // namespace dlock::util

#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace dlock::lock {

// The longest lock name, in bytes (what a store holds under a longer one is not dlock's).
inline constexpr std::size_t max_name_bytes = 1024;

// A lock's name as the user gave it: 1 to 1024 bytes without control characters. Checked once,
// where it is made, so that holding a LockName means holding a valid one.
class LockName {
public:
  // Throws Error(usage) naming what is wrong with text.
  static LockName parse(std::string_view text);

  const std::string& str() const noexcept { return m_text; }
  friend bool operator==(const LockName&, const LockName&) = default;

private:
  explicit LockName(std::string text) : m_text(std::move(text)) {}
  std::string m_text;
};

// Several lock names in the one order every dlock takes them in (bytewise, duplicates
// dropped), so that two holders asking for the same keys never wait for each other in a cycle.
std::vector<LockName> canonical_order(std::vector<LockName> names);

// The names separated by spaces, as DLOCK_KEYS shows them.
std::string join_names(const std::vector<LockName>& names);

} // namespace dlock::lock

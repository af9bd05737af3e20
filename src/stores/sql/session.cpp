#include "stores/sql/session.hpp"

#include <charconv>

namespace dlock::sql {

void Session::ended(const Error& error)
{
  if (!m_broken) {
    m_broken = error;
    if (m_on_end) {
      m_on_end(error);
    }
  }
}

std::int64_t parse_number(std::string_view value, std::string_view server)
{
  std::int64_t n = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc() || end != value.data() + value.size()) {
    throw Error(ExitCode::internal, "{} answered '{}' where dlock expected a number", server,
                value);
  }
  return n;
}

} // namespace dlock::sql

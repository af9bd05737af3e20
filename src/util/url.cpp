#include "util/url.hpp"

namespace dlock::util {

std::size_t after_scheme(std::string_view url)
{
  auto pos = url.find("://");
  return pos == std::string_view::npos ? pos : pos + 3;
}

std::optional<std::string_view> userinfo_of(std::string_view url)
{
  std::size_t start = after_scheme(url);
  std::size_t at = url.rfind('@');
  if (start == std::string_view::npos || at == std::string_view::npos || at < start) {
    return std::nullopt;
  }
  return url.substr(start, at - start);
}

std::optional<PasswordSpan> password_span(std::string_view url)
{
  auto userinfo = userinfo_of(url);
  if (!userinfo) {
    return std::nullopt;
  }
  std::size_t colon = userinfo->find(':');
  if (colon == std::string_view::npos || colon + 1 == userinfo->size()) {
    return std::nullopt;
  }
  auto offset = static_cast<std::size_t>(userinfo->data() - url.data()) + colon + 1;
  return PasswordSpan{offset, userinfo->size() - colon - 1};
}

bool url_has_password(std::string_view url) { return password_span(url).has_value(); }

std::string url_redacted(std::string_view url)
{
  auto password = password_span(url);
  if (!password) {
    return std::string(url);
  }
  return std::string(url.substr(0, password->offset))
    .append("***")
    .append(url.substr(password->offset + password->length));
}

std::string url_without_password(std::string_view url)
{
  auto password = password_span(url);
  if (!password) {
    return std::string(url);
  }
  std::size_t colon = password->offset - 1;
  std::size_t at = password->offset + password->length;
  // No user left: no "@" either ("redis://:pass@host" becomes "redis://host").
  bool no_user = colon == after_scheme(url);
  return std::string(url.substr(0, colon)).append(url.substr(no_user ? at + 1 : at));
}

namespace {

int hex_value(char c)
{
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

} // namespace

std::optional<std::string> percent_decode(std::string_view text)
{
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%') {
      if (i + 2 >= text.size()) {
        return std::nullopt;
      }
      int hi = hex_value(text[i + 1]);
      int lo = hex_value(text[i + 2]);
      if (hi < 0 || lo < 0) {
        return std::nullopt;
      }
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

} // namespace dlock::util

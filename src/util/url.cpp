#include "util/url.hpp"

#include <algorithm>

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

namespace {

// The query parameters of url that hold a secret, each as the span of the whole "key=value"
// (key: its first key_length bytes). The query starts at the first '?' after the scheme (a
// '?' in a password must be escaped); a value ends at the next '&' only, so that a '#' in
// it hides nothing.
struct SecretParameter {
  std::size_t offset = 0;
  std::size_t length = 0;
  std::size_t key_length = 0;
};

std::vector<SecretParameter> secret_parameters(std::string_view url)
{
  std::vector<SecretParameter> found;
  std::size_t start = after_scheme(url);
  std::size_t question = start == std::string_view::npos ? start : url.find('?', start);
  if (question == std::string_view::npos) {
    return found;
  }
  for (std::size_t at = question + 1; at <= url.size();) {
    std::size_t end = std::min(url.find('&', at), url.size());
    std::string_view pair = url.substr(at, end - at);
    std::size_t equals = pair.find('=');
    if (equals != std::string_view::npos) {
      // libpq decodes the keys too: "pass%77ord=" is a password as well
      std::optional<std::string> key = percent_decode(pair.substr(0, equals));
      if (key && (*key == "password" || *key == "sslpassword")) {
        found.push_back(SecretParameter{at, pair.size(), equals + 1});
      }
    }
    at = end + 1;
  }
  return found;
}

} // namespace

std::vector<PasswordSpan> secret_spans(std::string_view url)
{
  std::vector<PasswordSpan> spans;
  if (auto password = password_span(url)) {
    spans.push_back(*password);
  }
  for (const SecretParameter& parameter : secret_parameters(url)) {
    if (parameter.length > parameter.key_length) {
      spans.push_back(PasswordSpan{parameter.offset + parameter.key_length,
                                   parameter.length - parameter.key_length});
    }
  }
  std::sort(spans.begin(), spans.end(),
            [](const PasswordSpan& a, const PasswordSpan& b) { return a.offset < b.offset; });
  // A user information that seems to end inside the query ("?password=a:b@c"): one span.
  std::vector<PasswordSpan> merged;
  for (const PasswordSpan& span : spans) {
    if (!merged.empty() && span.offset <= merged.back().offset + merged.back().length) {
      PasswordSpan& last = merged.back();
      last.length = std::max(last.offset + last.length, span.offset + span.length) - last.offset;
    } else {
      merged.push_back(span);
    }
  }
  return merged;
}

bool url_has_password(std::string_view url) { return !secret_spans(url).empty(); }

std::string url_redacted(std::string_view url)
{
  std::string out;
  std::size_t done = 0;
  for (const PasswordSpan& span : secret_spans(url)) {
    out.append(url.substr(done, span.offset - done)).append("***");
    done = span.offset + span.length;
  }
  return out.append(url.substr(done));
}

std::string url_without_password(std::string_view url)
{
  std::string out(url);
  // From the end, so that each span is still where it was found.
  std::vector<SecretParameter> parameters = secret_parameters(url);
  for (auto it = parameters.rbegin(); it != parameters.rend(); ++it) {
    std::size_t from = it->offset;
    std::size_t to = it->offset + it->length;
    if (to < out.size() && out[to] == '&') {
      ++to; // "?password=x&sslmode=require" keeps "?sslmode=require"
    } else {
      --from; // the last one: its '&' or the '?' goes with it
    }
    out.erase(from, to - from);
  }
  auto password = password_span(out);
  if (!password) {
    return out;
  }
  std::size_t colon = password->offset - 1;
  std::size_t at = password->offset + password->length;
  // No user left: no "@" either ("redis://:pass@host" becomes "redis://host").
  bool no_user = colon == after_scheme(out);
  return out.substr(0, colon).append(out.substr(no_user ? at + 1 : at));
}

std::string without_url_secrets(std::string text, std::string_view url)
{
  auto replace_all = [&text](std::string_view what, std::string_view with) {
    if (what.empty()) {
      return;
    }
    for (std::size_t at = text.find(what); at != std::string::npos;
         at = text.find(what, at + with.size())) {
      text.replace(at, what.size(), with);
    }
  };
  std::vector<PasswordSpan> spans = secret_spans(url);
  if (spans.empty()) {
    return text;
  }
  replace_all(url, url_redacted(url));
  for (const PasswordSpan& span : spans) {
    std::string_view secret = url.substr(span.offset, span.length);
    replace_all(secret, "***");
    if (std::optional<std::string> decoded = percent_decode(secret);
        decoded && *decoded != secret) {
      replace_all(*decoded, "***");
    }
  }
  return text;
}

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

std::optional<std::string> percent_decode(std::string_view text, HexDigits digits)
{
  auto lower = [digits](char c) { return digits == HexDigits::upper_case && c >= 'a' && c <= 'f'; };
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%') {
      if (i + 2 >= text.size()) {
        return std::nullopt;
      }
      int hi = hex_value(text[i + 1]);
      int lo = hex_value(text[i + 2]);
      if (hi < 0 || lo < 0 || lower(text[i + 1]) || lower(text[i + 2])) {
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

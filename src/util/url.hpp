#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// The user information of URLs ("scheme://user:password@rest"), whatever the store: where the
// password is, so that it is kept out of messages, argv and a command's environment.
namespace dlock::util {

// "scheme://userinfo@rest": the position just after the scheme's "://", or npos.
std::size_t after_scheme(std::string_view url);

// "scheme://USERINFO@rest": USERINFO (the last '@' ends it, as passwords may contain escaped
// '@' only), or nullopt when there is no '@' after the scheme.
std::optional<std::string_view> userinfo_of(std::string_view url);

// Where a URL string's password is: in "scheme://[user]:PASSWORD@rest" (the last '@' ends
// the user information, the first ':' in it starts the password), the still %-escaped
// PASSWORD. An empty one is no password, as for parse_url. The one place that finds it.
struct PasswordSpan {
  std::size_t offset = 0;
  std::size_t length = 0;
};
std::optional<PasswordSpan> password_span(std::string_view url);

// Every secret a URL string carries, as spans of it, in order and not overlapping: the
// password of its user information (password_span) and the values of the query parameters
// password= and sslpassword= (a libpq URI takes them there: postgres://h/db?password=x).
// The one place that finds them all, for argv, messages and a command's environment.
std::vector<PasswordSpan> secret_spans(std::string_view url);

// Whether a URL string carries a secret (secret_spans), so the CLI can warn that argv shows it.
bool url_has_password(std::string_view url);

// Which hex digits a %XX escape may use: either case (a URL), or upper case only (a name that
// dlock encodes itself, so that one name has one spelling).
enum class HexDigits { any_case, upper_case };

// Decodes the %XX escapes of a URL part (a '@', ':' or '/' in a user name, password or
// path must be escaped), or of a name a store encodes so; nullopt when an escape is malformed.
std::optional<std::string> percent_decode(std::string_view text,
                                          HexDigits digits = HexDigits::any_case);

// The value of a hex digit of either case; -1 for any other character.
int hex_value(char c);

// The URL with each secret replaced by "***", safe for messages.
std::string url_redacted(std::string_view url);

// The URL with its secrets taken out (the password with the ':' before it, the password=
// and sslpassword= parameters whole), user and all else kept: what a command may see of
// dlock's URL.
std::string url_without_password(std::string_view url);

// text with every secret of url in it replaced by "***": the URL itself (redacted), each
// secret as written and as decoded. For messages of a library that may quote what it parsed.
std::string without_url_secrets(std::string text, std::string_view url);

} // namespace dlock::util

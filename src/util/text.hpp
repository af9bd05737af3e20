#pragma once

#include <string>
#include <string_view>

namespace dlock::util {

// The longest prefix of text of at most max_bytes that does not cut a UTF-8 character.
std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes);

// The longest prefix of text of at most max_chars characters (an invalid byte counts as one)
// that does not cut a UTF-8 character: what fits a terminal line of max_chars columns.
std::string_view utf8_prefix_chars(std::string_view text, std::size_t max_chars);

// Length of the valid UTF-8 character at the start of text, or 0 if it is not one.
std::size_t utf8_char_length(std::string_view text);

// text with control characters written as \t, \n, \r or \xNN, so it stays on one line, bytes
// that are not UTF-8 as \xNN, so it stays valid text, and C1 controls and invisible format
// characters (bidi overrides, zero-width) as \uNNNN, so what a terminal shows is what is there.
std::string printable(std::string_view text);

// A client library's message on one line: trailing newlines and blanks dropped, inner newlines
// and tabs made blanks (libpq's and MariaDB's messages end with a newline and may span lines),
// other control characters escaped as printable() does.
std::string one_line(const char* message);

} // namespace dlock::util

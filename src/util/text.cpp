#include "util/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

namespace dlock::util {

std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes)
{
  if (text.size() <= max_bytes) {
    return text;
  }
  std::size_t cut = max_bytes;
  // text[cut] is the first byte left out: back off while it continues a character.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  return text.substr(0, cut);
}

std::string_view utf8_prefix_chars(std::string_view text, std::size_t max_chars)
{
  std::size_t end = 0;
  for (std::size_t chars = 0; chars < max_chars && end < text.size(); ++chars) {
    end += std::max<std::size_t>(1, utf8_char_length(text.substr(end)));
  }
  return text.substr(0, end);
}

std::size_t utf8_char_length(std::string_view text)
{
  if (text.empty()) {
    return 0;
  }
  auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  unsigned char lead = byte(0);
  std::size_t length = lead < 0x80           ? 1
                       : (lead >> 5) == 0x6  ? 2
                       : (lead >> 4) == 0xE  ? 3
                       : (lead >> 3) == 0x1E ? 4
                                             : 0;
  if (length == 0 || length > text.size()) {
    return 0;
  }
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) {
      return 0;
    }
  }
  // Reject overlong forms and surrogates, as strict decoders do.
  if ((length == 2 && lead < 0xC2) || (length == 3 && lead == 0xE0 && byte(1) < 0xA0)
      || (length == 3 && lead == 0xED && byte(1) >= 0xA0)
      || (length == 4 && lead == 0xF0 && byte(1) < 0x90)
      || (length == 4 && (lead > 0xF4 || (lead == 0xF4 && byte(1) >= 0x90)))) {
    return 0;
  }
  return length;
}

namespace {

// The code point of the valid UTF-8 character of length bytes at the start of text.
char32_t decode_utf8(std::string_view text, std::size_t length)
{
  auto byte = [&](std::size_t i) {
    return static_cast<char32_t>(static_cast<unsigned char>(text[i]));
  };
  switch (length) {
  case 1:
    return byte(0);
  case 2:
    return ((byte(0) & 0x1F) << 6) | (byte(1) & 0x3F);
  case 3:
    return ((byte(0) & 0x0F) << 12) | ((byte(1) & 0x3F) << 6) | (byte(2) & 0x3F);
  default:
    return ((byte(0) & 0x07) << 18) | ((byte(1) & 0x3F) << 12) | ((byte(2) & 0x3F) << 6)
           | (byte(3) & 0x3F);
  }
}

// Characters a terminal acts on or hides instead of showing: C1 controls (some terminals take
// U+009B as CSI), and the invisible format characters that reorder or hide text (bidi
// overrides and isolates, zero-width characters, line and paragraph separators, tags).
bool is_hidden_or_control(char32_t c)
{
  return (c >= 0x80 && c <= 0x9F) || c == 0xAD || c == 0x061C || c == 0x180E
         || (c >= 0x200B && c <= 0x200F) || (c >= 0x2028 && c <= 0x202E)
         || (c >= 0x2060 && c <= 0x206F) || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB)
         || (c >= 0xE0000 && c <= 0xE007F);
}

} // namespace

std::string printable(std::string_view text)
{
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    auto byte = static_cast<unsigned char>(c);
    std::size_t length = utf8_char_length(text.substr(i));
    if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (byte < 0x20 || byte == 0x7f || length == 0) {
      out += fmt::format("\\x{:02x}", byte);
    } else if (char32_t code = decode_utf8(text.substr(i), length); is_hidden_or_control(code)) {
      out += code <= 0xFFFF ? fmt::format("\\u{:04x}", static_cast<std::uint32_t>(code))
                            : fmt::format("\\U{:08x}", static_cast<std::uint32_t>(code));
      i += length - 1;
    } else {
      out.append(text.substr(i, length));
      i += length - 1;
    }
  }
  return out;
}

std::string one_line(const char* message)
{
  std::string text = message != nullptr ? message : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) {
    text.pop_back();
  }
  for (char& c : text) {
    if (c == '\n' || c == '\t') {
      c = ' ';
    }
  }
  return printable(text); // a server's message may carry another tenant's text (a trigger's)
}

} // namespace dlock::util

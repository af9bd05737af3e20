#include "util/json.hpp"
#include "util/text.hpp"

#include <gtest/gtest.h>

using dlock::util::format_rfc3339;
using dlock::util::json_quote;
using dlock::util::JsonObject;
using dlock::util::printable;
using dlock::util::utf8_prefix;
using dlock::util::utf8_prefix_chars;

TEST(Text, Utf8PrefixNeverCutsACharacter)
{
  std::string e_acute = "\xc3\xa9"; // é
  std::string text = "ab" + e_acute + e_acute;
  EXPECT_EQ(utf8_prefix(text, 3), "ab");
  EXPECT_EQ(utf8_prefix(text, 4), "ab" + e_acute);
  EXPECT_EQ(utf8_prefix(text, 100), text);
  EXPECT_EQ(utf8_prefix("\xe2\x82\xac", 2), ""); // €
}

TEST(Text, Utf8PrefixCharsCountsCharactersNotBytes)
{
  std::string e_acute = "\xc3\xa9";  // é, 2 bytes
  std::string euro = "\xe2\x82\xac"; // €, 3 bytes
  std::string text = "ab" + e_acute + euro + "c";
  EXPECT_EQ(utf8_prefix_chars(text, 0), "");
  EXPECT_EQ(utf8_prefix_chars(text, 2), "ab");
  EXPECT_EQ(utf8_prefix_chars(text, 3), "ab" + e_acute);
  EXPECT_EQ(utf8_prefix_chars(text, 4), "ab" + e_acute + euro);
  EXPECT_EQ(utf8_prefix_chars(text, 5), text);
  EXPECT_EQ(utf8_prefix_chars(text, 100), text);
  // Each byte that is not part of a valid character counts as one (a terminal shows one
  // replacement character for it), and so does each byte of an incomplete character.
  EXPECT_EQ(utf8_prefix_chars("\xff\xfe"
                              "abc",
                              3),
            "\xff\xfe"
            "a");
  EXPECT_EQ(utf8_prefix_chars("a\xe2\x82", 2), "a\xe2");
}

TEST(Text, PrintableKeepsOneLine)
{
  EXPECT_EQ(printable("a\tb\nc\x01"), "a\\tb\\nc\\x01");
  EXPECT_EQ(printable("plain é"), "plain é");
  EXPECT_EQ(printable("bad \xff\xc3("), "bad \\xff\\xc3(");
}

TEST(Text, PrintableEscapesC1ControlsAndInvisibleFormatCharacters)
{
  // C1 controls in UTF-8: U+009B is CSI to some terminals, U+0085 a line break.
  EXPECT_EQ(printable("a\xc2\x9b"
                      "2J b\xc2\x85"
                      "c"),
            "a\\u009b2J b\\u0085c");
  EXPECT_EQ(printable("\xc2\x80\xc2\x9f"), "\\u0080\\u009f");
  // Bidi overrides and isolates, zero-width and other invisible format characters.
  EXPECT_EQ(printable("x\xe2\x80\xae"
                      "cba"),
            "x\\u202ecba"); // RIGHT-TO-LEFT OVERRIDE
  EXPECT_EQ(printable("\xe2\x81\xa6"
                      "y\xe2\x81\xa9"),
            "\\u2066y\\u2069"); // LRI, PDI
  EXPECT_EQ(printable("\xe2\x80\x8b\xe2\x80\x8f"), "\\u200b\\u200f");
  EXPECT_EQ(printable("\xe2\x80\xaa\xe2\x81\xa0\xef\xbb\xbf\xd8\x9c"),
            "\\u202a\\u2060\\ufeff\\u061c");
  EXPECT_EQ(printable("\xe2\x80\xa8"), "\\u2028");         // LINE SEPARATOR
  EXPECT_EQ(printable("\xf3\xa0\x81\x81"), "\\U000e0041"); // TAG LATIN CAPITAL A
  // Their printable neighbours stay as they are.
  EXPECT_EQ(printable("\xc2\xa0\xc2\xa9 \xe2\x80\x94 \xe2\x80\xaf \xd8\xa7"),
            "\xc2\xa0\xc2\xa9 \xe2\x80\x94 \xe2\x80\xaf \xd8\xa7");
  // Overlong and invalid forms are bytes, not characters.
  EXPECT_EQ(printable("\xc0\x9b"), "\\xc0\\x9b");
}

TEST(Json, EscapesAndKeepsUtf8Valid)
{
  EXPECT_EQ(json_quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
  EXPECT_EQ(json_quote("\x01"), "\"\\u0001\"");
  EXPECT_EQ(json_quote("é"), "\"é\"");
  EXPECT_EQ(json_quote("x\xc3"), "\"x\\ufffd\"");                     // truncated character
  EXPECT_EQ(json_quote("\xff\xfe"), "\"\\ufffd\\ufffd\"");            // not UTF-8 at all
  EXPECT_EQ(json_quote("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\""); // a surrogate
}

TEST(Json, ObjectKeepsFieldOrder)
{
  JsonObject object;
  object.add("version", std::int64_t{1}).add("key", "k").add("held", true).add_null("ttl_ms");
  EXPECT_EQ(object.str(), R"({"version":1,"key":"k","held":true,"ttl_ms":null})");
}

TEST(Json, Rfc3339Utc)
{
  EXPECT_EQ(format_rfc3339(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(format_rfc3339(1795359750005), "2026-11-22T15:02:30.005Z");
}

TEST(Text, OneLineEscapesWhatAServerPassesOn)
{
  EXPECT_EQ(dlock::util::one_line("ERROR:  owned\x1b]0;t\x07\n\tdetail\n"),
            "ERROR:  owned\\x1b]0;t\\x07  detail");
  EXPECT_EQ(dlock::util::one_line(nullptr), "");
}

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
  std::string e_acute = "\xc3\xa9"; // é, 2 bytes
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
  EXPECT_EQ(utf8_prefix_chars("\xff\xfe" "abc", 3), "\xff\xfe" "a");
  EXPECT_EQ(utf8_prefix_chars("a\xe2\x82", 2), "a\xe2");
}

TEST(Text, PrintableKeepsOneLine)
{
  EXPECT_EQ(printable("a\tb\nc\x01"), "a\\tb\\nc\\x01");
  EXPECT_EQ(printable("plain é"), "plain é");
  EXPECT_EQ(printable("bad \xff\xc3("), "bad \\xff\\xc3(");
}

TEST(Json, EscapesAndKeepsUtf8Valid)
{
  EXPECT_EQ(json_quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
  EXPECT_EQ(json_quote("\x01"), "\"\\u0001\"");
  EXPECT_EQ(json_quote("é"), "\"é\"");
  EXPECT_EQ(json_quote("x\xc3"), "\"x\\ufffd\"");         // truncated character
  EXPECT_EQ(json_quote("\xff\xfe"), "\"\\ufffd\\ufffd\""); // not UTF-8 at all
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
  EXPECT_EQ(dlock::util::one_line("ERROR:  owned\x1b]0;t\x07\n\tdetail\n"), "ERROR:  owned\\x1b]0;t\\x07  detail");
  EXPECT_EQ(dlock::util::one_line(nullptr), "");
}

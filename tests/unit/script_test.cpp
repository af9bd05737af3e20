#include "lock/holder.hpp"
#include "stores/redis/scripts.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace {

// SHA-1 in hex, here only to check the hashes CMake computed for the scripts (dlock itself has
// no SHA-1 code).
std::string sha1_hex(std::string_view data)
{
  auto rotl = [](std::uint32_t value, int bits) {
    return (value << bits) | (value >> (32 - bits));
  };
  std::array<std::uint32_t, 5> h{0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
  std::string padded(data);
  std::uint64_t bit_length = static_cast<std::uint64_t>(data.size()) * 8;
  padded.push_back(static_cast<char>(0x80));
  while (padded.size() % 64 != 56) {
    padded.push_back('\0');
  }
  for (int i = 7; i >= 0; --i) {
    padded.push_back(static_cast<char>((bit_length >> (8 * i)) & 0xff));
  }
  for (std::size_t block = 0; block < padded.size(); block += 64) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(padded.data() + block);
    std::array<std::uint32_t, 80> w{};
    for (int i = 0; i < 16; ++i) {
      w[i] = (std::uint32_t(bytes[4 * i]) << 24) | (std::uint32_t(bytes[4 * i + 1]) << 16)
             | (std::uint32_t(bytes[4 * i + 2]) << 8) | std::uint32_t(bytes[4 * i + 3]);
    }
    for (int i = 16; i < 80; ++i) {
      w[i] = rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    }
    std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; ++i) {
      std::uint32_t f = i < 20   ? (b & c) | (~b & d)
                        : i < 40 ? b ^ c ^ d
                        : i < 60 ? (b & c) | (b & d) | (c & d)
                                 : b ^ c ^ d;
      std::uint32_t k = i < 20   ? 0x5A827999
                        : i < 40 ? 0x6ED9EBA1
                        : i < 60 ? 0x8F1BBCDC
                                 : 0xCA62C1D6;
      std::uint32_t temp = rotl(a, 5) + f + e + k + w[i];
      e = d;
      d = c;
      c = rotl(b, 30);
      b = a;
      a = temp;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
  }
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (std::uint32_t word : h) {
    for (int shift = 28; shift >= 0; shift -= 4) {
      out.push_back(hex[(word >> shift) & 0xf]);
    }
  }
  return out;
}

} // namespace

TEST(Scripts, Sha1KnownVectors)
{
  EXPECT_EQ(sha1_hex(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  EXPECT_EQ(sha1_hex("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
  EXPECT_EQ(sha1_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
  EXPECT_EQ(sha1_hex(std::string(1000, 'a')), "291e9a6c66994949b57ba5e650361e98fc36b1ba");
}

// EVALSHA must name the script EVAL sends, or every call would pay a NOSCRIPT round trip.
TEST(Scripts, EmbeddedShaIsTheSourcesSha1)
{
  using namespace dlock::redis;
  for (const Script* script :
       {&scripts::acquire(), &scripts::renew(), &scripts::renew_slot(), &scripts::release(),
        &scripts::inspect(), &scripts::wake(), &scripts::raise_fence(), &scripts::watch(),
        &scripts::leader(), &scripts::barrier(), &scripts::barrier_leave(), &scripts::latch_check(),
        &scripts::latch_set(), &scripts::latch_down()}) {
    std::vector<std::string> eval = script->eval({"k"}, {"a"});
    std::vector<std::string> evalsha = script->evalsha({"k"}, {"a"});
    ASSERT_EQ(eval.size(), 5U);
    EXPECT_EQ(eval[0], "EVAL");
    EXPECT_EQ(evalsha[0], "EVALSHA");
    EXPECT_EQ(evalsha[1], sha1_hex(eval[1])) << eval[1];
    EXPECT_EQ(std::vector<std::string>(eval.begin() + 2, eval.end()),
              std::vector<std::string>(evalsha.begin() + 2, evalsha.end()));
  }
}

// The shared functions come first where they are used, and only there.
TEST(Scripts, PreludeWhereUsed)
{
  using namespace dlock::redis;
  auto source = [](const Script& script) { return script.eval({}, {})[1]; };
  EXPECT_TRUE(source(scripts::acquire()).starts_with("-- Put before"));
  EXPECT_NE(source(scripts::acquire()).find("local lock_key = KEYS[1]"), std::string::npos);
  EXPECT_TRUE(source(scripts::release()).starts_with("-- Put before"));
  EXPECT_TRUE(source(scripts::inspect()).starts_with("-- Put before"));
  EXPECT_TRUE(source(scripts::renew_slot()).starts_with("-- Put before"));
  // read_counter, record_number: what another tenant wrote is read bounded and checked.
  EXPECT_TRUE(source(scripts::renew()).starts_with("-- Put before"));
  EXPECT_TRUE(source(scripts::raise_fence()).starts_with("-- Put before"));
  EXPECT_TRUE(source(scripts::wake()).starts_with("-- Put before")); // push_wakeups
  EXPECT_TRUE(source(scripts::watch()).starts_with("-- Put before"));
  EXPECT_TRUE(source(scripts::leader()).starts_with("-- Put before"));
  EXPECT_TRUE(source(scripts::barrier()).starts_with("-- Put before"));
  EXPECT_TRUE(source(scripts::latch_check()).starts_with("-- Put before"));
  EXPECT_TRUE(source(scripts::latch_set()).starts_with("-- Put before"));
  EXPECT_TRUE(source(scripts::latch_down()).starts_with("-- Put before"));
  EXPECT_EQ(source(scripts::barrier_leave()).find("server_now"), std::string::npos);
}

TEST(Scripts, RecordCapsAgreeWithTheClient)
{
  using namespace dlock::redis;
  std::string prelude = scripts::inspect().eval({}, {})[1];
  EXPECT_NE(prelude.find("local max_record_bytes = "
                         + std::to_string(dlock::lock::max_holder_record_bytes) + "\n"),
            std::string::npos);
  EXPECT_NE(prelude.find("local max_field_bytes = "
                         + std::to_string(dlock::lock::max_holder_field_bytes) + "\n"),
            std::string::npos);
  EXPECT_NE(
    prelude.find("local max_note_bytes = " + std::to_string(dlock::lock::max_note_bytes) + "\n"),
    std::string::npos);
}

#include "cli/secrets.hpp"
#include "stores/redis/url.hpp"
#include "util/error.hpp"
#include "util/url.hpp"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

using dlock::Error;
using dlock::ExitCode;
using dlock::redis::Endpoint;
using dlock::redis::parse_url;
using dlock::util::url_has_password;

TEST(Url, HostPortDb)
{
  Endpoint e = parse_url("redis://example.test:6380/3");
  EXPECT_EQ(e.transport, Endpoint::Transport::tcp);
  EXPECT_EQ(e.host, "example.test");
  EXPECT_EQ(e.port, 6380);
  EXPECT_EQ(e.db, 3);
  EXPECT_FALSE(e.tls);
  EXPECT_FALSE(e.password);
}

TEST(Url, Defaults)
{
  Endpoint e = parse_url("redis://localhost");
  EXPECT_EQ(e.port, 6379);
  EXPECT_EQ(e.db, 0);
  EXPECT_TRUE(e.user.empty());
}

TEST(Url, UserAndPassword)
{
  Endpoint e = parse_url("redis://alice:s%40cret:x@h:1");
  EXPECT_EQ(e.user, "alice");
  ASSERT_TRUE(e.password);
  EXPECT_EQ(*e.password, "s@cret:x");
  Endpoint only_password = parse_url("redis://:pw@h");
  EXPECT_TRUE(only_password.user.empty());
  EXPECT_EQ(*only_password.password, "pw");
  Endpoint only_user = parse_url("redis://bob@h");
  EXPECT_EQ(only_user.user, "bob");
  EXPECT_FALSE(only_user.password);
}

TEST(Url, Ipv6)
{
  Endpoint e = parse_url("redis://[::1]:7000/1");
  EXPECT_EQ(e.host, "::1");
  EXPECT_EQ(e.port, 7000);
  EXPECT_EQ(e.db, 1);
  EXPECT_EQ(e.redacted(), "redis://[::1]:7000/1");
}

TEST(Url, UnixSocket)
{
  Endpoint e = parse_url("unix:///run/redis/redis.sock?db=2");
  EXPECT_EQ(e.transport, Endpoint::Transport::unix_socket);
  EXPECT_EQ(e.socket_path, "/run/redis/redis.sock");
  EXPECT_EQ(e.db, 2);
  Endpoint with_auth = parse_url("unix://u:p@/tmp/r.sock");
  EXPECT_EQ(with_auth.user, "u");
  EXPECT_EQ(*with_auth.password, "p");
  EXPECT_EQ(with_auth.socket_path, "/tmp/r.sock");
}

TEST(Url, Tls) { EXPECT_TRUE(parse_url("rediss://h:6380").tls); }

TEST(Url, RedactsPasswordEverywhere)
{
  Endpoint e = parse_url("redis://alice:hunter2@h:1");
  EXPECT_EQ(e.redacted(), "redis://alice:***@h:1");
  try {
    parse_url("redis://alice:hunter2@h:notaport");
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::usage);
    EXPECT_EQ(std::string(error.what()).find("hunter2"), std::string::npos) << error.what();
  }
}

TEST(Url, RejectsMalformed)
{
  for (const char* bad :
       {"", "localhost:6379", "http://h", "redis://", "redis://h:0", "redis://h:65536",
        "redis://h:", "redis://h/x", "redis://[::1", "unix://relative.sock", "unix:///s.sock?db=x",
        "unix:///s?foo=1", "redis://u:%zz@h"}) {
    try {
      parse_url(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ExitCode::usage) << bad;
    }
  }
}

TEST(Url, DetectsPasswordInArgument)
{
  EXPECT_TRUE(url_has_password("redis://u:p@h"));
  EXPECT_TRUE(url_has_password("redis://:p@h"));
  EXPECT_FALSE(url_has_password("redis://u@h"));
  EXPECT_FALSE(url_has_password("redis://h:6379"));
  EXPECT_FALSE(url_has_password("--key"));
}

TEST(UrlWithoutPassword, TakesOutThePasswordOnly)
{
  using dlock::util::url_without_password;
  EXPECT_EQ(url_without_password("redis://user:secret@host:6380/2"), "redis://user@host:6380/2");
  EXPECT_EQ(url_without_password("redis://:secret@host"), "redis://host");
  EXPECT_EQ(url_without_password("unix://:p%40ss@/run/redis.sock?db=1"),
            "unix:///run/redis.sock?db=1");
  EXPECT_EQ(url_without_password("redis://host:6379"), "redis://host:6379");
  EXPECT_EQ(url_without_password("redis://user@host"), "redis://user@host");
}

TEST(PasswordSpan, FindsThePasswordOnly)
{
  using dlock::util::password_span;
  auto span = password_span("redis://user:secret@host:6380/2");
  ASSERT_TRUE(span);
  EXPECT_EQ(span->offset, 13U);
  EXPECT_EQ(span->length, 6U);
  // The last '@' ends the user information; the first ':' in it starts the password.
  span = password_span("unix://:p%40ss:x@/run/redis.sock");
  ASSERT_TRUE(span);
  EXPECT_EQ(std::string_view("unix://:p%40ss:x@/run/redis.sock").substr(span->offset, span->length),
            "p%40ss:x");
  for (const char* none : {"redis://user@host", "redis://user:@host", "redis://host:6379",
                           "redis://h/0@x", "user:pw@host", "--key", ""}) {
    EXPECT_FALSE(password_span(none)) << none;
  }
}

TEST(Url, RedactsAUrlString)
{
  using dlock::util::url_redacted;
  EXPECT_EQ(url_redacted("redis://alice:hunter2@h:1"), "redis://alice:***@h:1");
  EXPECT_EQ(url_redacted("rediss://:a@b@h"), "rediss://:***@h");
  EXPECT_EQ(url_redacted("redis://alice@h"), "redis://alice@h");
  EXPECT_EQ(url_redacted("not a url"), "not a url");
}

TEST(Url, QueryPasswordsAreSecretsToo)
{
  using dlock::util::url_redacted;
  using dlock::util::url_without_password;
  EXPECT_TRUE(url_has_password("postgres://h/db?password=x"));
  EXPECT_TRUE(url_has_password("postgres://h/db?sslmode=require&sslpassword=x"));
  EXPECT_TRUE(url_has_password("postgres://h/db?pass%77ord=x"));
  EXPECT_FALSE(url_has_password("postgres://h/db?sslmode=require&user=password"));
  EXPECT_EQ(url_redacted("postgres://u:a@h/db?password=b&sslpassword=c&sslmode=require"),
            "postgres://u:***@h/db?password=***&sslpassword=***&sslmode=require");
  // a '@' or ':' in the query's password does not leak part of it
  EXPECT_EQ(url_redacted("postgres://h/db?password=p:x@y"), "postgres://h/db?password=***");
  EXPECT_EQ(url_without_password("postgres://u:a@h/db?password=b&sslmode=require"),
            "postgres://u@h/db?sslmode=require");
  EXPECT_EQ(url_without_password("postgres://h/db?sslmode=require&password=b"),
            "postgres://h/db?sslmode=require");
  EXPECT_EQ(url_without_password("postgres://h/db?password=b&sslpassword=c"), "postgres://h/db");
  EXPECT_EQ(dlock::util::without_url_secrets("bad token \"s%40cret\" and s@cret",
                                             "postgres://h/db?password=s%40cret"),
            "bad token \"***\" and ***");
}

TEST(ScrubUrlPasswords, HidesPasswordsInTheUrlArgumentsOnly)
{
  std::string long_url = "redis://u:hunter2@h";
  std::string short_url = "--url=redis://:pw@h";
  std::string attached = "-uunix://u:s3cret@/r.sock";
  std::string command_url = "redis://u:theirs@h";
  std::vector<char*> argv{
    const_cast<char*>("dlock"), const_cast<char*>("-u"), long_url.data(),
    short_url.data(),           attached.data(),         const_cast<char*>("--"),
    command_url.data()};
  EXPECT_TRUE(dlock::cli::scrub_url_passwords(static_cast<int>(argv.size()), argv.data()));
  EXPECT_STREQ(long_url.c_str(), "redis://u:***@h");      // padded with NULs
  EXPECT_STREQ(short_url.c_str(), "--url=redis://:**@h"); // too short for "***"
  EXPECT_STREQ(attached.c_str(), "-uunix://u:***@/r.sock");
  EXPECT_STREQ(command_url.c_str(), "redis://u:theirs@h");
  std::string plain = "redis://h";
  std::vector<char*> no_password{const_cast<char*>("dlock"), const_cast<char*>("-u"), plain.data()};
  EXPECT_FALSE(
    dlock::cli::scrub_url_passwords(static_cast<int>(no_password.size()), no_password.data()));
}

TEST(SentinelUrl, HostsMasterAndDataSettings)
{
  using dlock::redis::parse_sentinel_url;
  auto url = parse_sentinel_url("redis-sentinel://app:s%40cret@s1:26380,s2,[::1]:5000/2#orders");
  ASSERT_EQ(url.sentinels.size(), 3u);
  EXPECT_EQ(url.sentinels[0].host, "s1");
  EXPECT_EQ(url.sentinels[0].port, 26380);
  EXPECT_EQ(url.sentinels[1].port, 26379); // Sentinel's default, not Redis's
  EXPECT_EQ(url.sentinels[2].host, "::1");
  EXPECT_EQ(url.sentinels[2].port, 5000);
  EXPECT_FALSE(url.sentinels[0].password); // the URL's credentials are the data nodes'
  EXPECT_EQ(url.master, "orders");
  EXPECT_EQ(url.data.user, "app");
  EXPECT_EQ(url.data.password, "s@cret");
  EXPECT_EQ(url.data.db, 2);
  EXPECT_FALSE(url.data.tls);
  EXPECT_EQ(url.redacted(), "redis-sentinel://app:***@s1:26380,s2:26379,[::1]:5000/2#orders");
}

TEST(SentinelUrl, TlsSchemeAppliesToSentinelsAndDataNodes)
{
  auto url = dlock::redis::parse_sentinel_url("rediss-sentinel://h#m");
  EXPECT_TRUE(url.sentinels[0].tls);
  EXPECT_TRUE(url.data.tls);
  EXPECT_TRUE(dlock::redis::is_sentinel_url("rediss-sentinel://h#m"));
  EXPECT_FALSE(dlock::redis::is_sentinel_url("redis://h"));
}

TEST(SentinelUrl, RefusesMalformedOnesWithUsage)
{
  for (const char* bad : {"redis-sentinel://h", "redis-sentinel://h#", "redis-sentinel://#m",
                          "redis-sentinel://h,,h2#m", "redis-sentinel://h:0#m",
                          "redis-sentinel://h/x#m", "redis-sentinel://:pw@h:99999#m"}) {
    try {
      dlock::redis::parse_sentinel_url(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ExitCode::usage) << bad;
      EXPECT_EQ(std::string(error.what()).find(":pw@"), std::string::npos) << error.what();
    }
  }
}

TEST(Url, PercentDecodingTakesEitherCaseUnlessANameWantsUpperCaseOnly)
{
  using dlock::util::HexDigits;
  using dlock::util::percent_decode;
  EXPECT_EQ(percent_decode("a%2Fb%2fc"), "a/b/c");
  EXPECT_EQ(percent_decode("a%2Fb", HexDigits::upper_case), "a/b");
  EXPECT_FALSE(percent_decode("a%2fb", HexDigits::upper_case)) << "one name, one spelling";
  EXPECT_FALSE(percent_decode("a%2"));
  EXPECT_FALSE(percent_decode("a%G0"));
  EXPECT_EQ(dlock::util::hex_value('f'), 15);
  EXPECT_EQ(dlock::util::hex_value('G'), -1);
}

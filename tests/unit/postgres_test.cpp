// The pure parts of the PostgreSQL store: SHA-256, the advisory key of a name, the holder read
// back from a session's application_name, the TTL the server's settings allow, and which
// errors of a table's creation mean another session made it.
#include "stores/postgres/advisory.hpp"
#include "stores/postgres/fence_table.hpp"
#include "stores/postgres/postgres_store.hpp"
#include "stores/postgres/session_lifetime.hpp"
#include "util/error.hpp"
#include "util/sha256.hpp"

#include <gtest/gtest.h>

using namespace dlock;
using namespace std::chrono_literals;

TEST(Sha256, KnownDigests)
{
  EXPECT_EQ(util::sha256_hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(util::sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the length no longer fits the first padding block
  EXPECT_EQ(util::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(util::sha256_hex(std::string(1000, 'a')),
            "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
}

TEST(AdvisoryKey, FirstEightBytesBigEndianAndItsHalves)
{
  // sha256("abc") starts ba7816bf 8f01cfea
  postgres::AdvisoryKey key = postgres::AdvisoryKey::of("abc");
  EXPECT_EQ(std::uint64_t(key.key), 0xba7816bf8f01cfeaULL);
  EXPECT_LT(key.key, 0); // a signed bigint, as pg_advisory_lock takes it
  EXPECT_EQ(key.classid(), 0xba7816bfU);
  EXPECT_EQ(key.objid(), 0x8f01cfeaU);
}

TEST(FenceTable, ACreationRaceIsNoFailure)
{
  // two sessions' CREATE TABLE IF NOT EXISTS at once: the loser sees one of these, as the
  // table's catalog index, the relation or its row type (seen in CI: "type ... already exists")
  EXPECT_TRUE(postgres::made_meanwhile("23505"));
  EXPECT_TRUE(postgres::made_meanwhile("42P07"));
  EXPECT_TRUE(postgres::made_meanwhile("42710"));
  EXPECT_FALSE(postgres::made_meanwhile("42501")); // no CREATE right: a refusal
  EXPECT_FALSE(postgres::made_meanwhile(""));
}

TEST(ApplicationName, CarriesTheFingerprintAndGivesTheHolderBack)
{
  lock::HolderInfo me;
  me.user = "deploy";
  me.host = "web-1";
  me.pid = 4242;
  std::string name = postgres::application_name("secret-token", me);
  EXPECT_EQ(name, "dlock " + postgres::token_fingerprint("secret-token") + " deploy@web-1:4242");
  EXPECT_EQ(name.find("secret-token"), std::string::npos);
  lock::HolderInfo back = postgres::holder_of_session(name, "postgres", "10.0.0.5", 777);
  EXPECT_EQ(back.user, "deploy");
  EXPECT_EQ(back.host, "web-1");
  EXPECT_EQ(back.pid, 4242);
  EXPECT_EQ(back.command, "PostgreSQL session pid 777 from 10.0.0.5");
}

TEST(ApplicationName, LongHostsAreCutToFitAndKeepThePid)
{
  lock::HolderInfo me;
  me.user = "u";
  me.host = std::string(80, 'h');
  me.pid = 31337;
  std::string name = postgres::application_name("t", me);
  EXPECT_EQ(name.size(), 63u);
  EXPECT_TRUE(name.ends_with("~:31337"));
  EXPECT_EQ(postgres::holder_of_session(name, "", "", 1).pid, 31337);
}

TEST(ApplicationName, OtherSessionsAreShownByAddressRoleAndBackend)
{
  lock::HolderInfo psql = postgres::holder_of_session("psql", "alice", "", 99);
  EXPECT_EQ(psql.user, "alice");
  EXPECT_EQ(psql.host, "local");
  EXPECT_EQ(psql.pid, 99);
  EXPECT_EQ(psql.command, "PostgreSQL session pid 99 from the local socket (psql)");
}

TEST(SessionLifetime, TheSoonestSettingBoundsTheTtl)
{
  postgres::SessionSettings settings; // all 0: Linux keepalive defaults, 2h 11m 15s
  auto limit = postgres::session_limit(settings);
  ASSERT_TRUE(limit);
  EXPECT_EQ(limit->after, util::Millis((7200 + 75 * 9) * 1000));
  settings.keepalives_idle_s = 60;
  settings.keepalives_interval_s = 10;
  settings.keepalives_count = 3;
  EXPECT_EQ(postgres::session_limit(settings)->after, 90s);
  settings.tcp_user_timeout = 45s;
  EXPECT_EQ(postgres::session_limit(settings)->after, 45s);
  settings.idle_session_timeout = 20s;
  EXPECT_EQ(postgres::session_limit(settings)->setting, "idle_session_timeout 20s");
  EXPECT_NO_THROW(postgres::check_ttl(20s, settings));
  try {
    postgres::check_ttl(21s, settings);
    FAIL() << "a TTL past idle_session_timeout was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::usage);
    EXPECT_NE(std::string(error.what()).find("idle_session_timeout 20s"), std::string::npos);
  }
}

TEST(SessionLifetime, SettingsAreReadAsCurrentSettingShowsThem)
{
  // with the unit the server adds, or none: the unit pg_settings reports it in
  EXPECT_EQ(postgres::shown_setting("0", false), 0);
  EXPECT_EQ(postgres::shown_setting("1500ms", false), 1'500);
  EXPECT_EQ(postgres::shown_setting("90s", false), 90'000);
  EXPECT_EQ(postgres::shown_setting("2min", false), 120'000);
  EXPECT_EQ(postgres::shown_setting("1h", true), 3'600);
  EXPECT_EQ(postgres::shown_setting("1d", false), 86'400'000);
  EXPECT_EQ(postgres::shown_setting("7200", true), 7'200); // a keepalive's own display
  EXPECT_THROW(postgres::shown_setting("5kB", false), Error);
  EXPECT_THROW(postgres::shown_setting("", false), Error);
  EXPECT_THROW(postgres::shown_setting("99999999999999999h", false), Error);
  postgres::SessionSettings settings;
  settings.take_shown("idle_session_timeout", "20s");
  settings.take_shown("tcp_keepalives_idle", "10");
  settings.take_shown("tcp_keepalives_count", "3");
  EXPECT_EQ(settings.idle_session_timeout, 20s);
  EXPECT_EQ(settings.keepalives_idle_s, 10);
  EXPECT_EQ(settings.keepalives_count, 3);
}

TEST(SessionLifetime, AUnixSocketHasNoKeepalives)
{
  postgres::SessionSettings settings;
  settings.over_tcp = false;
  EXPECT_FALSE(postgres::session_limit(settings));
  settings.tcp_user_timeout = 1s; // reported, but not for a unix socket
  EXPECT_FALSE(postgres::session_limit(settings));
}

TEST(SessionLifetime, SettingsAreTakenByTheirPgSettingsNames)
{
  postgres::SessionSettings settings;
  settings.take("idle_session_timeout", 20'000); // ms
  settings.take("tcp_user_timeout", 5'000);      // ms
  settings.take("tcp_keepalives_idle", 10);      // s
  settings.take("tcp_keepalives_interval", 2);
  settings.take("tcp_keepalives_count", 3);
  settings.take("work_mem", 4096); // not read
  EXPECT_EQ(settings.idle_session_timeout, 20s);
  EXPECT_EQ(settings.tcp_user_timeout, 5s);
  EXPECT_EQ(settings.keepalives_idle_s, 10);
  EXPECT_EQ(settings.keepalives_interval_s, 2);
  EXPECT_EQ(settings.keepalives_count, 3);
}

TEST(PostgresUrl, AMistypedPortIsAUsageErrorBeforeAnyConnection)
{
  stores::StoreConfig config;
  EXPECT_EQ(postgres::connect_params("postgres://u@db.example:5433/app", config).shown,
            "postgres://u@db.example:5433/app");
  EXPECT_NO_THROW(postgres::connect_params("postgres://u@a:5433,b:5434/app", config));
  for (const char* url : {"postgres://u@127.0.0.1:notaport/app", "postgres://u@h:0/app",
                          "postgres://u@h:65536/app", "postgres://u@a:5433,b:x/app"}) {
    try {
      postgres::connect_params(url, config);
      ADD_FAILURE() << url << " was taken";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ExitCode::usage) << url;
    }
  }
}

TEST(PostgresUrl, TlsFilesWithoutSslmodeMeanVerifyFull)
{
  auto sslmode = [](const postgres::ConnectParams& params) {
    std::string mode = "(none)";
    for (const auto& [keyword, value] : params.values) {
      if (keyword == "sslmode") {
        mode = value;
      }
    }
    return mode;
  };
  ::unsetenv("PGSSLMODE");
  stores::StoreConfig config;
  EXPECT_EQ(sslmode(postgres::connect_params("postgres://u@h/app", config)), "(none)");
  config.tls.ca_file = "/etc/ca.pem";
  EXPECT_EQ(sslmode(postgres::connect_params("postgres://u@h/app", config)), "verify-full");
  // the URL's own sslmode is the user's choice, and so is PGSSLMODE
  EXPECT_EQ(sslmode(postgres::connect_params("postgres://u@h/app?sslmode=require", config)),
            "(none)");
  ::setenv("PGSSLMODE", "verify-ca", 1);
  EXPECT_EQ(sslmode(postgres::connect_params("postgres://u@h/app", config)), "(none)");
  ::unsetenv("PGSSLMODE");
  config.tls.ca_file.clear();
  config.tls.cert_file = "/etc/client.pem";
  EXPECT_EQ(sslmode(postgres::connect_params("postgres://u@h/app", config)), "verify-full");
}

TEST(PostgresUrl, AMalformedPasswordIsNotQuotedInTheError)
{
  stores::StoreConfig config;
  try {
    postgres::connect_params("postgres://u@h/app?password=hun%zzter", config);
    ADD_FAILURE() << "a malformed escape was taken";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::usage);
    EXPECT_EQ(std::string(error.what()).find("hun"), std::string::npos) << error.what();
  }
}

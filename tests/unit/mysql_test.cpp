// The pure parts of the MySQL store: its URLs, the GET_LOCK name of a lock name, the holder
// shown for a session, the TTL the server's settings allow, and the leader gate's decision.
#include "stores/mysql/gates.hpp"
#include "stores/mysql/names.hpp"
#include "stores/mysql/session_lifetime.hpp"
#include "stores/mysql/url.hpp"
#include "util/error.hpp"
#include "util/sha256.hpp"

#include <gtest/gtest.h>

using namespace dlock;
using namespace std::chrono_literals;

namespace {

mysql::ConnectParams parse(const std::string& url, std::optional<std::string> password = {})
{
  stores::StoreConfig config;
  config.urls = {url};
  config.password = std::move(password);
  return mysql::connect_params(url, config);
}

ExitCode code_of(const std::string& url)
{
  try {
    parse(url);
  } catch (const Error& error) {
    return error.code();
  }
  return ExitCode::ok;
}

} // namespace

TEST(MysqlUrl, UserPasswordHostPortDatabase)
{
  mysql::ConnectParams p = parse("mysql://deploy:s%40cret@db.internal:3307/ops");
  EXPECT_EQ(p.user, "deploy");
  EXPECT_EQ(p.password, "s@cret");
  EXPECT_EQ(p.host, "db.internal");
  EXPECT_EQ(p.port, 3307u);
  EXPECT_EQ(p.database, "ops");
  EXPECT_EQ(p.shown, "mysql://deploy@db.internal:3307/ops");
  EXPECT_EQ(p.shown.find("cret"), std::string::npos);
}

TEST(MysqlUrl, MariadbSchemeIpv6AndDefaults)
{
  EXPECT_TRUE(mysql::is_mysql_url("mariadb://h/db"));
  EXPECT_FALSE(mysql::is_mysql_url("postgres://h/db"));
  mysql::ConnectParams p = parse("mariadb://[::1]/db");
  EXPECT_EQ(p.host, "::1");
  EXPECT_EQ(p.port, 0u);
  EXPECT_TRUE(p.user.empty());
  EXPECT_FALSE(p.password);
  EXPECT_EQ(p.shown, "mariadb://[::1]/db");
}

TEST(MysqlUrl, PasswordFileWinsOverTheUrl)
{
  EXPECT_EQ(parse("mysql://u:inurl@h/db", std::string("fromfile")).password, "fromfile");
  EXPECT_EQ(parse("mysql://u@h/db", std::string("fromfile")).password, "fromfile");
}

TEST(MysqlUrl, UnixSocket)
{
  mysql::ConnectParams p =
    parse("mysql://app@localhost/locks?socket=%2Frun%2Fmysqld%2Fmysqld.sock");
  EXPECT_EQ(p.host, "localhost");
  EXPECT_EQ(p.socket, "/run/mysqld/mysqld.sock");
  EXPECT_EQ(parse("mysql:///locks?socket=/tmp/s").host, "localhost");
}

TEST(MysqlUrl, BadOnesAreUsageErrors)
{
  EXPECT_EQ(code_of("mysql://h"), ExitCode::usage); // no database
  EXPECT_EQ(code_of("mysql://h/"), ExitCode::usage);
  EXPECT_EQ(code_of("mysql://h:0/db"), ExitCode::usage);
  EXPECT_EQ(code_of("mysql://h:99999/db"), ExitCode::usage);
  EXPECT_EQ(code_of("mysql://h:x/db"), ExitCode::usage);
  EXPECT_EQ(code_of("mysql://h:/db"), ExitCode::usage);
  EXPECT_EQ(code_of("mysql:///db"), ExitCode::usage);            // no host, no socket
  EXPECT_EQ(code_of("mysql://h/db?sslmode=x"), ExitCode::usage); // unknown parameter
  EXPECT_EQ(code_of("mysql://h/db?socket=/s"), ExitCode::usage); // a socket on another host
  EXPECT_EQ(code_of("mysql://u:%zz@h/db"), ExitCode::usage);
  EXPECT_EQ(code_of("mysql://[::1/db"), ExitCode::usage);
  EXPECT_EQ(code_of("mysql://h/a/b"), ExitCode::usage);
  EXPECT_EQ(code_of("mysql://h/db"), ExitCode::ok);
  try {
    parse("mysql://u:hunter2@h:bad/db");
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(std::string(error.what()).find("hunter2"), std::string::npos) << error.what();
  }
}

TEST(MysqlNames, ShortLowerCaseAsciiNamesAreKept)
{
  EXPECT_EQ(mysql::server_lock_name("dlock:nightly-backup"), "dlock:nightly-backup");
  std::string sixty_four = "dlock:" + std::string(58, 'a');
  EXPECT_EQ(mysql::server_lock_name(sixty_four), sixty_four);
}

TEST(MysqlNames, LongUpperCaseOrNonAsciiNamesAreHashed)
{
  std::string long_name = "dlock:" + std::string(59, 'a');
  std::string hashed = mysql::server_lock_name(long_name);
  EXPECT_EQ(hashed, long_name.substr(0, 31) + "~" + util::sha256_hex(long_name).substr(0, 32));
  EXPECT_EQ(hashed.size(), 64u);
  // MySQL compares names without case: names that differ only in case must differ here
  EXPECT_NE(mysql::server_lock_name("dlock:Deploy"), mysql::server_lock_name("dlock:deploy"));
  EXPECT_EQ(mysql::server_lock_name("dlock:Deploy"),
            "dlock:Deploy~" + util::sha256_hex("dlock:Deploy").substr(0, 32));
  std::string utf8 = mysql::server_lock_name("dlock:caf\xc3\xa9");
  EXPECT_EQ(utf8, "dlock:caf~" + util::sha256_hex("dlock:caf\xc3\xa9").substr(0, 32));
  EXPECT_LE(mysql::server_lock_name(std::string(1024, 'x')).size(), 64u);
}

TEST(MysqlNames, TheTokenLockShowsNoToken)
{
  std::string name = mysql::token_lock_name("secret-token");
  EXPECT_EQ(name, "dlock token " + util::sha256_hex("secret-token").substr(0, 48));
  EXPECT_EQ(name.find("secret"), std::string::npos);
  EXPECT_LE(name.size(), 64u);
}

TEST(MysqlNames, BytesAreHexLiterals)
{
  EXPECT_EQ(mysql::sql_bytes(""), "''");
  EXPECT_EQ(mysql::sql_bytes("a'b"), "X'612762'");
}

TEST(MysqlHolder, WrittenHolderOrTheConnection)
{
  mysql::SessionRow row;
  row.connection = 42;
  row.user = "app";
  row.client_host = "10.0.0.5:51234";
  lock::HolderInfo other = mysql::holder_of_session(row);
  EXPECT_TRUE(other.user.empty() && other.host.empty()); // not dlock: nobody it can name
  EXPECT_EQ(other.pid, 0);
  EXPECT_EQ(other.command, "MySQL connection 42 of app from 10.0.0.5:51234");
  EXPECT_EQ(other.describe(), other.command);
  row.user.clear();
  row.client_host.clear(); // PROCESSLIST shows only the user's own sessions
  EXPECT_EQ(mysql::holder_of_session(row).command,
            "MySQL connection 42 from a client this user cannot see (PROCESSLIST needs PROCESS)");
  lock::HolderInfo written;
  written.user = "deploy";
  written.host = "web-1";
  written.pid = 4242;
  written.command = "make deploy";
  row.written = written;
  lock::HolderInfo dlock = mysql::holder_of_session(row);
  EXPECT_EQ(dlock.pid, 4242);
  EXPECT_EQ(dlock.command, "make deploy");
}

TEST(MysqlLeaderGate, TheTermIsTheFenceOfItsWriterElseTheSession)
{
  using Look = mysql::MysqlGates::LeaderLook;
  Look free;
  EXPECT_EQ(mysql::MysqlGates::leader_term(free), 0);
  free.fence_read = true;
  free.fence_connection = 7;
  free.fence = 3; // the last holder's row stays
  EXPECT_EQ(mysql::MysqlGates::leader_term(free), 0);
  Look held{.connection = 7, .fence_read = true, .fence_connection = 7, .fence = 3, .holder = {}};
  EXPECT_EQ(mysql::MysqlGates::leader_term(held), 3);
  Look other = held; // another client's GET_LOCK: the row is an earlier holder's
  other.connection = 9;
  EXPECT_GT(mysql::MysqlGates::leader_term(other), std::int64_t(1) << 62);
  Look other_too = other;
  other_too.connection = 10;
  EXPECT_NE(mysql::MysqlGates::leader_term(other_too), mysql::MysqlGates::leader_term(other));
  Look junk = held; // a fence another tenant wrote wrong
  junk.fence = 0;
  EXPECT_GT(mysql::MysqlGates::leader_term(junk), std::int64_t(1) << 62);
}

TEST(MysqlLeaderGate, AHolderWithoutItsFencingRowIsWaitedForOnlyWhereThereIsATable)
{
  using Look = mysql::MysqlGates::LeaderLook;
  EXPECT_FALSE(mysql::MysqlGates::unwritten(Look{})); // free
  Look taking{.connection = 8, .fence_read = true, .fence_connection = 7, .fence = 3, .holder = {}};
  EXPECT_TRUE(mysql::MysqlGates::unwritten(taking)); // the row is still the last holder's
  Look taken = taking;
  taken.fence_connection = 8;
  taken.fence = 4;
  EXPECT_FALSE(mysql::MysqlGates::unwritten(taken));
  EXPECT_EQ(mysql::MysqlGates::leader_term(taken), 4);
  Look bare{.connection = 8, .fence_read = false, .fence_connection = 0, .fence = 0, .holder = {}};
  EXPECT_FALSE(mysql::MysqlGates::unwritten(bare)); // no dlock_fence: nothing to wait for
  EXPECT_EQ(mysql::MysqlGates::leader_term(bare), mysql::MysqlGates::leader_term(taking));
}

TEST(MysqlSessionLifetime, WaitTimeoutAndKeepalivesBoundTheTtl)
{
  mysql::SessionSettings settings; // keepalives at 0: Linux's defaults, 2h 11m 15s
  settings.wait_timeout = util::Millis(31'536'000'000LL);
  auto limit = mysql::session_limit(settings);
  ASSERT_TRUE(limit);
  EXPECT_EQ(limit->after, util::Millis((7200 + 75 * 9) * 1000));
  settings.keepalive_time_s = 60;
  settings.keepalive_interval_s = 10;
  settings.keepalive_probes = 3;
  EXPECT_EQ(mysql::session_limit(settings)->after, 90s);
  settings.wait_timeout = 20s;
  EXPECT_EQ(mysql::session_limit(settings)->setting, "wait_timeout 20s");
  EXPECT_NO_THROW(mysql::check_ttl(20s, settings));
  try {
    mysql::check_ttl(21s, settings);
    FAIL() << "a TTL past wait_timeout was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::usage);
    EXPECT_NE(std::string(error.what()).find("wait_timeout 20s"), std::string::npos);
  }
}

TEST(MysqlSessionLifetime, AUnixSocketHasNoKeepalives)
{
  mysql::SessionSettings settings;
  settings.over_tcp = false;
  EXPECT_FALSE(mysql::session_limit(settings));
  settings.wait_timeout = 1h;
  EXPECT_EQ(mysql::session_limit(settings)->after, 1h);
}

TEST(MysqlSessionLifetime, VariablesAreTakenByTheirNames)
{
  mysql::SessionSettings settings;
  settings.take("wait_timeout", 20); // s
  settings.take("tcp_keepalive_time", 10);
  settings.take("tcp_keepalive_interval", 2);
  settings.take("tcp_keepalive_probes", 3);
  settings.take("max_connections", 151); // not read
  EXPECT_EQ(settings.wait_timeout, 20s);
  EXPECT_EQ(settings.keepalive_time_s, 10);
  EXPECT_EQ(settings.keepalive_interval_s, 2);
  EXPECT_EQ(settings.keepalive_probes, 3);
}

TEST(MysqlUrl, TlsFilesAndNoServerName)
{
  stores::StoreConfig config;
  config.tls.ca_file = "/etc/ssl/ca.pem";
  config.tls.cert_file = "/etc/ssl/client.pem";
  config.tls.key_file = "/etc/ssl/client.key";
  mysql::ConnectParams p = mysql::connect_params("mysql://h/db", config);
  EXPECT_EQ(p.tls_ca, "/etc/ssl/ca.pem");
  EXPECT_EQ(p.tls_cert, "/etc/ssl/client.pem");
  EXPECT_EQ(p.tls_key, "/etc/ssl/client.key");
  config.tls.server_name = "db.internal";
  EXPECT_THROW(mysql::connect_params("mysql://h/db", config), Error);
}

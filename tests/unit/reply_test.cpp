#include "stores/redis/reply.hpp"

#include "lock/holder.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using dlock::ExitCode;
using dlock::redis::asks_for_password;
using dlock::redis::classify_error;

TEST(ReplyErrors, AuthenticationAndPermission)
{
  EXPECT_EQ(classify_error("WRONGPASS invalid username-password pair or user is disabled."),
            ExitCode::auth);
  EXPECT_EQ(classify_error("NOAUTH Authentication required."), ExitCode::auth);
  EXPECT_EQ(classify_error("NOPERM User u has no permissions to run the 'evalsha' command"),
            ExitCode::auth);
  EXPECT_EQ(
    classify_error(
      "ERR Error running script (call to f_x): @user_script:2: NOPERM this user has no permissions to access one of the keys"),
    ExitCode::auth);
  EXPECT_EQ(classify_error("ERR Protocol error: unauthenticated multibulk length"), ExitCode::auth);
  EXPECT_EQ(
    classify_error(
      "ERR Error running script (call to f_1): @user_script:9: @user_script: 9: The user executing the script can't run this command or subcommand"),
    ExitCode::auth);
  EXPECT_EQ(
    classify_error(
      "ERR ACL failure in script: User nocmd has no permissions to run the 'hset' command script: dce70e, on @user_script:16."),
    ExitCode::auth);
  EXPECT_EQ(
    classify_error(
      "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"),
    ExitCode::auth);
}

TEST(ReplyErrors, UnavailableIsRetryable)
{
  EXPECT_EQ(classify_error("LOADING Redis is loading the dataset in memory"),
            ExitCode::unavailable);
  EXPECT_EQ(classify_error("READONLY You can't write against a read only replica."),
            ExitCode::unavailable);
  EXPECT_EQ(classify_error("MASTERDOWN Link with MASTER is down"), ExitCode::unavailable);
  EXPECT_EQ(classify_error("BUSY Redis is busy running a script."), ExitCode::unavailable);
}

// The texts Redis 7.0.15 and Valkey 8.0.1 send (the end-to-end tests provoke each of them).
// The wrapped "-OOM" is how Redis 6.2's scripting.c words it (luaPushError with shared.oomerr,
// inside "Error running script"): assumed from its source, not seen here.
TEST(ReplyErrors, UnavailableInTheServersOwnWords)
{
  EXPECT_EQ(classify_error("OOM command not allowed when used memory > 'maxmemory'."),
            ExitCode::unavailable);
  EXPECT_EQ(classify_error("OOM command not allowed when used memory > 'maxmemory'. script: "
                           "7837034b75a4264093007c2721a1fc3e53a0cde4, on @user_script:21."),
            ExitCode::unavailable);
  EXPECT_EQ(
    classify_error("ERR Error running script (call to f_7837034b75a4264093007c2721a1fc3e53a0cde4): "
                   "@user_script:21: @user_script: 21: -OOM command not allowed when used "
                   "memory > 'maxmemory'. "),
    ExitCode::unavailable);
  EXPECT_EQ(classify_error(
              "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."),
            ExitCode::unavailable);
  EXPECT_EQ(classify_error("CLUSTERDOWN Hash slot not served"), ExitCode::unavailable);
  EXPECT_EQ(classify_error("CLUSTERDOWN The cluster is down"), ExitCode::unavailable);
  EXPECT_EQ(classify_error("LOADING Redis is loading the dataset in memory"),
            ExitCode::unavailable);
  EXPECT_EQ(classify_error("LOADING Valkey is loading the dataset in memory"),
            ExitCode::unavailable);
  EXPECT_EQ(classify_error("READONLY You can't write against a read only replica. script: "
                           "7837034b75a4264093007c2721a1fc3e53a0cde4, on @user_script:21."),
            ExitCode::unavailable);
}

TEST(ReplyErrors, NoPasswordSent)
{
  EXPECT_TRUE(asks_for_password("NOAUTH Authentication required."));
  EXPECT_TRUE(asks_for_password("ERR Protocol error: unauthenticated multibulk length"));
  EXPECT_TRUE(asks_for_password("ERR Protocol error: unauthenticated bulk length"));
  EXPECT_FALSE(asks_for_password("WRONGPASS invalid username-password pair or user is disabled."));
  EXPECT_FALSE(asks_for_password("NOPERM User u has no permissions to run the 'evalsha' command"));
  EXPECT_EQ(classify_error("NOAUTH Authentication required."), ExitCode::auth);
}

TEST(ReplyErrors, OthersAreInternal)
{
  EXPECT_EQ(classify_error("ERR unknown command 'EVALSHA'"), ExitCode::internal);
  EXPECT_EQ(classify_error("WRONGTYPE Operation against a key holding the wrong kind of value"),
            ExitCode::internal);
  // A code must be a word of its own.
  EXPECT_EQ(classify_error("BUSYKEY Target key name already exists."), ExitCode::internal);
  EXPECT_EQ(classify_error("ERR unknown command 'OOMS', with args beginning with: "),
            ExitCode::internal);
  EXPECT_EQ(classify_error("ERR DB index is out of range"), ExitCode::internal);
}

namespace {

// A flat {field, value, ...} array reply, as the scripts answer a holder record.
struct HashReply {
  explicit HashReply(std::vector<std::string> texts) : strings(std::move(texts))
  {
    for (std::string& text : strings) {
      redisReply item{};
      item.type = REDIS_REPLY_STRING;
      item.str = text.data();
      item.len = text.size();
      items.push_back(item);
    }
    for (redisReply& item : items) {
      pointers.push_back(&item);
    }
    array.type = REDIS_REPLY_ARRAY;
    array.elements = pointers.size();
    array.element = pointers.data();
  }
  std::vector<std::string> strings;
  std::vector<redisReply> items;
  std::vector<redisReply*> pointers;
  redisReply array{};
};

} // namespace

// dlock elect's --value is read back from the holder record, bounded like the other fields.
TEST(HolderHash, TheValueIsReadBackAndAnOversizedOneIsNotDlocks)
{
  HashReply held({"host", "h", "pid", "42", "user", "u", "command", "sleep", "value",
                  "10.0.0.7:8080", "fence", "17"});
  dlock::lock::HolderInfo holder = dlock::redis::holder_from_hash(held.array);
  EXPECT_EQ(holder.value, "10.0.0.7:8080");
  EXPECT_EQ(holder.fence, 17);
  EXPECT_EQ(holder.pid, 42);

  HashReply plain({"host", "h", "pid", "42", "user", "u", "command", "sleep"});
  EXPECT_EQ(dlock::redis::holder_from_hash(plain.array).value, "");

  HashReply oversized(
    {"host", "h", "pid", "42", "value", std::string(dlock::lock::max_holder_field_bytes + 1, 'x')});
  dlock::lock::HolderInfo junk = dlock::redis::holder_from_hash(oversized.array);
  EXPECT_EQ(junk.command, dlock::lock::HolderInfo::not_dlock().command);
  EXPECT_EQ(junk.value, "");
}

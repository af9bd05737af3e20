#include "redis/reply.hpp"

#include <gtest/gtest.h>

using dlock::ExitCode;
using dlock::redis::classify_error;

TEST(ReplyErrors, AuthenticationAndPermission)
{
  EXPECT_EQ(classify_error("WRONGPASS invalid username-password pair or user is disabled."), ExitCode::auth);
  EXPECT_EQ(classify_error("NOAUTH Authentication required."), ExitCode::auth);
  EXPECT_EQ(classify_error("NOPERM User u has no permissions to run the 'evalsha' command"), ExitCode::auth);
  EXPECT_EQ(classify_error("ERR Error running script (call to f_x): @user_script:2: NOPERM this user has no permissions to access one of the keys"), ExitCode::auth);
  EXPECT_EQ(classify_error("ERR Protocol error: unauthenticated multibulk length"), ExitCode::auth);
  EXPECT_EQ(classify_error("ERR Error running script (call to f_1): @user_script:9: @user_script: 9: The user executing the script can't run this command or subcommand"), ExitCode::auth);
  EXPECT_EQ(classify_error("ERR ACL failure in script: User nocmd has no permissions to run the 'hset' command script: dce70e, on @user_script:16."), ExitCode::auth);
  EXPECT_EQ(classify_error("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"), ExitCode::auth);
}

TEST(ReplyErrors, UnavailableIsRetryable)
{
  EXPECT_EQ(classify_error("LOADING Redis is loading the dataset in memory"), ExitCode::unavailable);
  EXPECT_EQ(classify_error("READONLY You can't write against a read only replica."), ExitCode::unavailable);
  EXPECT_EQ(classify_error("MASTERDOWN Link with MASTER is down"), ExitCode::unavailable);
  EXPECT_EQ(classify_error("BUSY Redis is busy running a script."), ExitCode::unavailable);
}

TEST(ReplyErrors, OthersAreInternal)
{
  EXPECT_EQ(classify_error("ERR unknown command 'EVALSHA'"), ExitCode::internal);
  EXPECT_EQ(classify_error("WRONGTYPE Operation against a key holding the wrong kind of value"), ExitCode::internal);
}

#include "lock/name.hpp"
#include "stores/redis/keys.hpp"
#include "util/error.hpp"

#include <gtest/gtest.h>

using dlock::Error;
using dlock::ExitCode;
using dlock::redis::LockKeys;
using dlock::lock::LockName;

TEST(Keys, SiblingsShareTheHashTag)
{
  LockKeys keys = LockKeys::make("dlock:", "nightly");
  EXPECT_EQ(keys.lock, "dlock:{nightly}");
  EXPECT_EQ(keys.fence, "dlock:{nightly}:fence");
  EXPECT_EQ(keys.holder, "dlock:{nightly}:holder");
  EXPECT_EQ(LockKeys::make("app:", "x").lock, "app:{x}");
}

TEST(LockName, ValidNames)
{
  EXPECT_NO_THROW(LockName::parse("a"));
  EXPECT_NO_THROW(LockName::parse(std::string(1024, 'k')));
  EXPECT_NO_THROW(LockName::parse("ci/deploy prod:eu-1 ünïcode"));
}

TEST(LockName, InvalidNamesAreUsageErrors)
{
  for (const std::string& bad : {std::string(), std::string(1025, 'k'), std::string("a\nb"),
                                 std::string("tab\there"), std::string("nul\0x", 5),
                                 std::string("del\x7f")}) {
    try {
      LockName::parse(bad);
      ADD_FAILURE() << "accepted a bad name of size " << bad.size();
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ExitCode::usage);
    }
  }
}

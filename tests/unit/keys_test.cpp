#include "lock/kind.hpp"
#include "lock/name.hpp"
#include "stores/redis/keys.hpp"
#include "util/error.hpp"

#include <gtest/gtest.h>

using dlock::Error;
using dlock::ExitCode;
using dlock::lock::LockName;
using dlock::redis::LockKeys;

TEST(Keys, SiblingsShareTheHashTag)
{
  LockKeys keys = LockKeys::make("dlock:", "nightly");
  EXPECT_EQ(keys.lock, "dlock:{nightly}");
  EXPECT_EQ(keys.fence, "dlock:{nightly}:fence");
  EXPECT_EQ(keys.holder, "dlock:{nightly}:holder");
  EXPECT_EQ(LockKeys::make("app:", "x").lock, "app:{x}");
  EXPECT_EQ(keys.holders, "dlock:{nightly}:holders");
  EXPECT_EQ(keys.slots, "dlock:{nightly}:slots");
  EXPECT_EQ(keys.kind, "dlock:{nightly}:kind");
  EXPECT_EQ(keys.writers, "dlock:{nightly}:writers");
  EXPECT_EQ(keys.leader_watchers, "dlock:{nightly}:leader:watchers");
  EXPECT_EQ(keys.leader_wake, "dlock:{nightly}:leader:wake");
}

TEST(LockName, CanonicalOrderIsBytewiseWithoutDuplicates)
{
  auto names = [](std::initializer_list<const char*> texts) {
    std::vector<LockName> out;
    for (const char* text : texts) {
      out.push_back(LockName::parse(text));
    }
    return out;
  };
  EXPECT_EQ(dlock::lock::canonical_order(names({"b", "a", "b", "B", "\xc3\xa9", "a"})),
            names({"B", "a", "b", "\xc3\xa9"}));
  EXPECT_EQ(dlock::lock::canonical_order(names({"a", "b"})),
            dlock::lock::canonical_order(names({"b", "a"})));
  EXPECT_EQ(dlock::lock::join_names(names({"x", "y z"})), "x y z");
}

TEST(LockKind, CodesRoundTripAndOddCodesAreRejected)
{
  using dlock::lock::LockKind;
  for (const LockKind& kind : {LockKind::exclusive(), LockKind::shared(), LockKind::semaphore(3)}) {
    EXPECT_EQ(LockKind::from_code(kind.code()), kind) << kind.code();
  }
  EXPECT_EQ(LockKind::semaphore(1), LockKind::exclusive()) << "--limit 1 is the exclusive lock";
  EXPECT_EQ(LockKind::semaphore(3).code(), "limit:3");
  for (const char* odd : {"", "limit:", "limit:1", "limit:x", "limit:3x", "read"}) {
    EXPECT_EQ(LockKind::from_code(odd), std::nullopt) << odd;
  }
  EXPECT_FALSE(LockKind::exclusive().has_slots());
  EXPECT_TRUE(LockKind::shared().has_slots());
}

TEST(LockName, ValidNames)
{
  EXPECT_NO_THROW(LockName::parse("a"));
  EXPECT_NO_THROW(LockName::parse(std::string(1024, 'k')));
  EXPECT_NO_THROW(LockName::parse("ci/deploy prod:eu-1 ünïcode"));
}

TEST(LockName, InvalidNamesAreUsageErrors)
{
  for (const std::string& bad :
       {std::string(), std::string(1025, 'k'), std::string("a\nb"), std::string("tab\there"),
        std::string("nul\0x", 5), std::string("del\x7f")}) {
    try {
      LockName::parse(bad);
      ADD_FAILURE() << "accepted a bad name of size " << bad.size();
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ExitCode::usage);
    }
  }
}

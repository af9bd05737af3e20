// The one feature table (lock/features.cpp) against what says the same elsewhere: the refusal
// texts, the man page's "Features by store" tables and the tests' STORE_FEATURES lists.
#include "feature_table.hpp"
#include "lock/features.hpp"
#include "lock/store.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using dlock::lock::Feature;
using dlock::lock::FeatureSet;
using dlock::lock::StoreKind;

namespace {

const Feature every_feature[] = {Feature::fair,       Feature::shared,    Feature::limit,
                                 Feature::coordinate, Feature::detached,  Feature::keep,
                                 Feature::replicas,   Feature::min_hold,  Feature::lock_delay,
                                 Feature::replace,    Feature::supersede, Feature::history};

// A store that has nothing beyond one exclusive lock, named "X".
class BareStore : public dlock::lock::Store {
public:
  void start_acquire(const dlock::lock::LockName&, const dlock::lock::AcquireRequest&) override {}
  void start_wait_for_wake(const dlock::lock::LockName&, const dlock::lock::WaitTicket&,
                           dlock::util::Millis) override
  {
  }
  void start_renew(const dlock::lock::LockName&, const dlock::lock::RenewRequest&) override {}
  void start_release(const dlock::lock::LockName&, const std::string&) override {}
  void start_withdraw(const dlock::lock::LockName&, const dlock::lock::WaitTicket&) override {}
  void watch(dlock::util::EventLoop&) override {}
  std::optional<dlock::lock::Outcome> next_outcome() override { return std::nullopt; }
  void abandon() noexcept override {}
  dlock::Error timed_out() noexcept override
  {
    return dlock::Error(dlock::ExitCode::unavailable, "x");
  }
  const dlock::lock::StoreTraits& traits() const noexcept override
  {
    static const dlock::lock::StoreTraits traits{.name = "X"};
    return traits;
  }
  dlock::lock::LockStatus status(const dlock::lock::LockName&, dlock::util::TimePoint) override
  {
    return {};
  }
  std::vector<dlock::lock::LockStatus> list(std::string_view, dlock::util::Millis) override
  {
    return {};
  }
};

// A store with kind's column of the table, named name.
class ColumnStore final : public BareStore {
public:
  ColumnStore(StoreKind kind, std::string name)
    : m_traits{.name = std::move(name), .features = dlock::lock::features_of(kind)}
  {
  }
  const dlock::lock::StoreTraits& traits() const noexcept override { return m_traits; }

private:
  dlock::lock::StoreTraits m_traits;
};

std::string read(const std::string& relative)
{
  std::ifstream in(std::string(DLOCK_SOURCE_DIR) + "/" + relative);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::set<Feature> in_table(StoreKind kind)
{
  std::set<Feature> has;
  FeatureSet features = dlock::lock::features_of(kind);
  for (Feature feature : every_feature) {
    if (features.has(feature)) {
      has.insert(feature);
    }
  }
  return has;
}

} // namespace

TEST(FeatureTable, RefusalsNameTheStoresThatHaveTheFeature)
{
  BareStore store;
  auto text = [&](Feature feature) {
    return std::string(dlock::lock::refusal(store, feature).what());
  };
  EXPECT_EQ(text(Feature::fair),
            "--fair: not available on X; it needs one Redis server, Sentinel or Cluster, "
            "PostgreSQL (postgres://), MySQL or MariaDB (mysql://), etcd (etcd://), files "
            "(file://) and ZooKeeper (zk://)");
  EXPECT_EQ(text(Feature::detached),
            "acquire without --keep (a lock no process keeps): not available on X; it needs one "
            "Redis server, Sentinel or Cluster (redis://, rediss://, unix://), Redlock and etcd "
            "(etcd://)");
  EXPECT_EQ(text(Feature::replicas),
            "--wait-replicas: not available on X; it needs Redis, whose WAIT counts the replicas "
            "a write reached");
  EXPECT_EQ(dlock::lock::refusal(store, Feature::fair).code(), dlock::ExitCode::usage);
  // A store of the table says why it lacks the feature.
  ColumnStore postgres(StoreKind::postgres, "PostgreSQL (postgres://)");
  EXPECT_EQ(std::string(dlock::lock::refusal(postgres, Feature::detached).what()),
            "acquire without --keep (a lock no process keeps): not available on PostgreSQL "
            "(postgres://): the lock is the database session, which ends with its process; "
            "acquire --keep keeps it in a process of its own; it needs one Redis server, "
            "Sentinel or Cluster (redis://, rediss://, unix://), Redlock and etcd (etcd://)");
  EXPECT_THROW(dlock::lock::require_coordination(store), dlock::Error);
}

TEST(FeatureTable, TheManPageAndReadmeShowTheTableGeneratedFromIt)
{
  std::string page = read("man/dlock.1");
  ASSERT_FALSE(page.empty()) << "man/dlock.1 not found under " << DLOCK_SOURCE_DIR;
  EXPECT_EQ(dlock::test::generated_block(page, true), dlock::test::man_feature_table())
    << "run build/tests/dlock_feature_table --write " << DLOCK_SOURCE_DIR;
  EXPECT_EQ(dlock::test::generated_block(read("README.md"), false),
            dlock::test::markdown_feature_table())
    << "run build/tests/dlock_feature_table --write " << DLOCK_SOURCE_DIR;
}

TEST(FeatureTable, EveryNoHasTheReasonTheStoreMakesItImpossible)
{
  for (StoreKind kind : dlock::lock::store_kinds()) {
    for (Feature feature : every_feature) {
      if (!dlock::lock::features_of(kind).has(feature)) {
        EXPECT_FALSE(dlock::lock::why_not(kind, feature).empty())
          << dlock::lock::store_label(kind) << " lacks " << dlock::lock::feature_label(feature)
          << " without a reason (lacks[] in src/lock/features.cpp)";
      }
    }
  }
}

TEST(FeatureTable, TheStoreTestsFeatureListsSayTheSame)
{
  const std::map<std::string, StoreKind> files = {
    {"redis", StoreKind::redis}, {"postgres", StoreKind::postgres},
    {"mysql", StoreKind::mysql}, {"etcd", StoreKind::etcd},
    {"file", StoreKind::file},   {"zookeeper", StoreKind::zookeeper},
  };
  int checked = 0;
  for (const auto& [store, kind] : files) {
    std::string helpers = read("tests/lib/" + store + "_helpers.bash");
    std::size_t at = helpers.find("\nSTORE_FEATURES=\"");
    if (at == std::string::npos) {
      continue; // no store.bats entry point for this store (yet)
    }
    at += 17;
    std::istringstream words(helpers.substr(at, helpers.find('"', at) - at));
    std::set<std::string> listed;
    for (std::string word; words >> word;) {
      listed.insert(word);
    }
    std::set<Feature> has;
    for (Feature feature : every_feature) {
      if (listed.contains(std::string(dlock::lock::feature_word(feature)))) {
        has.insert(feature);
      }
    }
    EXPECT_EQ(has, in_table(kind)) << "STORE_FEATURES of tests/lib/" << store << "_helpers.bash";
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

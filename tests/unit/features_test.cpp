// The one feature table (lock/features.cpp) against what says the same elsewhere: the refusal
// texts, the man page's "Features by store" tables and the tests' STORE_FEATURES lists.
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

const Feature every_feature[] = {Feature::fair,       Feature::shared,   Feature::limit,
                                 Feature::coordinate, Feature::detached, Feature::keep,
                                 Feature::replicas,   Feature::min_hold, Feature::lock_delay,
                                 Feature::replace,    Feature::supersede};

// A store that has nothing beyond one exclusive lock, named "X".
class BareStore final : public dlock::lock::Store {
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

std::string read(const std::string& relative)
{
  std::ifstream in(std::string(DLOCK_SOURCE_DIR) + "/" + relative);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The man page's table rows, by the feature they stand for.
const std::map<std::string, Feature> man_rows = {
  {"\\-\\-shared", Feature::shared},
  {"\\-\\-limit N", Feature::limit},
  {"\\-\\-fair", Feature::fair},
  {"wait/barrier/latch", Feature::coordinate},
  {"acquire           ", Feature::detached},
  {"acquire \\-\\-keep", Feature::keep},
  {"\\-\\-wait\\-replicas", Feature::replicas},
  {"\\-\\-min\\-hold", Feature::min_hold},
  {"\\-\\-lock\\-delay", Feature::lock_delay},
  {"\\-\\-replace", Feature::replace},
  {"\\-\\-supersede", Feature::supersede},
};

// What the man page's table that starts with header says: per column, the features marked
// "yes" (or "FIFO": fair by construction).
std::vector<std::set<Feature>> man_table(const std::string& page, const std::string& header,
                                         std::size_t columns)
{
  std::vector<std::set<Feature>> has(columns);
  std::size_t at = page.find(header);
  EXPECT_NE(at, std::string::npos) << header;
  std::istringstream lines(page.substr(at));
  std::string line;
  while (std::getline(lines, line) && line != ".fi") {
    for (const auto& [label, feature] : man_rows) {
      if (line.rfind(label + " ", 0) != 0) {
        continue;
      }
      std::istringstream cells(line.substr(label.size()));
      std::string cell;
      for (std::size_t i = 0; i < columns && cells >> cell; ++i) {
        if (cell == "yes" || cell == "FIFO") {
          has[i].insert(feature);
        }
      }
    }
  }
  return has;
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
            "--fair: not available on X; it needs one Redis server, Sentinel or Cluster "
            "(redis://, rediss://, unix://), etcd (etcd://) and ZooKeeper (zk://)");
  EXPECT_EQ(text(Feature::shared),
            "--shared: not available on X; it needs one Redis server, Sentinel or Cluster, "
            "PostgreSQL (postgres://), files (file://) and ZooKeeper (zk://)");
  EXPECT_EQ(text(Feature::limit),
            "--limit: not available on X; it needs one Redis server, Sentinel or Cluster "
            "(redis://, rediss://, unix://) and files (file://)");
  EXPECT_EQ(text(Feature::coordinate),
            "wait, barrier and latch: not available on X; it needs one Redis server, Sentinel or "
            "Cluster (redis://, rediss://, unix://)");
  EXPECT_EQ(text(Feature::detached),
            "acquire without --keep (a lock no process keeps): not available on X; it needs one "
            "Redis server, Sentinel or Cluster (redis://, rediss://, unix://) and Redlock; here a "
            "session or a descriptor is the lease, and it ends with its process: use acquire "
            "--keep, whose holder process keeps it");
  EXPECT_EQ(text(Feature::replicas),
            "--wait-replicas: not available on X; it needs Redis, whose WAIT counts the replicas "
            "a write reached");
  EXPECT_EQ(dlock::lock::refusal(store, Feature::fair).code(), dlock::ExitCode::usage);
  EXPECT_THROW(dlock::lock::require_coordination(store), dlock::Error);
}

TEST(FeatureTable, TheManPageTablesSayTheSame)
{
  std::string page = read("man/dlock.1");
  ASSERT_FALSE(page.empty()) << "man/dlock.1 not found under " << DLOCK_SOURCE_DIR;
  auto redis = man_table(page, "feature             redis://", 3);
  EXPECT_EQ(redis[0], in_table(StoreKind::redis)) << "redis://";
  EXPECT_EQ(redis[1], in_table(StoreKind::redis)) << "Sentinel, Cluster";
  EXPECT_EQ(redis[2], in_table(StoreKind::redlock)) << "Redlock";
  auto others = man_table(page, "feature             postgres", 5);
  const StoreKind columns[] = {StoreKind::postgres, StoreKind::mysql, StoreKind::etcd,
                               StoreKind::zookeeper, StoreKind::file};
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(others[i], in_table(columns[i])) << "column " << i + 1 << " of the other stores";
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

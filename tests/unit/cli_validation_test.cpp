// What cli/validation.cpp promises: run and acquire resolve how to take the lock the same way
// (LockRequestOptions), every duration that must be positive says so alike, and which of two
// mistakes is reported does not depend on how the checks are shared.
#include "cli/validation.hpp"
#include "util/error.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>

namespace {

using dlock::Error;
using dlock::ExitCode;
using dlock::cli::Arguments;
using namespace std::chrono_literals;

// The message of the usage error f throws (a failure if it throws none, or another kind).
std::string usage_error(const std::function<void()>& f)
{
  try {
    f();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::usage) << error.what();
    return error.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

// A run or acquire command line with every lock request option given.
Arguments lock_request_arguments()
{
  Arguments args;
  args.keys = {"b", "a"};
  args.limit = 3;
  args.ttl = "10s";
  args.wait = "5s";
  args.conflict_exit_code = 7;
  args.wait_replicas = 2;
  args.command = {"true"};
  return args;
}

TEST(CliValidation, RunAndAcquireResolveTheSameLockRequest)
{
  Arguments args = lock_request_arguments();
  dlock::commands::RunOptions run = dlock::cli::resolve_run(args, dlock::cli::GlobalOptions{});
  dlock::commands::AcquireOptions acquire = dlock::cli::resolve_acquire(args);
  for (const dlock::commands::LockRequestOptions& request :
       {static_cast<const dlock::commands::LockRequestOptions&>(run),
        static_cast<const dlock::commands::LockRequestOptions&>(acquire)}) {
    ASSERT_EQ(request.keys.size(), 2u);
    EXPECT_EQ(request.keys[0].str(), "a"); // canonical order
    EXPECT_EQ(request.kind, dlock::lock::LockKind::semaphore(3));
    EXPECT_EQ(request.ttl, 10s);
    EXPECT_EQ(request.wait, std::optional<dlock::util::Millis>(5s));
    EXPECT_FALSE(request.no_wait);
    EXPECT_EQ(request.conflict_exit_code, 7);
    EXPECT_EQ(request.replicas.replicas, 2);
    EXPECT_EQ(request.replicas.timeout, 1s); // ttl/10
  }
}

TEST(CliValidation, OnlyAcquireRequiresTheTtl)
{
  Arguments args = lock_request_arguments();
  args.ttl.reset();
  EXPECT_EQ(dlock::cli::resolve_run(args, {}).ttl, dlock::lock::default_ttl);
  EXPECT_EQ(usage_error([&] { dlock::cli::resolve_acquire(args); }), "--ttl is required");
}

TEST(CliValidation, EveryPositiveDurationSaysSoAlike)
{
  for (const char* name : {"DLOCK_URL", "DLOCK_PASSWORD", "DLOCK_PASSWORD_FILE",
                           "DLOCK_SENTINEL_PASSWORD", "DLOCK_SENTINEL_PASSWORD_FILE"}) {
    ::unsetenv(name);
  }
  Arguments global;
  global.connect_timeout = "0";
  EXPECT_EQ(usage_error([&] { dlock::cli::resolve_global(global); }),
            "--connect-timeout must be greater than zero");

  Arguments run = lock_request_arguments();
  run.max_hold = "0s";
  EXPECT_EQ(usage_error([&] { dlock::cli::resolve_run(run, {}); }),
            "--max-hold must be greater than zero");

  Arguments keep = lock_request_arguments();
  keep.keep = true;
  keep.max_hold = "0";
  EXPECT_EQ(usage_error([&] { dlock::cli::resolve_acquire(keep); }),
            "--max-hold must be greater than zero");

  Arguments replicas = lock_request_arguments();
  replicas.wait_replicas_timeout = "0ms";
  EXPECT_EQ(usage_error([&] { dlock::cli::resolve_acquire(replicas); }),
            "--wait-replicas-timeout must be greater than zero");

  Arguments latch;
  latch.keys = {"l"};
  latch.latch_count = 2;
  latch.expire = "0";
  EXPECT_EQ(usage_error([&] { dlock::cli::resolve_latch(latch); }),
            "--expire must be greater than zero");
}

TEST(CliValidation, RunReportsAMissingCommandBeforeItsReplicaOptions)
{
  Arguments args = lock_request_arguments();
  args.wait_replicas = 0;
  args.wait_replicas_timeout = "1s";
  args.command.clear();
  EXPECT_EQ(usage_error([&] { dlock::cli::resolve_run(args, {}); }).rfind("no command given", 0),
            0u);
  EXPECT_EQ(usage_error([&] { dlock::cli::resolve_acquire(args); }),
            "--wait-replicas-timeout needs --wait-replicas N");
}

} // namespace

TEST(CliValidation, ThePoliciesResolveAlikeForRunAndAcquire)
{
  Arguments args;
  args.keys = {"nightly"};
  args.ttl = "10s";
  args.min_hold = "14m";
  args.lock_delay = "15s";
  args.replace = true;
  args.supersede = true;
  args.note = "build 42 «ü» $x";
  args.command = {"true"};
  dlock::commands::RunOptions run = dlock::cli::resolve_run(args, dlock::cli::GlobalOptions{});
  dlock::commands::AcquireOptions acquire = dlock::cli::resolve_acquire(args);
  for (const dlock::commands::LockRequestOptions& request :
       {static_cast<const dlock::commands::LockRequestOptions&>(run),
        static_cast<const dlock::commands::LockRequestOptions&>(acquire)}) {
    EXPECT_EQ(request.policy.min_hold, 14min);
    EXPECT_EQ(request.policy.lock_delay, 15s);
    EXPECT_TRUE(request.policy.replace);
    EXPECT_TRUE(request.policy.supersede);
    EXPECT_EQ(request.note, "build 42 «ü» $x");
  }
}

TEST(CliValidation, ThePoliciesRefuseWhatCannotWork)
{
  auto refused = [](const std::function<void(Arguments&)>& change) {
    Arguments args;
    args.keys = {"k"};
    args.command = {"true"};
    change(args);
    return usage_error([&] { dlock::cli::resolve_run(args, dlock::cli::GlobalOptions{}); });
  };
  EXPECT_EQ(refused([](Arguments& a) { a.note = "a\tb"; }),
            "--note must be printable text (got a\\tb)");
  EXPECT_EQ(refused([](Arguments& a) { a.note = "\u202e"; }).substr(0, 28),
            "--note must be printable tex");
  EXPECT_EQ(refused([](Arguments& a) { a.note = std::string(257, 'x'); }),
            "--note is longer than 256 characters");
  EXPECT_EQ(refused([](Arguments& a) {
              a.min_hold = "10s";
              a.max_hold = "5s";
            }),
            "--min-hold 10s is longer than --max-hold 5s");
  EXPECT_EQ(refused([](Arguments& a) {
              a.min_hold = "10s";
              a.keys = {"a", "b"};
            }),
            "--min-hold takes one --key");
  EXPECT_EQ(refused([](Arguments& a) {
              a.replace = true;
              a.shared = true;
            }),
            "--replace is a policy of an exclusive lock: not with --shared");
  EXPECT_EQ(refused([](Arguments& a) {
              a.supersede = true;
              a.no_wait = true;
            }),
            "--supersede is for waiters: it cannot be used with --no-wait");
  EXPECT_EQ(refused([](Arguments& a) { a.min_hold = "0s"; }),
            "--min-hold must be greater than zero");
}

TEST(CliValidation, ElectIsRunForOneExclusiveKeyQueuedInOrder)
{
  Arguments args;
  args.keys = {"svc"};
  args.command = {"true"};
  dlock::commands::ElectOptions elect = dlock::cli::resolve_elect(args, {});
  EXPECT_TRUE(elect.fair) << "candidates lead first come, first served";
  EXPECT_TRUE(elect.value.empty()) << "the command fills in user@host pid N";
  args.no_wait = true;
  EXPECT_FALSE(dlock::cli::resolve_elect(args, {}).fair) << "-n: one attempt, no queue";

  auto refused = [](void (*change)(Arguments&)) {
    Arguments bad;
    bad.keys = {"svc"};
    bad.command = {"true"};
    change(bad);
    return usage_error([&] { dlock::cli::resolve_elect(bad, {}); });
  };
  EXPECT_NE(refused([](Arguments& a) { a.shared = true; }).find("one leader"), std::string::npos);
  EXPECT_NE(refused([](Arguments& a) { a.limit = 2; }).find("--limit"), std::string::npos);
  EXPECT_NE(refused([](Arguments& a) { a.keys.push_back("other"); }).find("one --key"),
            std::string::npos);
  EXPECT_NE(refused([](Arguments& a) { a.value = ""; }).find("--value is empty"),
            std::string::npos);
  EXPECT_NE(refused([](Arguments& a) { a.value = "a\nb"; }).find("printable"), std::string::npos);
  EXPECT_NE(refused([](Arguments& a) { a.value = std::string(257, 'v'); }).find("longer"),
            std::string::npos);
  EXPECT_NE(refused([](Arguments& a) {
              a.keep_campaigning = true;
              a.wait = "1s";
            }).find("--keep-campaigning"),
            std::string::npos);
}

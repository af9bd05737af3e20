#include "process/child.hpp"
#include "process/process_table.hpp"

#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sys/stat.h>
#include <string>
#include <thread>

using namespace std::chrono_literals;
using dlock::process::CommandEvent;
using dlock::process::CommandSpec;
using dlock::process::ProcessGroup;

namespace {

sigset_t current_mask()
{
  sigset_t mask;
  ::sigprocmask(SIG_SETMASK, nullptr, &mask);
  return mask;
}

// The next event from the guard that is not a stop or continue, waiting up to 10 s.
CommandEvent next_end_event(ProcessGroup& group)
{
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{group.events_fd(), POLLIN, 0};
    ::poll(&pfd, 1, 100);
    while (auto event = group.next_event()) {
      if (event->kind != CommandEvent::Kind::stopped && event->kind != CommandEvent::Kind::continued) {
        return *event;
      }
    }
  }
  ADD_FAILURE() << "no event from the guard in 10 s";
  return CommandEvent{CommandEvent::Kind::guard_lost};
}

bool alive(pid_t pid)
{
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto paren = text.rfind(')');
  return paren != std::string::npos && text.size() > paren + 2 && text[paren + 2] != 'Z';
}

std::string temp_path(const char* name)
{
  return std::string(::testing::TempDir()) + "dlock-process-test-" + std::to_string(::getpid())
         + "-" + name;
}

} // namespace

TEST(LiveDescendants, FindsChildrenAndGrandchildrenButNotZombies)
{
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  if (child == 0) {
    pid_t grandchild = ::fork();
    if (grandchild == 0) {
      ::pause();
      ::_exit(0);
    }
    ssize_t ignored = ::write(ready[1], &grandchild, sizeof grandchild);
    (void)ignored;
    ::pause();
    ::_exit(0);
  }
  pid_t grandchild = 0;
  ASSERT_EQ(::read(ready[0], &grandchild, sizeof grandchild), static_cast<ssize_t>(sizeof grandchild));
  auto found = dlock::process::live_descendants(::getpid());
  EXPECT_NE(std::find(found.begin(), found.end(), child), found.end());
  EXPECT_NE(std::find(found.begin(), found.end(), grandchild), found.end());
  ::kill(grandchild, SIGKILL);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  found = dlock::process::live_descendants(::getpid());
  EXPECT_EQ(std::find(found.begin(), found.end(), child), found.end());
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST(ProcessGroup, ReportsTheExitStatusAfterKillingADescendantThatCalledSetsid)
{
  std::string pid_file = temp_path("setsid");
  ProcessGroup group(current_mask());
  CommandSpec spec;
  spec.argv = {"/bin/sh", "-c", "setsid sleep 100 </dev/null >/dev/null 2>&1 & echo $! >\"$0\"; exit 7",
               pid_file};
  group.spawn(spec);
  CommandEvent end = next_end_event(group);
  EXPECT_EQ(end.kind, CommandEvent::Kind::exited);
  EXPECT_EQ(end.value, 7);
  pid_t escaped = 0;
  std::ifstream(pid_file) >> escaped;
  ASSERT_GT(escaped, 0);
  EXPECT_FALSE(alive(escaped)) << "setsid descendant " << escaped << " outlived the command";
  std::remove(pid_file.c_str());
}

TEST(ProcessGroup, TheGuardEnforcesDeadlinesOnItsOwn)
{
  ProcessGroup group(current_mask());
  CommandSpec spec;
  spec.argv = {"sleep", "100"};
  group.spawn(spec);
  auto now = dlock::util::monotonic_now();
  group.set_deadlines(now + 50ms, now + 2s);
  CommandEvent first = next_end_event(group);
  EXPECT_EQ(first.kind, CommandEvent::Kind::deadline_passed);
  EXPECT_EQ(first.value, SIGTERM);
  CommandEvent end = next_end_event(group);
  EXPECT_EQ(end.kind, CommandEvent::Kind::exited);
  EXPECT_EQ(end.signal, SIGTERM);
  EXPECT_EQ(end.value, 128 + SIGTERM);
}

TEST(ProcessGroup, SigkillsACommandThatIgnoresSigterm)
{
  ProcessGroup group(current_mask());
  CommandSpec spec;
  std::string ready = temp_path("trapped");
  std::remove(ready.c_str());
  spec.argv = {"/bin/sh", "-c", "trap '' TERM; : >\"$0\"; while :; do sleep 0.05; done", ready};
  group.spawn(spec);
  // The deadline must find the trap in place, not a shell still starting up.
  for (int i = 0; i < 500 && ::access(ready.c_str(), F_OK) != 0; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  auto now = dlock::util::monotonic_now();
  group.set_deadlines(now, now + 100ms);
  EXPECT_EQ(next_end_event(group).kind, CommandEvent::Kind::deadline_passed);
  CommandEvent second = next_end_event(group);
  EXPECT_EQ(second.kind, CommandEvent::Kind::deadline_passed);
  EXPECT_EQ(second.value, SIGKILL);
  CommandEvent end = next_end_event(group);
  EXPECT_EQ(end.kind, CommandEvent::Kind::exited);
  EXPECT_EQ(end.signal, SIGKILL);
}

TEST(ProcessGroup, ScriptsWithoutShebangRunThroughBinSh)
{
  std::string script = temp_path("noshebang");
  {
    std::ofstream(script) << "exit 42\n";
  }
  ::chmod(script.c_str(), 0755);
  ProcessGroup group(current_mask());
  CommandSpec spec;
  spec.argv = {script};
  group.spawn(spec);
  CommandEvent end = next_end_event(group);
  EXPECT_EQ(end.kind, CommandEvent::Kind::exited);
  EXPECT_EQ(end.value, 42);
  std::remove(script.c_str());
}

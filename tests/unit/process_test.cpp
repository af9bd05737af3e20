#include "process/child.hpp"
#include "process/process_table.hpp"
#include "util/error.hpp"
#include "util/forked.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <sys/stat.h>
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
      if (event->kind != CommandEvent::Kind::stopped
          && event->kind != CommandEvent::Kind::continued) {
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
  ASSERT_EQ(::read(ready[0], &grandchild, sizeof grandchild),
            static_cast<ssize_t>(sizeof grandchild));
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
  ProcessGroup group(current_mask(), "");
  CommandSpec spec;
  spec.argv = {"/bin/sh", "-c",
               "setsid sleep 100 </dev/null >/dev/null 2>&1 & echo $! >\"$0\"; exit 7", pid_file};
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
  ProcessGroup group(current_mask(), "");
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
  ProcessGroup group(current_mask(), "");
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

TEST(ProcessGroup, TheGuardKeepsALeaseDescriptorTillTheCommandIsDeadAndNeverGivesItToIt)
{
  int lease[2];
  ASSERT_EQ(::pipe2(lease, O_CLOEXEC), 0);
  std::string seen = temp_path("held-fds");
  {
    ProcessGroup group(current_mask(), "");
    CommandSpec spec;
    // What the command's descriptors are, as it sees them.
    spec.argv = {"/bin/sh", "-c",
                 "for f in /proc/$$/fd/*; do readlink \"$f\"; done >\"$0\"; exec sleep 100", seen};
    spec.hold = {lease[1]};
    struct stat pipe_stat {};
    ASSERT_EQ(::fstat(lease[1], &pipe_stat), 0);
    const std::string lease_link = "pipe:[" + std::to_string(pipe_stat.st_ino) + "]";
    group.spawn(spec);
    ::close(lease[1]); // dlock's copy: the guard's is the one left
    pollfd fd{.fd = lease[0], .events = POLLIN, .revents = 0};
    EXPECT_EQ(::poll(&fd, 1, 200), 0) << "the guard let go of the lease while the command runs";
    for (int i = 0; i < 500 && ::access(seen.c_str(), F_OK) != 0; ++i) {
      std::this_thread::sleep_for(10ms);
    }
    std::this_thread::sleep_for(50ms); // the list is written whole
    std::ifstream listed(seen);
    std::string line;
    int lines = 0;
    while (std::getline(listed, line)) {
      ++lines;
      EXPECT_NE(line, lease_link) << "the command got the lease's descriptor";
    }
    EXPECT_GE(lines, 3);
  } // dlock goes: the guard kills the command, then exits, and the lease goes with it
  pollfd fd{.fd = lease[0], .events = POLLIN, .revents = 0};
  EXPECT_EQ(::poll(&fd, 1, 5000), 1);
  EXPECT_NE(fd.revents & POLLHUP, 0) << "the guard kept the lease after it ended";
  ::close(lease[0]);
  std::remove(seen.c_str());
}

TEST(ProcessGroup, ScriptsWithoutShebangRunThroughBinSh)
{
  std::string script = temp_path("noshebang");
  {
    std::ofstream(script) << "exit 42\n";
  }
  ::chmod(script.c_str(), 0755);
  ProcessGroup group(current_mask(), "");
  CommandSpec spec;
  spec.argv = {script};
  group.spawn(spec);
  CommandEvent end = next_end_event(group);
  EXPECT_EQ(end.kind, CommandEvent::Kind::exited);
  EXPECT_EQ(end.value, 42);
  std::remove(script.c_str());
}

// The guard looks the program up in $PATH while dlock waits for the lock; what it runs is still
// what $PATH holds at the spawn: a script without "#!" through /bin/sh, one gone since, not at all.
TEST(ProcessGroup, RunsWhatPathFindsAndNothingThatWentAwayMeanwhile)
{
  std::string dir = temp_path("bin");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  std::string tool = dir + "/dlock-test-tool";
  std::string bare = dir + "/dlock-test-bare";
  std::ofstream(tool) << "#!/bin/sh\nexit 3\n";
  std::ofstream(bare) << "exit 42\n";
  ::chmod(tool.c_str(), 0755);
  ::chmod(bare.c_str(), 0755);
  const char* old_path = std::getenv("PATH");
  std::string saved = old_path != nullptr ? old_path : "/usr/bin:/bin";
  ::setenv("PATH", (dir + ":" + saved).c_str(), 1);
  auto status_of = [](const std::string& program) {
    ProcessGroup group(current_mask(), program);
    CommandSpec spec;
    spec.argv = {program};
    group.spawn(spec);
    CommandEvent end = next_end_event(group);
    EXPECT_EQ(end.kind, CommandEvent::Kind::exited);
    return end.value;
  };
  EXPECT_EQ(status_of("dlock-test-tool"), 3);
  EXPECT_EQ(status_of("dlock-test-bare"), 42);
  {
    ProcessGroup group(current_mask(), "dlock-test-tool");
    std::this_thread::sleep_for(50ms); // most likely looked up by now; the outcome is the same
    std::remove(tool.c_str());
    CommandSpec spec;
    spec.argv = {"dlock-test-tool"};
    try {
      group.spawn(spec);
      ADD_FAILURE() << "a program removed before the spawn was started";
    } catch (const dlock::Error& error) {
      EXPECT_EQ(error.code(), dlock::ExitCode::not_found);
    }
  }
  ::setenv("PATH", saved.c_str(), 1);
  std::remove(bare.c_str());
  ::rmdir(dir.c_str());
}

// A forked child that throws ends with _exit: the destructors of the frames it was forked
// from (a held lock's release, in dlock) run in the parent alone.
TEST(RunForked, AnExceptionEndsTheChildWithoutUnwindingIntoTheParentsFrames)
{
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t parent = ::getpid();
  pid_t child = -1;
  {
    struct ParentsObject {
      int fd;
      pid_t owner;
      ~ParentsObject()
      {
        if (::getpid() != owner) {
          [[maybe_unused]] ssize_t n = ::write(fd, "C", 1); // ran in the child: wrong
        }
      }
    } object{fds[1], parent};
    child = ::fork();
    if (child == 0) {
      dlock::util::run_forked([] { throw std::runtime_error("out of memory, say"); });
    }
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ::close(fds[1]);
  char byte = 0;
  EXPECT_EQ(::read(fds[0], &byte, 1), 0) << "a destructor of the parent's ran in the child";
  ::close(fds[0]);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 70);
}

// A --keep holder's record names the process by pid and start time: a pid reused since, by
// a process started later, is another process.
TEST(StartTime, NamesThisProcessAndNoneThatIsGone)
{
  std::optional<std::uint64_t> mine = dlock::process::start_time(::getpid());
  ASSERT_TRUE(mine.has_value());
  EXPECT_GT(*mine, 0u);
  EXPECT_EQ(dlock::process::start_time(::getpid()), mine);
  pid_t child = ::fork();
  if (child == 0) {
    ::_exit(0);
  }
  ::waitpid(child, nullptr, 0);
  EXPECT_FALSE(dlock::process::start_time(child).has_value());
  dlock::process::ProcessWatch watch(::getpid());
  EXPECT_TRUE(watch.started_at(*mine));
  EXPECT_FALSE(watch.started_at(*mine + 1));
}

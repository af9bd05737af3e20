#include "process/process_table.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <unordered_map>

namespace dlock::process {

namespace {

struct StatLine {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgrp = 0;
  bool live = false;
};

// Parses "PID (COMM) STATE PPID ..."; COMM may hold spaces and parentheses, so the fields are
// found after the last ')'.
bool read_stat(int proc_fd, const char* pid_name, StatLine& out)
{
  char path[300];
  std::snprintf(path, sizeof path, "%s/stat", pid_name);
  int fd = ::openat(proc_fd, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  char buffer[512];
  ssize_t n = ::read(fd, buffer, sizeof buffer - 1);
  ::close(fd);
  if (n <= 0) {
    return false;
  }
  std::string_view text(buffer, static_cast<std::size_t>(n));
  std::size_t close_paren = text.rfind(')');
  if (close_paren == std::string_view::npos || close_paren + 4 >= text.size()) {
    return false;
  }
  char state = text[close_paren + 2];
  out.live = state != 'Z' && state != 'X' && state != 'x';
  char* end = nullptr;
  out.ppid = static_cast<pid_t>(std::strtol(text.data() + close_paren + 4, &end, 10));
  out.pgrp = static_cast<pid_t>(std::strtol(end, nullptr, 10));
  out.pid = static_cast<pid_t>(std::strtol(pid_name, nullptr, 10));
  return true;
}

// Every process's /proc/PID/stat line that could be read.
std::vector<StatLine> read_process_table()
{
  std::vector<StatLine> table;
  int proc_fd = ::open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (proc_fd < 0) {
    return table;
  }
  DIR* dir = ::fdopendir(proc_fd);
  if (dir == nullptr) {
    ::close(proc_fd);
    return table;
  }
  while (dirent* entry = ::readdir(dir)) {
    StatLine line;
    if (entry->d_name[0] >= '0' && entry->d_name[0] <= '9'
        && read_stat(proc_fd, entry->d_name, line)) {
      table.push_back(line);
    }
  }
  ::closedir(dir);
  return table;
}

} // namespace

std::vector<pid_t> live_descendants(pid_t root)
{
  std::unordered_multimap<pid_t, pid_t> children;
  std::unordered_map<pid_t, bool> live;
  for (const StatLine& line : read_process_table()) {
    children.emplace(line.ppid, line.pid);
    live[line.pid] = line.live;
  }

  std::vector<pid_t> found;
  std::vector<pid_t> frontier{root};
  while (!frontier.empty()) {
    pid_t parent = frontier.back();
    frontier.pop_back();
    auto [begin, end] = children.equal_range(parent);
    for (auto it = begin; it != end; ++it) {
      if (live[it->second]) {
        found.push_back(it->second);
      }
      frontier.push_back(it->second); // a zombie's children were reparented already, but cheap
    }
  }
  return found;
}

void signal_descendants(int sig) noexcept
{
  try {
    for (pid_t pid : live_descendants(::getpid())) {
      ::kill(pid, sig);
    }
  } catch (...) {
    // out of memory: the process group signal sent alongside still reaches most of them
  }
}

bool group_has_siblings()
{
  std::vector<StatLine> table = read_process_table();
  std::unordered_map<pid_t, pid_t> parent;
  for (const StatLine& line : table) {
    parent[line.pid] = line.ppid;
  }
  std::vector<pid_t> ancestors;
  for (pid_t pid = ::getpid(); pid > 1 && ancestors.size() < 4096; pid = parent[pid]) {
    ancestors.push_back(pid);
  }
  pid_t group = ::getpgrp();
  for (const StatLine& line : table) {
    if (line.live && line.pgrp == group
        && std::find(ancestors.begin(), ancestors.end(), line.pid) == ancestors.end()) {
      return true;
    }
  }
  return false;
}

namespace {

// A file under /proc/PID, whole ("" if unreadable).
std::string proc_file(pid_t pid, const char* name)
{
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/%s", static_cast<int>(pid), name);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return {};
  }
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(fd, buffer, sizeof buffer)) > 0) {
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

std::string proc_exe(pid_t pid)
{
  char path[64];
  char target[4096];
  std::snprintf(path, sizeof path, "/proc/%d/exe", static_cast<int>(pid));
  ssize_t n = ::readlink(path, target, sizeof target);
  return n > 0 ? std::string(target, static_cast<std::size_t>(n)) : std::string();
}

pid_t parent_of(pid_t pid)
{
  int proc_fd = ::open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (proc_fd < 0) {
    return 0;
  }
  StatLine line;
  std::string name = std::to_string(pid);
  bool read = read_stat(proc_fd, name.c_str(), line);
  ::close(proc_fd);
  return read ? line.ppid : 0;
}

} // namespace

pid_t calling_script(pid_t parent)
{
  pid_t script = parent;
  while (true) {
    pid_t up = parent_of(script);
    if (up <= 1) {
      return script;
    }
    std::string cmdline = proc_file(script, "cmdline");
    std::string exe = proc_exe(script);
    if (cmdline.empty() || exe.empty() || proc_file(up, "cmdline") != cmdline
        || proc_exe(up) != exe) {
      return script;
    }
    script = up;
  }
}

std::optional<std::uint64_t> start_time(pid_t pid)
{
  std::string text = proc_file(pid, "stat");
  std::size_t close_paren = text.rfind(')');
  if (close_paren == std::string::npos) {
    return std::nullopt;
  }
  // Fields after COMM: state (3) ... starttime (22).
  std::size_t pos = close_paren + 1;
  for (int field = 3; field < 22 && pos != std::string::npos; ++field) {
    pos = text.find(' ', pos + 1);
  }
  if (pos == std::string::npos) {
    return std::nullopt;
  }
  char* end = nullptr;
  unsigned long long start = std::strtoull(text.c_str() + pos + 1, &end, 10);
  if (end == text.c_str() + pos + 1) {
    return std::nullopt;
  }
  return start;
}

std::string program_name(pid_t pid)
{
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/comm", static_cast<int>(pid));
  int fd = ::open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    return {};
  }
  char buffer[64]; // TASK_COMM_LEN is 16; more is never read
  ssize_t n = ::read(fd, buffer, sizeof buffer);
  ::close(fd);
  if (n <= 0) {
    return {};
  }
  std::string name(buffer, static_cast<std::size_t>(n));
  while (!name.empty() && (name.back() == '\n' || name.back() == '\0')) {
    name.pop_back();
  }
  return name;
}

ProcessWatch::ProcessWatch(pid_t pid) : m_pid(pid)
{
  m_fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

ProcessWatch::~ProcessWatch()
{
  if (m_fd >= 0) {
    ::close(m_fd);
  }
}

bool ProcessWatch::ended() const noexcept
{
  if (m_fd >= 0) {
    pollfd entry{m_fd, POLLIN, 0};
    return ::poll(&entry, 1, 0) > 0;
  }
  return ::kill(m_pid, 0) != 0 && errno == ESRCH;
}

bool ProcessWatch::started_at(std::uint64_t start) const
{
  return !ended() && start_time(m_pid) == start;
}

bool ProcessWatch::signal(int sig) const noexcept
{
  if (m_fd >= 0) {
    return ::syscall(SYS_pidfd_send_signal, m_fd, sig, nullptr, 0) == 0;
  }
  return ::kill(m_pid, sig) == 0;
}

} // namespace dlock::process

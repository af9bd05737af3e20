#include "process/process_table.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

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
    if (entry->d_name[0] >= '0' && entry->d_name[0] <= '9' && read_stat(proc_fd, entry->d_name, line)) {
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

} // namespace dlock::process

#include "process/descendants.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <unordered_map>

namespace dlock::process {

namespace {

struct StatLine {
  pid_t ppid = 0;
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
  out.ppid = static_cast<pid_t>(std::strtol(text.data() + close_paren + 4, nullptr, 10));
  return true;
}

} // namespace

std::vector<pid_t> live_descendants(pid_t root)
{
  std::unordered_multimap<pid_t, pid_t> children;
  std::unordered_map<pid_t, bool> live;
  int proc_fd = ::open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (proc_fd < 0) {
    return {};
  }
  DIR* dir = ::fdopendir(proc_fd);
  if (dir == nullptr) {
    ::close(proc_fd);
    return {};
  }
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') {
      continue;
    }
    StatLine stat;
    if (read_stat(proc_fd, entry->d_name, stat)) {
      pid_t pid = static_cast<pid_t>(std::strtol(entry->d_name, nullptr, 10));
      children.emplace(stat.ppid, pid);
      live[pid] = stat.live;
    }
  }
  ::closedir(dir);

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

} // namespace dlock::process

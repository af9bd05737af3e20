#include "util/files.hpp"

#include "util/random.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <fmt/format.h>

namespace dlock::util {

UniqueFd open_directory(const std::string& path)
{
  return UniqueFd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOCTTY));
}

UniqueFd open_directory_at(int dir, const std::string& name)
{
  return UniqueFd(
    ::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY));
}

UniqueFd open_regular_at(int dir, const std::string& name, int flags, mode_t mode, bool single_link)
{
  UniqueFd fd(
    ::openat(dir, name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, mode));
  if (!fd) {
    return fd;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return UniqueFd();
  }
  if (!S_ISREG(st.st_mode)) {
    errno = EINVAL;
    return UniqueFd();
  }
  if (single_link && st.st_nlink > 1) {
    errno = EMLINK;
    return UniqueFd();
  }
  if ((flags & O_NONBLOCK) == 0) {
    int status = ::fcntl(fd.get(), F_GETFL);
    if (status < 0 || ::fcntl(fd.get(), F_SETFL, status & ~O_NONBLOCK) != 0) {
      return UniqueFd();
    }
  }
  return fd;
}

UniqueFd open_or_create_regular_at(int dir, const std::string& name, int flags, mode_t mode,
                                   bool single_link)
{
  flags &= ~(O_CREAT | O_EXCL);
  // Created by someone else between the two calls, or removed between them: ask again.
  for (int attempt = 0; attempt < 10; ++attempt) {
    UniqueFd fd = open_regular_at(dir, name, flags, mode, single_link);
    if (fd || errno != ENOENT) {
      return fd;
    }
    fd = open_regular_at(dir, name, flags | O_CREAT | O_EXCL, mode, single_link);
    if (fd || errno != EEXIST) {
      return fd;
    }
  }
  errno = EAGAIN;
  return UniqueFd();
}

std::vector<std::string> directory_entries(int dir)
{
  std::vector<std::string> names;
  // A description of its own: readdir's position is not shared with the caller's descriptor.
  UniqueFd own(::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  DIR* d = own ? ::fdopendir(own.get()) : nullptr;
  if (d == nullptr) {
    return names;
  }
  own.release();
  while (dirent* e = ::readdir(d)) {
    std::string_view name(e->d_name);
    if (name != "." && name != "..") {
      names.emplace_back(name);
    }
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<std::string> read_bounded(int fd, std::size_t limit)
{
  std::string text;
  std::array<char, 4096> buffer{};
  off_t offset = 0;
  for (;;) {
    ssize_t n = ::pread(fd, buffer.data(), buffer.size(), offset);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return std::nullopt;
    }
    if (n == 0) {
      return text;
    }
    if (text.size() + static_cast<std::size_t>(n) > limit) {
      errno = EFBIG;
      return std::nullopt;
    }
    text.append(buffer.data(), static_cast<std::size_t>(n));
    offset += n;
  }
}

int replace_file_at(int dir, const std::string& name, std::string_view text, mode_t mode)
{
  const std::string temporary = fmt::format(".{}.{}.tmp", name, random_token().substr(0, 16));
  UniqueFd fd(
    ::openat(dir, temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd) {
    return errno;
  }
  int error = 0;
  std::size_t written = 0;
  while (error == 0 && written < text.size()) {
    ssize_t n = ::write(fd.get(), text.data() + written, text.size() - written);
    if (n < 0 && errno != EINTR) {
      error = errno;
    } else if (n == 0) {
      error = EIO;
    } else if (n > 0) {
      written += static_cast<std::size_t>(n);
    }
  }
  // the mode asked for, whatever the umask took away
  if (error == 0 && (::fchmod(fd.get(), mode) != 0 || ::fsync(fd.get()) != 0)) {
    error = errno;
  }
  if (error == 0 && ::renameat(dir, temporary.c_str(), dir, name.c_str()) != 0) {
    error = errno;
  }
  if (error != 0) {
    ::unlinkat(dir, temporary.c_str(), 0);
  }
  return error;
}

std::optional<std::string> untrusted_because(const struct stat& st, bool group_may_write)
{
  if (st.st_uid != 0 && st.st_uid != ::getuid()) {
    return fmt::format("it is owned by another user (uid {})", st.st_uid);
  }
  bool sticky_directory = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX) != 0;
  mode_t others = S_ISDIR(st.st_mode) && group_may_write ? S_IWOTH : (S_IWGRP | S_IWOTH);
  if ((st.st_mode & others) != 0 && !sticky_directory) {
    return fmt::format("other users can write it (mode {:o})", st.st_mode & 07777);
  }
  return std::nullopt;
}

std::vector<int> open_descriptors()
{
  std::vector<int> open;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    while (const dirent* entry = ::readdir(dir)) {
      int fd = std::atoi(entry->d_name); // "." and "..": 0
      if (fd > 2 && fd != ::dirfd(dir)) {
        open.push_back(fd);
      }
    }
    ::closedir(dir);
  }
  return open;
}

} // namespace dlock::util

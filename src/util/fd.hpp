#pragma once

#include <unistd.h>

#include <utility>

namespace dlock::util {

// Owns one file descriptor and closes it exactly once.
class UniqueFd {
public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : m_fd(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : m_fd(std::exchange(other.m_fd, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept
  {
    if (this != &other) {
      reset(std::exchange(other.m_fd, -1));
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const noexcept { return m_fd; }
  explicit operator bool() const noexcept { return m_fd >= 0; }
  // Closes the current descriptor and takes ownership of another.
  void reset(int fd = -1) noexcept
  {
    if (m_fd >= 0) {
      ::close(m_fd);
    }
    m_fd = fd;
  }
  // Gives up ownership without closing.
  int release() noexcept { return std::exchange(m_fd, -1); }

private:
  int m_fd = -1;
};

} // namespace dlock::util

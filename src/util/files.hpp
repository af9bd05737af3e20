#pragma once

#include "util/fd.hpp"

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// Files in directories that other users may write (a shared lock directory, a metrics
// directory, /tmp): dlock often runs there as root, so every file is opened from a directory
// descriptor, without following a symlink, without blocking on a FIFO or a device, and only
// if it is a regular file. These functions report failures through errno, as the system calls
// they wrap do, so that each caller turns them into its own line and exit code.

namespace dlock::util {

// Opens a directory, close-on-exec. The path is the caller's (an administrator's choice), so
// its symlinks are followed (/var/lock -> /run/lock); what is inside it is opened with *_at.
UniqueFd open_directory(const std::string& path);

// Opens the directory name inside dir without following a symlink there (ENOTDIR if name is
// not a directory, ELOOP if it is a symlink), close-on-exec.
UniqueFd open_directory_at(int dir, const std::string& name);

// Opens name inside dir with flags (O_RDONLY, O_RDWR, O_CREAT, ...) plus O_NOFOLLOW,
// O_CLOEXEC and O_NOCTTY, never blocking on a FIFO (O_NONBLOCK while opening, cleared after),
// and keeps it only if it is a regular file (EINVAL otherwise; ELOOP for a symlink). With
// single_link, a file with another hard link is refused too (EMLINK): a link to a file
// elsewhere would let its owner choose what dlock writes to.
UniqueFd open_regular_at(int dir, const std::string& name, int flags, mode_t mode = 0600,
                         bool single_link = false);

// Opens name inside dir as open_regular_at does, creating it (O_EXCL, mode) only if it does not
// exist: with fs.protected_regular (on by default), O_CREAT on a file another user created in a
// sticky directory fails even for root, while opening it without O_CREAT does not.
UniqueFd open_or_create_regular_at(int dir, const std::string& name, int flags, mode_t mode = 0600,
                                   bool single_link = false);

// The names in dir but . and .., sorted; empty if it cannot be read.
std::vector<std::string> directory_entries(int dir);
// The descriptors this process has open above 2, as /proc/self/fd lists them: for closing
// them where the kernel lacks close_range (before 5.9).
std::vector<int> open_descriptors();

// Reads fd from offset 0 up to limit bytes; nullopt if it holds more (EFBIG) or a read fails:
// a file another user fills cannot make dlock read forever or eat memory.
std::optional<std::string> read_bounded(int fd, std::size_t limit);

// Replaces name inside dir with text, atomically: written to a new file of a random name
// (O_EXCL, so nothing planted there is followed or reused), synced, then renamed over name.
// Returns 0, or the errno of the step that failed (the temporary file is removed then).
int replace_file_at(int dir, const std::string& name, std::string_view text, mode_t mode);

// Why a file or directory that dlock takes settings or state from cannot be trusted, as in
// ssh: owned by a user other than root and the caller, or writable by group or others (a
// directory that is sticky, as /tmp, is allowed to be written by others). nullopt if trusted.
// With group_may_write, a directory its group may write is trusted too (a team's lock
// directory, made with umask 002: its owner chose who is in the group).
std::optional<std::string> untrusted_because(const struct stat& st, bool group_may_write = false);

} // namespace dlock::util

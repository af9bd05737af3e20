#pragma once

#include "util/fd.hpp"

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

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
std::optional<std::string> untrusted_because(const struct stat& st);

} // namespace dlock::util

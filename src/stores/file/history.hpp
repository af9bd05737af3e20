#pragma once

#include "stores/file/layout.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

// A lock's history on file:// (lock::History): one file per lock and user in DIR/.dlock,
// ENC+history+UID, mode 0644, which only that user writes, so that in a shared sticky
// directory every user records its own events and reads everyone's. Each line is
// "US TEXT": the writer's CLOCK_REALTIME µs, by which the users' files are merged, and the
// event's text (lock::encode_event's: one line).
namespace dlock::file {

// Appends text to this user's history file of the lock, under a flock taken without blocking
// (another user can flock a file it may read: a few tries, then it gives up); one last
// written more than lock::history_keep ago is emptied first, and one grown past
// history_rewrite_bytes is rewritten aside with its newest lock::max_history_events lines and
// renamed over it. A file of another owner planted under this user's name is removed if it
// can be. Returns 0 or the errno that stopped it (EAGAIN: kept locked by someone else).
int append_history(int meta, const Layout& layout, std::string_view text, std::int64_t now_us);

// The newest events of the lock, at most limit, newest first, from every user's history file:
// each is read from its end, at most history_tail_bytes (a planted huge file is never read
// whole), and lines over lock::max_event_bytes are left out. Files that are not regular
// (symlinks, FIFOs), whose owner is not the user they are named after, or last written more
// than lock::history_keep ago give nothing; warnings says why for each but the expired.
std::vector<std::string> read_history(int meta, const Layout& layout, std::size_t limit,
                                      std::int64_t now_us, std::vector<std::string>& warnings);

// A history file is rewritten to its newest max_history_events lines once this big (dlock's
// events are ~200 bytes: every ~150 events).
inline constexpr std::size_t history_rewrite_bytes = 50 * 1024;
// The most read back of a history file, from its end.
inline constexpr std::size_t history_tail_bytes = 256 * 1024;
// The most history files of one lock read (one per user).
inline constexpr std::size_t max_history_files = 64;

} // namespace dlock::file

#include "stores/file/history.hpp"

#include "lock/history.hpp"
#include "util/fd.hpp"
#include "util/files.hpp"
#include "util/text.hpp"

#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <thread>

namespace dlock::file {

namespace {

// How many times a history file's flock is tried, 2 ms apart, before the event is dropped:
// dlock's own writers hold it for a write or two; another user may hold it for ever.
constexpr int flock_tries = 25;

std::int64_t mtime_us(const struct stat& st)
{
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000 + st.st_mtim.tv_nsec / 1000;
}

bool expired(const struct stat& st, std::int64_t now_us)
{
  return mtime_us(st)
           + std::chrono::duration_cast<std::chrono::microseconds>(lock::history_keep).count()
         < now_us;
}

bool lock_briefly(int fd)
{
  for (int i = 0; i < flock_tries; ++i) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      return true;
    }
    if (errno != EWOULDBLOCK && errno != EINTR) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  errno = EAGAIN;
  return false;
}

// A line "US TEXT": its stamp and text, or nothing if it is not one (too long, no stamp).
struct Line {
  std::int64_t us = 0;
  std::string_view text;
};
std::optional<Line> parse_line(std::string_view line)
{
  std::size_t space = line.find(' ');
  if (space == std::string_view::npos || space == 0 || space > 20) {
    return std::nullopt;
  }
  Line parsed;
  auto [end, ec] = std::from_chars(line.data(), line.data() + space, parsed.us);
  parsed.text = line.substr(space + 1);
  if (ec != std::errc() || end != line.data() + space || parsed.text.empty()
      || parsed.text.size() > lock::max_event_bytes
      || parsed.text.find_first_of('\r') != std::string_view::npos) {
    return std::nullopt;
  }
  return parsed;
}

// The lines of text, the last one only if complete.
std::vector<std::string_view> complete_lines(std::string_view text)
{
  std::vector<std::string_view> lines;
  std::size_t start = 0;
  for (std::size_t nl = text.find('\n'); nl != std::string_view::npos;
       nl = text.find('\n', start)) {
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

// Rewrites name to its newest max_history_events complete lines (fd: it, locked).
int trim(int meta, const std::string& name, int fd)
{
  std::optional<std::string> text =
    util::read_bounded(fd, history_rewrite_bytes + lock::max_event_bytes * 4);
  std::vector<std::string_view> lines;
  if (text) { // else grown by something else than dlock: started again
    lines = complete_lines(*text);
  }
  std::size_t first =
    lines.size() > lock::max_history_events ? lines.size() - lock::max_history_events : 0;
  std::string kept;
  for (std::size_t i = first; i < lines.size(); ++i) {
    kept.append(lines[i]).push_back('\n');
  }
  return util::replace_file_at(meta, name, kept, 0644);
}

} // namespace

int append_history(int meta, const Layout& layout, std::string_view text, std::int64_t now_us)
{
  if (text.empty() || text.size() > lock::max_event_bytes
      || text.find_first_of("\r\n") != std::string_view::npos) {
    return EINVAL;
  }
  const std::string name = layout.history_name(::geteuid());
  const std::string line = fmt::format("{} {}\n", now_us, text);
  for (int attempt = 0; attempt < 3; ++attempt) {
    util::UniqueFd fd = util::open_or_create_regular_at(meta, name, O_RDWR | O_APPEND, 0644, true);
    struct stat st {};
    if (!fd) {
      if (errno != EINVAL && errno != ELOOP && errno != EMLINK) {
        return errno; // EACCES: another user's (not to be removed) or .dlock not writable
      }
    } else if (::fstat(fd.get(), &st) != 0) {
      return errno;
    }
    if (!fd || st.st_uid != ::geteuid()) {
      // Not this user's (planted: a symlink, a FIFO, another owner's): removed if it can be
      // (a sticky directory keeps another user's), else no history is written.
      fd.reset();
      if (::unlinkat(meta, name.c_str(), 0) != 0 && errno != ENOENT) {
        return errno;
      }
      continue;
    }
    if (!lock_briefly(fd.get())) {
      return errno;
    }
    // A writer that trimmed it renamed another file over it meanwhile: that one, then.
    struct stat named {};
    if (::fstatat(meta, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) != 0 || named.st_dev != st.st_dev
        || named.st_ino != st.st_ino) {
      continue;
    }
    if (::fstat(fd.get(), &st) != 0) {
      return errno;
    }
    off_t size = st.st_size;
    if (size > 0 && expired(st, now_us)) { // its events are gone: a log starts again
      if (::ftruncate(fd.get(), 0) != 0) {
        return errno;
      }
      size = 0;
    }
    if (::write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      return errno != 0 ? errno : EIO;
    }
    if (static_cast<std::size_t>(size) + line.size() > history_rewrite_bytes) {
      return trim(meta, name, fd.get());
    }
    return 0;
  }
  return EAGAIN;
}

std::vector<std::string> read_history(int meta, const Layout& layout, std::size_t limit,
                                      std::int64_t now_us, std::vector<std::string>& warnings)
{
  struct Found {
    std::int64_t us;
    std::size_t file, index;
    std::string text;
  };
  std::vector<Found> found;
  const std::string prefix = layout.history_prefix();
  std::size_t files = 0;
  for (const std::string& entry : util::directory_entries(meta)) {
    if (!entry.starts_with(prefix)) {
      continue;
    }
    std::string_view uid_text = std::string_view(entry).substr(prefix.size());
    std::uint64_t uid = 0;
    auto [end, ec] = std::from_chars(uid_text.data(), uid_text.data() + uid_text.size(), uid);
    if (uid_text.empty() || ec != std::errc() || end != uid_text.data() + uid_text.size()) {
      continue; // not a name dlock gives
    }
    const std::string path = layout.meta_path_of(entry);
    if (++files > max_history_files) {
      warnings.push_back(fmt::format("more than {} history files of lock '{}'; the others left out",
                                     max_history_files, util::printable(layout.encoded)));
      break;
    }
    util::UniqueFd fd = util::open_regular_at(meta, entry, O_RDONLY);
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0) {
      warnings.push_back(fmt::format("{}: not a regular file: left out", util::printable(path)));
      continue;
    }
    if (st.st_uid != uid) {
      warnings.push_back(fmt::format("{}: owned by uid {}, not {} as its name says: left out",
                                     util::printable(path), st.st_uid, uid));
      continue;
    }
    if (expired(st, now_us)) {
      continue;
    }
    // Its end only: a file someone filled is never read whole.
    std::size_t size = static_cast<std::size_t>(std::max<off_t>(st.st_size, 0));
    std::size_t want = std::min(size, history_tail_bytes);
    std::string text(want, '\0');
    std::size_t got = 0;
    while (got < want) {
      ssize_t n =
        ::pread(fd.get(), text.data() + got, want - got, static_cast<off_t>(size - want + got));
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        break;
      }
      got += static_cast<std::size_t>(n);
    }
    text.resize(got);
    std::string_view view(text);
    if (want < size) { // started inside a line: from the next one
      std::size_t nl = view.find('\n');
      view = nl == std::string_view::npos ? std::string_view() : view.substr(nl + 1);
    }
    std::vector<std::string_view> lines = complete_lines(view);
    std::size_t taken = 0;
    for (std::size_t i = lines.size(); i-- > 0 && taken < limit;) {
      if (std::optional<Line> line = parse_line(lines[i])) {
        found.push_back(Found{line->us, files, i, std::string(line->text)});
        ++taken;
      }
    }
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    if (a.us != b.us) {
      return a.us > b.us;
    }
    return a.file != b.file ? a.file > b.file : a.index > b.index;
  });
  std::vector<std::string> texts;
  for (std::size_t i = 0; i < found.size() && i < limit; ++i) {
    texts.push_back(std::move(found[i].text));
  }
  return texts;
}

} // namespace dlock::file

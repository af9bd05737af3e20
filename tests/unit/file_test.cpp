#include "stores/file/layout.hpp"
#include "util/error.hpp"

#include <gtest/gtest.h>

namespace dlock::file {
namespace {

ExitCode code_of(std::string_view url)
{
  try {
    directory_of(url);
  } catch (const Error& error) {
    return error.code();
  }
  return ExitCode::ok;
}

TEST(FileUrl, TakesAnAbsoluteDirectory)
{
  EXPECT_EQ(directory_of("file:///run/lock/dlock"), "/run/lock/dlock");
  EXPECT_EQ(directory_of("file:///run/lock/dlock/"), "/run/lock/dlock");
  EXPECT_EQ(directory_of("file://localhost/tmp/x"), "/tmp/x");
  EXPECT_EQ(directory_of("file:///tmp/with%20space"), "/tmp/with space");
  EXPECT_EQ(directory_of("file:///"), "/");
}

TEST(FileUrl, RefusesWhatIsNotALocalAbsoluteDirectory)
{
  EXPECT_EQ(code_of("file://relative/dir"), ExitCode::usage); // a host, not a path
  EXPECT_EQ(code_of("file://otherhost/tmp"), ExitCode::usage);
  EXPECT_EQ(code_of("file://"), ExitCode::usage);
  EXPECT_EQ(code_of("file:relative"), ExitCode::usage);
  EXPECT_EQ(code_of("file:/tmp"), ExitCode::usage);
  EXPECT_EQ(code_of("file:///tmp?x=1"), ExitCode::usage);
  EXPECT_EQ(code_of("file:///tmp/%zz"), ExitCode::usage);
  EXPECT_EQ(code_of("file:///tmp/%00"), ExitCode::usage);
  EXPECT_TRUE(is_file_url("file:///x"));
  EXPECT_FALSE(is_file_url("redis://x"));
}

TEST(FileNames, KeepShortNamesReadable)
{
  EXPECT_EQ(file_name_of("backup"), "backup");
  EXPECT_EQ(file_name_of("db-backup_2.daily"), "db-backup_2.daily");
  EXPECT_EQ(file_name_of("jobs/nightly"), "jobs%2Fnightly");
  EXPECT_EQ(file_name_of(".hidden"), "%2Ehidden");
  EXPECT_EQ(file_name_of(".."), "%2E.");
  EXPECT_EQ(file_name_of("a b+c~d%"), "a%20b%2Bc%7Ed%25");
  EXPECT_EQ(file_name_of("caf\xc3\xa9"), "caf%C3%A9");
}

TEST(FileNames, RoundTripAndRejectOthers)
{
  for (std::string name : {"backup", "jobs/nightly", ".x", "a b", "%41", "x.slot", "caf\xc3\xa9"}) {
    EXPECT_EQ(lock_name_of(file_name_of(name)).value_or("?"), name) << name;
  }
  EXPECT_FALSE(lock_name_of("backup+slot.0"));
  EXPECT_FALSE(lock_name_of("%41"));     // 'A' is never escaped: not dlock's file
  EXPECT_FALSE(lock_name_of("%2f"));     // lower-case escape: not dlock's
  EXPECT_FALSE(lock_name_of(".hidden")); // a leading '.' is always escaped
  EXPECT_FALSE(lock_name_of("a~" + std::string(64, 'f')));
  EXPECT_FALSE(lock_name_of("a%2"));
}

TEST(FileNames, HashLongNamesWithinFileNameLimits)
{
  std::string long_name(1024, 'x');
  std::string encoded = file_name_of(long_name);
  EXPECT_EQ(encoded.size(), 100u + 1 + 64);
  EXPECT_EQ(encoded.substr(0, 100), std::string(100, 'x'));
  EXPECT_NE(file_name_of(long_name + "y"), encoded);
  std::string slashes(400, '/'); // every byte escaped: the cut never splits an escape
  std::string cut = file_name_of(slashes);
  EXPECT_EQ(cut.find('~') % 3, 0u);
  EXPECT_LE((Layout("/d", slashes).slot_path(999999)).size() - 3, 255u);
  EXPECT_EQ(file_name_of(std::string(200, 'a')), std::string(200, 'a'));
}

TEST(FileLayout, SideFilesNeverCollideWithLockFiles)
{
  Layout a("/d", "a");
  Layout b("/d", "a+slot.0");
  EXPECT_EQ(a.lock_path(), "/d/a");
  EXPECT_EQ(a.slot_path(0), "/d/a+slot.0");
  EXPECT_NE(b.lock_path(), a.slot_path(0));
  EXPECT_EQ(a.fence_path(), "/d/.dlock/a+fence");
  EXPECT_EQ(a.record_path("0123"), "/d/.dlock/a+by+0123");
  EXPECT_EQ(Layout("/", "a").lock_path(), "/a");
}

TEST(FileRecord, RoundTrips)
{
  Record r;
  r.name = "jobs/nightly";
  r.kind = lock::LockKind::semaphore(3);
  r.slot = 2;
  r.inode = 12345;
  r.user = "alice";
  r.host = "h1";
  r.pid = 42;
  r.acquired_ms = 1700000000000;
  r.fence = 7;
  r.ttl_ms = 30000;
  r.command = "sh -c 'a\tb\nc'";
  std::optional<Record> back = Record::parse(r.serialize());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->name, r.name);
  EXPECT_EQ(back->kind, r.kind);
  EXPECT_EQ(back->slot, 2);
  EXPECT_EQ(back->inode, 12345u);
  EXPECT_EQ(back->pid, 42);
  EXPECT_EQ(back->fence, 7);
  EXPECT_EQ(back->command, "sh -c 'a b c'");
  EXPECT_FALSE(Record::parse("garbage"));
  EXPECT_FALSE(Record::parse(""));
}

TEST(ProcLocks, ReadsFlockHoldersAndWaiters)
{
  std::vector<ProcLock> locks =
    parse_proc_locks("1: FLOCK  ADVISORY  WRITE 15993 fe:00:10954111 0 EOF\n"
                     "1: -> FLOCK  ADVISORY  READ 15997 fe:00:10954111 0 EOF\n"
                     "2: OFDLCK ADVISORY  WRITE -1 fe:00:10993796 0 EOF\n"
                     "3: POSIX  ADVISORY  WRITE 12 08:02:5 0 EOF\n"
                     "4: FLOCK  ADVISORY  READ 77 103:0a:99 0 EOF\n");
  ASSERT_EQ(locks.size(), 3u);
  EXPECT_FALSE(locks[0].blocked);
  EXPECT_TRUE(locks[0].write);
  EXPECT_EQ(locks[0].pid, 15993);
  EXPECT_EQ(locks[0].dev_major, 0xfeu);
  EXPECT_EQ(locks[0].inode, 10954111u);
  EXPECT_TRUE(locks[1].blocked);
  EXPECT_FALSE(locks[1].write);
  EXPECT_EQ(locks[2].dev_major, 0x103u);
  EXPECT_EQ(locks[2].dev_minor, 0x0au);
}

} // namespace
} // namespace dlock::file

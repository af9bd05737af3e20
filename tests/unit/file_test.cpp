#include "stores/file/layout.hpp"
#include "util/error.hpp"

#include <gtest/gtest.h>

#include <cstdint>

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

Record holder_record(std::string note = {})
{
  Record r;
  r.name = "nightly";
  r.user = "alice";
  r.host = "h1";
  r.pid = 42;
  r.acquired_ms = 1700000000000;
  r.command = "report";
  r.note = std::move(note);
  return r;
}

TEST(FileRecord, KeepsANoteAndRefusesAnOversizedOne)
{
  std::optional<Record> back = Record::parse(holder_record("deploy #12\tof main").serialize());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->note, "deploy #12 of main");
  EXPECT_EQ(back->command, "report");
  std::optional<Record> without = Record::parse(holder_record().serialize());
  ASSERT_TRUE(without);
  EXPECT_EQ(without->note, "");
  // no note: the 12 fields an older dlock writes and reads
  EXPECT_NE(holder_record().serialize().find("\treport\n"), std::string::npos);
  EXPECT_FALSE(
    Record::parse(holder_record(std::string(lock::max_note_bytes + 1, 'x')).serialize()));
  Record long_user = holder_record();
  long_user.user = std::string(lock::max_holder_field_bytes + 1, 'u');
  EXPECT_FALSE(Record::parse(long_user.serialize()));
}

TEST(FileRecord, KeepsAValueAndReadsRecordsWithoutOne)
{
  // a value without a note: an empty 13th field keeps the value the 14th
  Record candidate = holder_record();
  candidate.value = "10.0.0.7:8080\tv2";
  std::string line = candidate.serialize();
  EXPECT_NE(line.find("\treport\t\t10.0.0.7:8080 v2\n"), std::string::npos);
  std::optional<Record> back = Record::parse(line);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->note, "");
  EXPECT_EQ(back->value, "10.0.0.7:8080 v2");
  // with a note too
  Record both = holder_record("why");
  both.value = "leader";
  back = Record::parse(both.serialize());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->note, "why");
  EXPECT_EQ(back->value, "leader");
  // an older dlock's record (12 or 13 fields) has no value
  back = Record::parse(holder_record("why").serialize());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->value, "");
  // a 15th field (a newer dlock's) is skipped
  std::string fifteen = both.serialize();
  fifteen.insert(fifteen.size() - 1, "\textra");
  back = Record::parse(fifteen);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->value, "leader");
  // a value over its cap, a record larger than any dlock writes: not dlock's
  Record long_value = holder_record();
  long_value.value = std::string(lock::max_holder_field_bytes + 1, 'v');
  EXPECT_FALSE(Record::parse(long_value.serialize()));
  Record huge = holder_record(std::string(lock::max_note_bytes, 'n'));
  huge.name = std::string(lock::max_holder_record_bytes, 'k');
  EXPECT_FALSE(Record::parse(huge.serialize()));
}
TEST(FilePolicy, RoundTripsAndComputesWhenFree)
{
  PolicyRecord p;
  p.fingerprint = "0123456789abcdef";
  p.hold_until_ms = 5000;
  p.command_ended = true;
  p.delay_ms = 3000;
  p.holder = holder_record("why");
  std::optional<PolicyRecord> back = PolicyRecord::parse(p.serialize());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->fingerprint, p.fingerprint);
  EXPECT_EQ(back->hold_until_ms, 5000);
  EXPECT_TRUE(back->command_ended);
  EXPECT_EQ(back->delay_ms, 3000);
  EXPECT_EQ(back->holder.note, "why");
  // not stamped: the delay counts from now; stamped: from the stamp
  EXPECT_EQ(p.free_at(4000), 7000);
  p.ended_at_ms = 1000;
  EXPECT_EQ(p.free_at(4000), 5000);
  p.delay_ms = 0;
  p.hold_until_ms = 0;
  EXPECT_EQ(p.free_at(4000), 0);
  p.delay_ms = INT64_MAX;
  EXPECT_EQ(p.free_at(4000), INT64_MAX);
}

TEST(FilePolicy, RefusesWhatDlockDidNotWrite)
{
  const std::string holder = holder_record().serialize();
  EXPECT_FALSE(PolicyRecord::parse(""));
  EXPECT_FALSE(PolicyRecord::parse("garbage\n" + holder));
  EXPECT_FALSE(PolicyRecord::parse("dlockpolicy1\t0123456789abcdef\t1\t0\t0\t0\n"));
  EXPECT_FALSE(PolicyRecord::parse("dlockpolicy1\tnot-hex-digits!!\t1\t0\t0\t0\n" + holder));
  EXPECT_FALSE(PolicyRecord::parse("dlockpolicy1\t0123456789abcdef\t-1\t0\t0\t0\n" + holder));
  EXPECT_FALSE(PolicyRecord::parse("dlockpolicy1\t0123456789abcdef\t1\t2\t0\t0\n" + holder));
  EXPECT_FALSE(PolicyRecord::parse("dlockpolicy1\t0123456789abcdef\t1e3\t0\t0\t0\n" + holder));
  EXPECT_TRUE(PolicyRecord::parse("dlockpolicy1\t0123456789abcdef\t1\t0\t0\t0\n" + holder));
  std::string huge = "dlockpolicy1\t0123456789abcdef\t1\t0\t0\t0\n" + holder;
  huge += std::string(max_side_file_bytes, 'x');
  EXPECT_FALSE(PolicyRecord::parse(huge));
}

TEST(FileAnnouncement, RoundTripsAndRefusesGarbage)
{
  Announcement a{.id = "fedcba9876543210", .who = holder_record("newest build"), .at_us = 17};
  std::optional<Announcement> back = Announcement::parse(a.serialize());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->id, a.id);
  EXPECT_EQ(back->who.note, "newest build");
  EXPECT_EQ(back->at_us, 17);
  EXPECT_FALSE(Announcement::parse("dlockwho1\tnot-a-fingerprint\t1\n" + a.who.serialize()));
  EXPECT_FALSE(Announcement::parse("dlockwho1\tfedcba9876543210\t1\n"));
  EXPECT_FALSE(Announcement::parse("dlockwho1\tfedcba9876543210\t-1\n" + a.who.serialize()));
  EXPECT_FALSE(Announcement::parse("dlockwho1\tfedcba9876543210\n" + a.who.serialize()));
  EXPECT_FALSE(Announcement::parse(std::string(max_side_file_bytes + 1, 'x')));
}

TEST(FileLayout, PolicySideFilesAreNotLockFiles)
{
  Layout a("/d", "a");
  EXPECT_EQ(a.meta_path_of(a.policy_name("0123")), "/d/.dlock/a+policy+0123");
  EXPECT_EQ(a.meta_path_of(a.ended_name("0123")), "/d/.dlock/a+ended+0123");
  EXPECT_EQ(a.meta_path_of(a.replace_name("0123")), "/d/.dlock/a+replace+0123");
  EXPECT_EQ(a.meta_path_of(a.waiter_name("0123")), "/d/.dlock/a+waiter+0123");
  EXPECT_FALSE(lock_name_of(a.policy_name("0123")));
  EXPECT_FALSE(lock_name_of(a.waiter_name("0123")));
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

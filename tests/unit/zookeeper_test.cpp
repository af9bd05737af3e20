// The pure parts of the ZooKeeper store: zk:// URLs, lock node names, Curator's contender
// names and their order, who holds and whom each waiter watches, and the holder record.
#include "stores/zookeeper/nodes.hpp"
#include "stores/zookeeper/url.hpp"
#include "util/error.hpp"

#include <gtest/gtest.h>

using namespace dlock;
using namespace dlock::zookeeper;

namespace {

ExitCode url_error(const std::string& url)
{
  try {
    parse_url(url);
  } catch (const Error& error) {
    return error.code();
  }
  return ExitCode::ok;
}

} // namespace

TEST(ZkUrl, HostsPortsAndChroot)
{
  ZkUrl url = parse_url("zk://a:2182,b,c:3000/app/locks/");
  EXPECT_EQ(url.hosts, "a:2182,b:2181,c:3000");
  EXPECT_EQ(url.chroot, "/app/locks");
  EXPECT_EQ(url.user, "");
  EXPECT_FALSE(url.password);
  EXPECT_EQ(url.shown, "zk://a:2182,b:2181,c:3000/app/locks");
  EXPECT_EQ(parse_url("zk://h").chroot, "");
  EXPECT_EQ(parse_url("zk://h/").chroot, "");
  EXPECT_EQ(parse_url("zk://[::1]:2181/x").hosts, "[::1]:2181");
  EXPECT_EQ(parse_url("zk://[::1]").hosts, "[::1]:2181");
}

TEST(ZkUrl, DigestCredentialsAreKeptOutOfTheShownUrl)
{
  ZkUrl url = parse_url("zk://bob:s%40cret@h:1/c");
  EXPECT_EQ(url.user, "bob");
  ASSERT_TRUE(url.password);
  EXPECT_EQ(*url.password, "s@cret");
  EXPECT_EQ(url.shown, "zk://bob@h:1/c");
  EXPECT_EQ(url.shown.find("cret"), std::string::npos);
}

TEST(ZkUrl, MalformedIsAUsageError)
{
  for (const char* bad : {"zk://", "zk:///chroot", "zk://h:0", "zk://h:65536", "zk://h:x",
                          "zk://h:", "zk://a,,b", "zk://h/a//b", "zk://h/a/../b", "zk://h/./a",
                          "zk://h?x=1", "zk://:pw@h", "zk://h/%zz", "redis://h",
                          // an unclosed or stray bracket (not a host the client cannot resolve)
                          "zk://[::1/x", "zk://[::1:2181", "zk://::1]:2181", "zk://a[b]:1"}) {
    EXPECT_EQ(url_error(bad), ExitCode::usage) << bad;
  }
}

TEST(NodeName, EveryLockNameIsOneSafePathComponent)
{
  EXPECT_EQ(encode_name("dlock:job-1"), "dlock:job-1");
  EXPECT_EQ(encode_name("dlock:a/b"), "dlock:a%2Fb");
  EXPECT_EQ(encode_name("100%"), "100%25");
  EXPECT_EQ(encode_name("a b"), "a%20b");
  EXPECT_EQ(encode_name("."), "%2E");
  EXPECT_EQ(encode_name(".."), "%2E%2E");
  EXPECT_EQ(encode_name("caf\xc3\xa9"), "caf%C3%A9");
  for (const char* name : {"dlock:x", "a/b/../c", ".", "..", "%41", "caf\xc3\xa9", "x y"}) {
    std::string encoded = encode_name(name);
    EXPECT_EQ(encoded.find('/'), std::string::npos) << name;
    ASSERT_TRUE(decode_name(encoded)) << name;
    EXPECT_EQ(*decode_name(encoded), name);
  }
  EXPECT_FALSE(decode_name("a%2"));
  EXPECT_FALSE(decode_name("a%zz"));
  EXPECT_FALSE(decode_name("a b")); // encode_name never leaves a space
  EXPECT_FALSE(decode_name(""));
}

TEST(Contender, CuratorProtectedNames)
{
  std::string uuid = random_uuid();
  ASSERT_EQ(uuid.size(), 36u);
  EXPECT_EQ(uuid[14], '4');
  EXPECT_EQ(uuid[8], '-');
  EXPECT_NE(uuid, random_uuid());
  EXPECT_EQ(contender_prefix(uuid, Role::exclusive), "_c_" + uuid + "-lock-");
  EXPECT_EQ(contender_prefix(uuid, Role::read), "_c_" + uuid + "-__READ__");
  EXPECT_EQ(contender_prefix(uuid, Role::write), "_c_" + uuid + "-__WRIT__");

  auto c = parse_contender("_c_" + uuid + "-lock-0000000042");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->sequence, 42);
  EXPECT_EQ(c->role, Role::exclusive);
  EXPECT_EQ(c->uuid, uuid);
  auto plain = parse_contender("lock-0000000007"); // Curator without protection
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->sequence, 7);
  EXPECT_EQ(plain->uuid, "");
  auto reader = parse_contender("_c_" + uuid + "-__READ__0000000003");
  ASSERT_TRUE(reader);
  EXPECT_EQ(reader->role, Role::read);
  EXPECT_FALSE(parse_contender("leases"));
  EXPECT_FALSE(parse_contender("other-0000000001"));
  EXPECT_FALSE(parse_contender("lock-00000000x1"));
}

TEST(Contender, SortedBySequenceNotByName)
{
  // The uuid prefix would order by name: the sequence is the queue.
  std::vector<Contender> queue =
    sorted_contenders({"_c_ffffffff-ffff-4fff-8fff-ffffffffffff-lock-0000000001", "lock-0000000010",
                       "_c_00000000-0000-4000-8000-000000000000-lock-0000000003", "junk"});
  ASSERT_EQ(queue.size(), 3u);
  EXPECT_EQ(queue[0].sequence, 1);
  EXPECT_EQ(queue[1].sequence, 3);
  EXPECT_EQ(queue[2].sequence, 10);
}

TEST(Contender, DlocksExclusivePairIsOneContender)
{
  // "lock-" for Curator's mutex, "__WRIT__" (next sequence, same uuid) for its read/write lock.
  std::string a = "_c_" + random_uuid();
  std::string b = "_c_" + random_uuid();
  std::vector<Contender> queue = sorted_contenders(
    {a + "-lock-0000000004", a + "-__WRIT__0000000005", b + "-__READ__0000000006",
     b + "-lock-0000000007", a + "-__WRIT__0000000009", b + "-__WRIT__0000000008"});
  ASSERT_EQ(queue.size(), 4u);
  EXPECT_EQ(queue[0].name, a + "-lock-0000000004");
  EXPECT_EQ(queue[0].partner, a + "-__WRIT__0000000005");
  EXPECT_EQ(queue[1].role, Role::read);
  EXPECT_EQ(queue[2].partner, b + "-__WRIT__0000000008");
  EXPECT_EQ(queue[3].partner, ""); // another uuid's, or not the next sequence: a lone writer
  EXPECT_EQ(queue[3].role, Role::write);
  EXPECT_EQ(holding(queue), std::vector<std::size_t>{0});
  EXPECT_FALSE(judge(queue, 1).holds); // a Curator reader after dlock's pair waits for it
  EXPECT_EQ(judge(queue, 1).wait_for, 0u);
}

TEST(Contender, ACandidatesLatchNodeJoinsItsPairAndLeaderLatchsNodesAreExclusive)
{
  // A dlock elect candidate: its pair and "latch-" (sequence + 2, same uuid) for LeaderLatch.
  std::string a = "_c_" + random_uuid();
  std::string b = "_c_" + random_uuid();
  std::vector<Contender> queue =
    sorted_contenders({b + "-latch-0000000001", a + "-lock-0000000002", a + "-__WRIT__0000000003",
                       a + "-latch-0000000004", b + "-latch-0000000005", a + "-latch-0000000006"});
  ASSERT_EQ(queue.size(), 4u);
  EXPECT_EQ(queue[0].role, Role::latch); // Curator's LeaderLatch, first: it leads
  EXPECT_EQ(queue[0].uuid, b.substr(3));
  EXPECT_EQ(queue[1].partner, a + "-__WRIT__0000000003");
  EXPECT_EQ(queue[1].latch, a + "-latch-0000000004");
  EXPECT_EQ(queue[2].latch, "");                     // a lone latch node, another's
  EXPECT_EQ(queue[3].name, a + "-latch-0000000006"); // not the pair's next but one
  EXPECT_EQ(holding(queue), std::vector<std::size_t>{0});
  EXPECT_EQ(judge(queue, 1).wait_for, 0u);
  EXPECT_EQ(contender_prefix("u", Role::latch), "_c_u-latch-");
  // a reader waits for a LeaderLatch's leader, as for any exclusive holder
  queue = sorted_contenders({"_c_" + random_uuid() + "-latch-0000000001", "x-__READ__0000000002"});
  EXPECT_FALSE(judge(queue, 1).holds);
}

TEST(Judge, EachWaiterWatchesOnlyItsPredecessor)
{
  std::vector<Contender> queue =
    sorted_contenders({"lock-0000000001", "lock-0000000002", "lock-0000000003", "lock-0000000004"});
  EXPECT_TRUE(judge(queue, 0).holds);
  for (std::size_t i = 1; i < queue.size(); ++i) {
    Verdict v = judge(queue, i);
    EXPECT_FALSE(v.holds);
    EXPECT_EQ(v.wait_for, i - 1); // no herd: one watcher per node
  }
  EXPECT_EQ(holding(queue), std::vector<std::size_t>{0});
}

TEST(Judge, ReadersShareUntilTheFirstWriter)
{
  std::vector<Contender> queue =
    sorted_contenders({"x-__READ__0000000001", "x-__READ__0000000002", "x-__WRIT__0000000003",
                       "x-__READ__0000000004", "x-lock-0000000005"});
  EXPECT_TRUE(judge(queue, 0).holds);
  EXPECT_TRUE(judge(queue, 1).holds);
  EXPECT_FALSE(judge(queue, 2).holds); // a writer waits for every earlier node
  EXPECT_EQ(judge(queue, 2).wait_for, 1u);
  EXPECT_FALSE(judge(queue, 3).holds); // a reader waits for the first writer before it
  EXPECT_EQ(judge(queue, 3).wait_for, 2u);
  EXPECT_EQ(judge(queue, 4).wait_for, 3u);
  EXPECT_EQ(holding(queue), (std::vector<std::size_t>{0, 1}));
  EXPECT_TRUE(holding({}).empty());
}

TEST(HolderRecord, RoundTripsWithoutTheToken)
{
  lock::HolderInfo me;
  me.user = "ann";
  me.host = "web1";
  me.pid = 4242;
  me.ttl_ms = 10'000;
  me.command = "backup\n--all";
  std::string token = "0123456789abcdef0123456789abcdef";
  std::string record = holder_record(me, token_fingerprint(token));
  EXPECT_EQ(record.find(token), std::string::npos);
  std::string fingerprint;
  lock::HolderInfo back = parse_holder_record(record, &fingerprint);
  EXPECT_EQ(back.user, "ann");
  EXPECT_EQ(back.host, "web1");
  EXPECT_EQ(back.pid, 4242);
  EXPECT_EQ(back.ttl_ms, 10'000);
  EXPECT_EQ(back.command, "backup --all");
  EXPECT_EQ(fingerprint, token_fingerprint(token));
  // Curator's InterProcessMutex stores the client's address: shown as its value.
  EXPECT_EQ(parse_holder_record("10.0.0.7").command, "(not a dlock holder)");
  EXPECT_EQ(parse_holder_record("10.0.0.7").value, "10.0.0.7");
}

TEST(ZookeeperNodes, AnotherTenantsRecordIsReadCheckedAndCapped)
{
  lock::HolderInfo odd = parse_holder_record("dlock=1\npid=12abc\nuser=u\n");
  EXPECT_EQ(odd.pid, 0);
  EXPECT_EQ(odd.user, "");
  EXPECT_EQ(odd.command, "(not a dlock holder: dlock=1?pid=12abc?user=u?)");
  std::string fingerprint = "unset";
  std::string big =
    "dlock=1\nuser=u\ntoken=abc\ncommand=" + std::string(lock::max_holder_record_bytes, 'x');
  lock::HolderInfo holder = parse_holder_record(big, &fingerprint);
  EXPECT_EQ(holder.user, "");
  EXPECT_EQ(fingerprint, "unset");
  EXPECT_TRUE(holder.command.starts_with("(not a dlock holder: dlock=1?user=u?"));
  EXPECT_LT(holder.command.size(), 100U);
}

TEST(HolderRecord, CarriesTheNote)
{
  lock::HolderInfo me;
  me.user = "ann";
  me.host = "web1";
  me.pid = 1;
  me.command = "job";
  me.note = "deploy #42: ünïcode, = and spaces";
  lock::HolderInfo back = parse_holder_record(holder_record(me, token_fingerprint("t")));
  EXPECT_EQ(back.note, me.note);
  std::string long_note = "dlock=1\nuser=u\nnote=" + std::string(lock::max_note_bytes + 1, 'n');
  EXPECT_EQ(parse_holder_record(long_note).note, "");
}

TEST(HolderRecord, CarriesACandidatesValueAndTheLockNodeProclaimsIt)
{
  lock::HolderInfo me;
  me.user = "ann";
  me.host = "web1";
  me.pid = 7;
  me.command = "daemon";
  me.value = "10.0.0.7:8080 v2 — ü";
  std::string record = holder_record(me, token_fingerprint("t"));
  EXPECT_EQ(parse_holder_record(record).value, me.value);
  // The "lock-" node of a candidate is what Curator's LeaderSelector reads as the leader's id;
  // a plain holder's has the record, as before.
  EXPECT_EQ(lock_node_data(me, record), me.value);
  me.value.clear();
  EXPECT_EQ(lock_node_data(me, record), record);
}

TEST(HolderRecord, ACuratorLeadersIdIsItsValueWhenItIsAProclamation)
{
  lock::HolderInfo curator = parse_holder_record("worker-3 at 10.0.0.9");
  EXPECT_EQ(curator.value, "worker-3 at 10.0.0.9");
  EXPECT_EQ(curator.pid, 0);
  EXPECT_EQ(curator.host, "");
  EXPECT_EQ(curator.command, "(not a dlock holder)");
  // Control characters, invalid UTF-8, oversized or empty data: not a value (the start of it,
  // escaped, is the command).
  EXPECT_EQ(parse_holder_record("two\nlines").value, "");
  EXPECT_EQ(parse_holder_record("two\nlines").command, "(not a dlock holder: two?lines)");
  EXPECT_EQ(parse_holder_record("bell\a").value, "");
  EXPECT_EQ(parse_holder_record("bad \xff byte").value, "");
  EXPECT_EQ(parse_holder_record("").value, "");
  EXPECT_EQ(parse_holder_record(std::string(lock::max_holder_field_bytes, 'v')).value,
            std::string(lock::max_holder_field_bytes, 'v'));
  EXPECT_EQ(parse_holder_record(std::string(lock::max_holder_field_bytes + 1, 'v')).value, "");
  EXPECT_EQ(parse_holder_record(std::string(1 << 20, 'v')).value, "");
  // A dlock record's value that is not printable is dropped, the rest kept.
  lock::HolderInfo odd = parse_holder_record("dlock=1\nuser=u\nvalue=a\x01b\n");
  EXPECT_EQ(odd.user, "u");
  EXPECT_EQ(odd.value, "");
  SideRecord side;
  side.holder = odd;
  side.holder.value = "v1";
  side.token = token_fingerprint("t");
  EXPECT_EQ(parse_side_record(side_record(side))->holder.value, "v1");
  side.holder.value = "v\x1b[2J";
  EXPECT_EQ(parse_side_record(side_record(side))->holder.value, "");
  EXPECT_FALSE(proclamation("tab\there"));
  EXPECT_EQ(proclamation("plain"), "plain");
}

TEST(SideNodes, NamesThatCuratorsRecipesSortAfterEveryContender)
{
  // Curator sorts a child on what follows "lock-" (or __READ__, __WRIT__) when it has one, on
  // its whole name otherwise: a side node's name must have none, and start with a letter.
  for (std::string_view name : {policy_node, replace_node, supersede_node, clock_node}) {
    EXPECT_EQ(name.find("lock-"), std::string_view::npos) << name;
    EXPECT_EQ(name.find("__READ__"), std::string_view::npos) << name;
    EXPECT_EQ(name.find("__WRIT__"), std::string_view::npos) << name;
    EXPECT_FALSE(parse_contender(std::string(name) + "0000000001")) << name;
    EXPECT_GT(name.front(), '9');
  }
  EXPECT_FALSE(parse_contender(std::string(clock_node) + random_uuid()));
}

TEST(SideNodes, RecordsRoundTrip)
{
  SideRecord record;
  record.holder.user = "ann";
  record.holder.host = "web1";
  record.holder.pid = 7;
  record.holder.command = "report";
  record.holder.note = "once per quarter hour";
  record.holder.fence = 12;
  record.token = token_fingerprint("secret");
  record.node = "_c_00000000-0000-4000-8000-000000000000-lock-0000000003";
  record.waiter = "0123456789abcdef";
  record.min_hold_ms = 840'000;
  record.lock_delay_ms = 15'000;
  record.released = true;
  record.ended_at = 1'795'000'000'000;
  std::string text = side_record(record);
  EXPECT_EQ(text.find("secret"), std::string::npos);
  std::optional<SideRecord> back = parse_side_record(text);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->holder.describe(), record.holder.describe());
  EXPECT_EQ(back->holder.fence, 12);
  EXPECT_EQ(back->token, record.token);
  EXPECT_EQ(back->node, record.node);
  EXPECT_EQ(back->waiter, record.waiter);
  EXPECT_EQ(back->min_hold_ms, 840'000);
  EXPECT_EQ(back->lock_delay_ms, 15'000);
  EXPECT_TRUE(back->released);
  EXPECT_EQ(back->ended_at, 1'795'000'000'000);
  SideRecord bare;
  bare.token = token_fingerprint("x");
  std::optional<SideRecord> plain = parse_side_record(side_record(bare));
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->released);
  EXPECT_EQ(plain->min_hold_ms, 0);
}

TEST(SideNodes, AnotherTenantsRecordIsNotDlocks)
{
  SideRecord held;
  held.token = token_fingerprint("x");
  held.min_hold_ms = 1000;
  std::string good = side_record(held);
  ASSERT_TRUE(parse_side_record(good));
  for (std::string bad : {
         std::string(""),
         std::string("garbage"),
         std::string("dlock=2\ntoken=0123456789abcdef\n"),
         std::string("dlock=1\n"),                                         // no token
         std::string("dlock=1\ntoken=xyz\n"),                              // not a fingerprint
         good + "min_hold_ms=-5\n",                                        // a sign
         good + "lock_delay_ms=1e3\n",                                     // not decimal
         good + "min_hold_ms=" + std::to_string(max_policy_ms + 1) + "\n", // over a year
         good + "released=yes\n",
         good + "no equals sign\n",
         good + "node=" + std::string(65, 'n') + "\n",
         good + "pid=99999999999999999999\n",
         good + "command=" + std::string(lock::max_holder_record_bytes, 'x') + "\n",
       }) {
    EXPECT_FALSE(parse_side_record(bad)) << bad.substr(0, 80);
  }
}

TEST(Semaphore, CuratorsLeaseNamesInSequenceOrderJunkIgnored)
{
  std::string uuid = random_uuid();
  EXPECT_EQ(lease_prefix(uuid), "_c_" + uuid + "-lease-");
  std::vector<std::string> leases = sorted_leases(
    {"_c_" + uuid + "-lease-0000000003", "lease-0000000001", "junk-1", "lease-x",
     "lease-00000000012", "other-lease-0000000002", "_c_" + uuid + "-lease-000000000a"});
  EXPECT_EQ(leases,
            (std::vector<std::string>{"lease-0000000001", "_c_" + uuid + "-lease-0000000003"}));
  std::string record = lease_record(lock::HolderInfo::current("job"), "0123456789abcdef", 3);
  EXPECT_EQ(lease_limit(record), 3);
  EXPECT_EQ(parse_holder_record(record).command, "job");
  EXPECT_EQ(lease_limit("10.0.0.1"), 0);                // a Curator lease: its client's address
  EXPECT_EQ(lease_limit("dlock=1\nkind=limit:1\n"), 0); // not a semaphore
  EXPECT_EQ(lease_limit("dlock=1\nkind=shared\n"), 0);
}

TEST(Barrier, PartiesCuratorsFirstThenDlocksBySequence)
{
  std::string uuid = random_uuid();
  std::vector<std::string> parties = sorted_parties(
    {"_c_" + uuid + "-party-0000000005", "ready", "dlock.latch",
     "0f8fad5b-d9cb-469f-a165-70867728950e", "_c_" + uuid + "-party-0000000002",
     "_c_" + uuid + "-lock-0000000001", "junk", "0f8fad5b-d9cb-469f-a165-7086772895"});
  ASSERT_EQ(parties.size(), 3u);
  EXPECT_EQ(parties[0], "0f8fad5b-d9cb-469f-a165-70867728950e");
  EXPECT_EQ(parties[1], "_c_" + uuid + "-party-0000000002");
  EXPECT_EQ(parties[2], "_c_" + uuid + "-party-0000000005");
}

TEST(Latch, RecordRoundTripsAndAnotherTenantsIsNone)
{
  std::optional<LatchRecord> record = parse_latch_record(latch_record({7, 1700000000000}));
  ASSERT_TRUE(record);
  EXPECT_EQ(record->count, 7);
  EXPECT_EQ(record->expires_at, 1700000000000);
  EXPECT_FALSE(parse_latch_record("count=7\nexpires_at=1\n"));
  EXPECT_FALSE(parse_latch_record("dlock=1\ncount=x\nexpires_at=1\n"));
  EXPECT_FALSE(parse_latch_record("dlock=1\ncount=1\n"));
  EXPECT_FALSE(parse_latch_record("dlock=1\ncount=1\nexpires_at=1\n" + std::string(5000, 'x')));
  EXPECT_EQ(record_number("dlock=1\nparties=3\n", "parties"), 3);
}

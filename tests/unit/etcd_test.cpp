#include "stores/etcd/api.hpp"

#include <gtest/gtest.h>

using namespace dlock;
using namespace dlock::etcd;

TEST(EtcdUrl, ParsesEndpointsUserAndDefaults)
{
  EtcdUrl url = parse_url("etcd://alice:s%40cret@10.0.0.1:2380,host2,[::1]:23791/");
  EXPECT_FALSE(url.tls);
  ASSERT_EQ(url.endpoints.size(), 3U);
  EXPECT_EQ(url.endpoints[0], "10.0.0.1:2380");
  EXPECT_EQ(url.endpoints[1], "host2:2379");
  EXPECT_EQ(url.endpoints[2], "[::1]:23791");
  EXPECT_EQ(url.user, "alice");
  EXPECT_EQ(url.password, "s@cret");
  EXPECT_EQ(url.shown(), "etcd://10.0.0.1:2380,host2:2379,[::1]:23791");
  EXPECT_EQ(url.base(1), "http://host2:2379");
  EtcdUrl tls = parse_url("etcds://h:1");
  EXPECT_TRUE(tls.tls);
  EXPECT_EQ(tls.base(0), "https://h:1");
  EXPECT_FALSE(tls.user);
  EXPECT_TRUE(is_etcd_url("etcds://x"));
  EXPECT_FALSE(is_etcd_url("redis://x"));
}

TEST(EtcdUrl, RejectsMistakesAsUsageErrors)
{
  for (const char* bad : {"etcd://", "etcd://h:0", "etcd://h:99999", "etcd://h:x", "etcd://h:",
                          "etcd://[::1", "etcd://h:1,,h:2", "etcd://h:1/path", "etcd://u:%zz@h"}) {
    try {
      parse_url(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ExitCode::usage) << bad;
      EXPECT_EQ(std::string(error.what()).find("%zz@"), std::string::npos); // no password shown
    }
  }
}

TEST(EtcdApi, Base64RoundTrips)
{
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("dlock:a/694d7a"), "ZGxvY2s6YS82OTRkN2E=");
  std::string bytes;
  for (int i = 0; i < 256; ++i) {
    bytes += static_cast<char>(i);
  }
  EXPECT_EQ(base64_decode(base64_encode(bytes)), bytes);
  EXPECT_FALSE(base64_decode("Zm9v!"));
}

TEST(EtcdApi, KeysAreEtcdctlLocksOnePerLease)
{
  // etcdctl lock NAME puts NAME/<lease in hex>: dlock's PFX is --prefix + the name
  EXPECT_EQ(lock_prefix("dlock:", "jobs"), "dlock:jobs/");
  EXPECT_EQ(lock_key("jobs/", 0x694d7a2b1c3d4e5f), "jobs/694d7a2b1c3d4e5f");
  EXPECT_TRUE(is_lock_key("jobs/694d7a", "jobs/"));
  EXPECT_FALSE(is_lock_key("jobs/", "jobs/"));
  EXPECT_FALSE(is_lock_key("jobs/b/694d", "jobs/")); // a key of the lock "jobs/b"
  EXPECT_FALSE(is_lock_key("jobs2/694d", "jobs/"));
}

TEST(EtcdApi, IntegersComeAsStringsOrNumbersOrNotAtAll)
{
  Json body = Json::parse(R"({"ID":"7587869","TTL":2,"header":{"revision":"102"}})");
  EXPECT_EQ(int_field(body, "ID"), 7587869);
  EXPECT_EQ(int_field(body, "TTL"), 2);
  EXPECT_EQ(int_field(body, "missing"), 0);
  EXPECT_EQ(int_field(body["header"], "revision"), 102);
  EXPECT_EQ(grant_request(3).dump(), R"({"TTL":"3"})");
  EXPECT_EQ(lease_request(-5).dump(), R"({"ID":"-5"})");
}

TEST(EtcdApi, AcquireTransactionPutsIfAbsentAndReadsTheQueue)
{
  Json txn = acquire_txn("p/a", "v", 10, "p/");
  EXPECT_EQ(txn["compare"][0]["target"], "CREATE");
  EXPECT_EQ(txn["compare"][0]["create_revision"], "0");
  EXPECT_EQ(txn["success"][0]["request_put"]["lease"], "10");
  EXPECT_EQ(txn["success"][0]["request_put"]["key"], base64_encode("p/a"));
  EXPECT_EQ(txn["success"][1]["request_range"]["range_end"], base64_encode("p0"));
  EXPECT_EQ(txn["success"][1]["request_range"]["sort_target"], "CREATE");
  EXPECT_EQ(txn["failure"][0]["request_range"]["key"], base64_encode("p/a"));
  Json watch = watch_deletes_request("k", 12);
  EXPECT_EQ(watch["create_request"]["start_revision"], "12");
  EXPECT_EQ(watch["create_request"]["filters"][0], "NOPUT");
}

TEST(EtcdApi, ReadsTheQueueOfATransactionAnswer)
{
  std::string holder = holder_value(
    lock::HolderInfo{"h", 42, "u", "sleep 1", 1000, 0, 5000, "", ""}, token_fingerprint("t"));
  Json answer = {
    {"header", {{"revision", "9"}}},
    {"succeeded", true},
    {"responses",
     Json::array(
       {Json::object({{"response_put", Json::object()}}),
        {{"response_range",
          {{"kvs",
            Json::array({{{"key", base64_encode("p/1a")},
                          {"create_revision", "5"},
                          {"lease", "26"},
                          {"value", base64_encode(holder)}},
                         {{"key", base64_encode("p/x/2")}, {"create_revision", "6"}},
                         {{"key", base64_encode("p/2b")}, {"create_revision", "9"}}})}}}}})}};
  const Json* range = txn_range(answer, 1);
  ASSERT_NE(range, nullptr);
  std::vector<KeyValue> keys = lock_keys(*range, "p/");
  ASSERT_EQ(keys.size(), 2U);
  EXPECT_EQ(keys[0].lease, 26);
  EXPECT_EQ(keys[1].create_revision, 9);
  lock::HolderInfo who = holder_of(keys[0]);
  EXPECT_EQ(who.host, "h");
  EXPECT_EQ(who.pid, 42);
  EXPECT_EQ(who.fence, 5);
  EXPECT_EQ(fingerprint_of(keys[0]), token_fingerprint("t"));
  EXPECT_EQ(holder_of(keys[1]).command, "etcdctl lock (lease 0)"); // an empty value
  EXPECT_EQ(txn_range(answer, 0), nullptr);
}

TEST(EtcdApi, ErrorsMapToExitCodes)
{
  auto code = [](long status, const char* body) {
    std::optional<Error> error = answer_error(status, Json::parse(body, nullptr, false), "etcd");
    return error ? error->code() : ExitCode::ok;
  };
  EXPECT_EQ(code(200, R"({"header":{}})"), ExitCode::ok);
  EXPECT_EQ(
    code(400,
         R"({"error":"etcdserver: authentication failed, invalid user ID or password","code":3})"),
    ExitCode::auth);
  EXPECT_EQ(code(403, R"({"error":"etcdserver: permission denied","code":7})"), ExitCode::auth);
  EXPECT_EQ(code(503, R"({"error":"etcdserver: no leader","code":14})"), ExitCode::unavailable);
  EXPECT_EQ(code(404, "<html>not found</html>"), ExitCode::unavailable);
  EXPECT_EQ(code(500, R"({"error":"something odd","code":13})"), ExitCode::internal);
  EXPECT_TRUE(
    lease_not_found(Json::parse(R"({"error":"etcdserver: requested lease not found","code":5})")));
  EXPECT_TRUE(token_invalid(Json::parse(R"({"error":"etcdserver: invalid auth token","code":3})")));
}

TEST(EtcdApi, AStreamErrorObjectIsAnErrorNotACrash)
{
  Json stream = Json::parse(
    R"({"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader","http_status":"Service Unavailable"}})");
  std::optional<Error> error = answer_error(500, stream, "etcd");
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code(), ExitCode::unavailable);
  EXPECT_NE(std::string(error->what()).find("no leader"), std::string::npos);
  Json odd = Json::parse(R"({"error":[1,2],"message":7,"code":"x"})");
  ASSERT_TRUE(answer_error(500, odd, "etcd"));
  EXPECT_FALSE(lease_not_found(odd));
  EXPECT_FALSE(token_invalid(stream));
}

TEST(EtcdApi, AnotherTenantsValueIsReadCheckedAndCapped)
{
  KeyValue kv;
  kv.lease = 0x1f;
  kv.value = R"({"host":5,"user":["x"],"command":{"a":1},"pid":"abc","token":7})";
  EXPECT_EQ(holder_of(kv).command, "not dlock (lease 1f)"); // fields of other types
  EXPECT_EQ(holder_of(kv).host, "");
  EXPECT_EQ(fingerprint_of(kv), "");
  kv.value = R"({"host":"h","pid":-4})";
  EXPECT_EQ(holder_of(kv).command, "not dlock (lease 1f)"); // a number dlock would not write
  kv.value = R"({"host":"h","pid":4,"user":"u","command":"c","acquired_ms":"5","token":"ab"})";
  EXPECT_EQ(holder_of(kv).describe(), "u@h pid 4 (c)");
  EXPECT_EQ(holder_of(kv).acquired_ms, 5);
  EXPECT_EQ(fingerprint_of(kv), "ab");
  kv.value = R"({"host":"h","token":")" + std::string(lock::max_holder_record_bytes, 'f') + R"("})";
  EXPECT_EQ(holder_of(kv).command, "not dlock (lease 1f)"); // longer than a record
  EXPECT_EQ(fingerprint_of(kv), "");
  EXPECT_EQ(string_field(Json::parse("[1]"), "x"), "");
  EXPECT_FALSE(bool_field(Json::parse(R"({"canceled":"true"})"), "canceled"));
  EXPECT_TRUE(bool_field(Json::parse(R"({"canceled":true})"), "canceled"));
}

TEST(EtcdApi, SideKeysLieOutsideEveryLocksQueue)
{
  EXPECT_EQ(side_key("dlock:", "jobs", "delay"), "dlock:jobs#delay");
  // a name with '/' (or '%') is escaped: no lock name's PFX/ ("dlock:a/") holds its side keys
  EXPECT_EQ(side_key("dlock:", "a/b", "replace"), "dlock:a%2Fb#replace");
  EXPECT_EQ(side_key("dlock:", "a%2Fb", "newest"), "dlock:a%252Fb#newest");
  EXPECT_FALSE(side_key("dlock:", "a/b", "delay").starts_with(lock_prefix("dlock:", "a")));
  EXPECT_FALSE(is_lock_key(side_key("dlock:", "jobs", "delay"), lock_prefix("dlock:", "jobs")));
}

TEST(EtcdApi, AWaitersWatchTakesInTheDelayKeyWhenItSortsJustBeforeTheQueue)
{
  std::optional<Json> wide = watch_queue_and_delay_request(lock_prefix("dlock:", "jobs"),
                                                           side_key("dlock:", "jobs", "delay"), 7);
  ASSERT_TRUE(wide);
  const Json& create = (*wide)["create_request"];
  EXPECT_EQ(base64_decode(create["key"].get<std::string>()), "dlock:jobs#delay");
  EXPECT_EQ(base64_decode(create["range_end"].get<std::string>()), "dlock:jobs0"); // after PFX/
  EXPECT_EQ(create["start_revision"], "7");
  EXPECT_FALSE(create.contains("filters")); // the puts of #delay too
  // a name with '/' or '%': its #delay lies elsewhere (escaped), no one range holds both
  EXPECT_FALSE(watch_queue_and_delay_request(lock_prefix("dlock:", "a/b"),
                                             side_key("dlock:", "a/b", "delay"), 7));
  EXPECT_FALSE(watch_queue_and_delay_request(lock_prefix("dlock:", "a%b"),
                                             side_key("dlock:", "a%b", "delay"), 7));
}

TEST(EtcdApi, TheNoteAndThePoliciesFieldsGoInTheRecord)
{
  lock::HolderInfo holder{"h", 42, "u", "sleep", 1000, 0, 5000, "deploy \"42\" — ü", ""};
  KeyValue kv;
  kv.lease = 7;
  kv.value = holder_value(holder, "ab", {{"hold_lease", "99"}, {"ended", 1}});
  EXPECT_EQ(holder_of(kv).note, holder.note);
  EXPECT_EQ(fingerprint_of(kv), "ab");
  ASSERT_TRUE(dlock_holder_of(kv));
  Json record = record_of(kv);
  EXPECT_EQ(int_field(record, "hold_lease"), 99);
  EXPECT_EQ(int_field(record, "ended"), 1);
  kv.value = with_fields(record, {{"ended", 0}});
  EXPECT_EQ(int_field(record_of(kv), "ended"), 0);
  EXPECT_EQ(holder_of(kv).note, holder.note);
  // no note: no field
  holder.note.clear();
  EXPECT_EQ(Json::parse(holder_value(holder, "ab")).count("note"), 0U);
  // a record that is not dlock's: no record, no holder
  kv.value = "[1]";
  EXPECT_TRUE(record_of(kv).is_null());
  EXPECT_FALSE(dlock_holder_of(kv));
  kv.value = std::string(lock::max_holder_record_bytes + 1, ' ');
  EXPECT_TRUE(record_of(kv).is_null());
}

TEST(EtcdApi, TransactionsOfThePolicies)
{
  Json txn = txn_request(Json::array({create_revision_is("p/a", 12)}),
                         Json::array({put_op("p/a", "v", 5), range_op("p#delay")}));
  EXPECT_EQ(txn["compare"][0]["create_revision"], "12");
  EXPECT_EQ(txn["success"][0]["request_put"]["lease"], "5");
  EXPECT_EQ(txn["success"][1]["request_range"]["key"], base64_encode("p#delay"));
  EXPECT_TRUE(txn["failure"].empty());
  EXPECT_TRUE(txn_succeeded(Json::parse(R"({"succeeded":true})")));
  EXPECT_FALSE(txn_succeeded(Json::parse(R"({"header":{}})")));
  Json acquire = acquire_txn("p/a", "v", 10, "p/", {"p#delay", "p#replace"});
  EXPECT_EQ(acquire["success"].size(), 4U);
  EXPECT_EQ(acquire["failure"][3]["request_range"]["key"], base64_encode("p#replace"));
}

TEST(EtcdApi, TheQueueHasEveryRecipesKeysAndTheirKinds)
{
  lock::HolderInfo who{"h", 42, "u", "sleep 1", 1000, 0, 5000, "", ""};
  std::string fp = token_fingerprint("t");
  auto kv = [](std::string key, std::string value, int revision) {
    return Json{{"key", base64_encode(key)},
                {"value", base64_encode(value)},
                {"create_revision", std::to_string(revision)},
                {"lease", "7"}};
  };
  Json range = {
    {"kvs", Json::array({
              kv("p/read/1a", holder_value(who, fp, kind_fields(lock::LockKind::shared())), 1),
              kv("p/read/2b", "", 2),                    // the recipes' reader
              kv("p/read/3c", holder_value(who, fp), 3), // the exclusive lock p/read
              kv("p/write/1700000000000000000", "", 4),  // the recipes' writer
              kv("p/4d", "", 5),                         // etcdctl lock
              kv("p/5e", holder_value(who, fp, {{"kind", "limit:3"}}), 6), // a slot (of a bad mix)
              kv("p/read/zz", "", 7),                                      // not the layout
              kv("p/6f", holder_value(who, fp, {{"kind", "limit:x"}}), 8), // a bad N: exclusive
            })}};
  std::vector<Member> queue = queue_of(range, "p/");
  ASSERT_EQ(queue.size(), 6U);
  EXPECT_EQ(queue[0].kind, lock::LockKind::shared());
  EXPECT_EQ(queue[1].kind, lock::LockKind::shared());
  EXPECT_EQ(queue[2].kind, lock::LockKind::exclusive()); // the writer
  EXPECT_EQ(queue[3].kind, lock::LockKind::exclusive()); // etcdctl's
  EXPECT_EQ(queue[4].kind, lock::LockKind::semaphore(3));
  EXPECT_EQ(queue[5].kind, lock::LockKind::exclusive());
  EXPECT_EQ(holders_of(queue), 2U); // the readers before the first writer
  EXPECT_FALSE(kinds_mix(queue[4].kind, queue[0].kind));
  EXPECT_TRUE(kinds_mix(queue[0].kind, queue[2].kind));
  EXPECT_TRUE(kinds_mix(lock::LockKind::semaphore(3), lock::LockKind::semaphore(3)));
  EXPECT_FALSE(kinds_mix(lock::LockKind::semaphore(3), lock::LockKind::semaphore(2)));
  EXPECT_EQ(read_key("p/", 0x1a), "p/read/1a");
  EXPECT_EQ(kind_fields(lock::LockKind::exclusive()), Json::object());
}

TEST(EtcdElect, ACandidatesKeyHoldsItsValueAndItsRecordLiesBesideIt)
{
  lock::HolderInfo who{"h", 42, "u", "sleep", 1000, 0, 5000, "", "10.0.0.1:80"};
  std::string record = holder_value(who, "ab");
  EXPECT_EQ(Json::parse(record)["value"], "10.0.0.1:80");
  std::string records = records_prefix_of("dlock:", "a/b");
  EXPECT_EQ(records, "dlock:a%2Fb#elect:");
  EXPECT_EQ(record_key(records, "dlock:a/b/694d"), "dlock:a%2Fb#elect:694d");
  // outside every queue: etcdctl elect -l dlock:a/b (and every other name) never sees it
  EXPECT_FALSE(record_key(records, "dlock:a/b/694d").starts_with(lock_prefix("dlock:", "a/b")));
  EXPECT_FALSE(record_key(records, "dlock:a/b/694d").starts_with(lock_prefix("dlock:", "a")));
  Json puts = record_puts("dlock:a/b/694d", record, 7, records);
  ASSERT_EQ(puts.size(), 2U);
  EXPECT_EQ(puts[0]["request_put"]["key"], base64_encode("dlock:a/b/694d"));
  EXPECT_EQ(puts[0]["request_put"]["value"], base64_encode("10.0.0.1:80"));
  EXPECT_EQ(puts[1]["request_put"]["key"], base64_encode("dlock:a%2Fb#elect:694d"));
  EXPECT_EQ(puts[1]["request_put"]["value"], base64_encode(record));
  EXPECT_EQ(puts[1]["request_put"]["lease"], "7");
  // not a candidate (dlock run): the record is the key's value, as it always was
  who.value.clear();
  EXPECT_EQ(record_puts("p/1", holder_value(who, "ab"), 7, records).size(), 1U);
  // the acquisition's transaction: the record put last, after the reads of the queue, the side
  // keys and the records (the same places in both branches)
  Json txn = acquire_txn("p/1", record, 7, "p/", {"p#delay"}, "p#elect:");
  ASSERT_EQ(txn["success"].size(), 5U);
  EXPECT_EQ(txn["success"][0]["request_put"]["value"], base64_encode("10.0.0.1:80"));
  EXPECT_EQ(txn["success"][3]["request_range"]["key"], base64_encode("p#elect:"));
  EXPECT_EQ(txn["failure"][3]["request_range"]["key"], base64_encode("p#elect:"));
  EXPECT_EQ(txn["success"][4]["request_put"]["key"], base64_encode("p#elect:1"));
}

TEST(EtcdElect, AKeyReadsWithItsRecordOnlyWhenTheRecordIsItsOwn)
{
  lock::HolderInfo who{"h", 42, "u", "sleep", 1000, 0, 5000, "", "v1"};
  KeyValue key{.key = "p/1a", .value = "v1", .create_revision = 9, .mod_revision = 9, .lease = 26};
  KeyValue record{.key = "p#elect:1a", .value = holder_value(who, "ab"), .lease = 26};
  KeyValue merged = with_record(key, {record}, "p#elect:");
  lock::HolderInfo holder = holder_of(merged);
  EXPECT_EQ(holder.host, "h");
  EXPECT_EQ(holder.value, "v1");
  EXPECT_EQ(holder.fence, 9); // the key's create revision, not the record's
  EXPECT_EQ(fingerprint_of(merged), "ab");
  // on another lease, of another key, or saying another value: not the key's record
  KeyValue other = record;
  other.lease = 27;
  EXPECT_EQ(with_record(key, {other}, "p#elect:").value, "v1");
  other = record;
  other.key = "p#elect:1b";
  EXPECT_EQ(with_record(key, {other}, "p#elect:").value, "v1");
  key.value = "v2";
  EXPECT_EQ(with_record(key, {record}, "p#elect:").value, "v2");
  // a record whose value is not printable is not dlock's
  who.value = "v\x1b[2J";
  key.value = who.value;
  record.value = holder_value(who, "ab");
  EXPECT_EQ(with_record(key, {record}, "p#elect:").value, key.value);
  // the queue of a range answer with the records read beside it
  key.value = "v1";
  who.value = "v1";
  record.value = holder_value(who, "ab");
  auto json_of = [](const KeyValue& kv) {
    return Json{{"key", base64_encode(kv.key)},
                {"value", base64_encode(kv.value)},
                {"create_revision", std::to_string(kv.create_revision)},
                {"lease", std::to_string(kv.lease)}};
  };
  Json range = {{"kvs", Json::array({json_of(key)})}};
  Json records = {{"kvs", Json::array({json_of(record)})}};
  std::vector<Member> queue = queue_of(range, "p/", &records, "p#elect:");
  ASSERT_EQ(queue.size(), 1U);
  EXPECT_EQ(holder_of(queue[0].kv).pid, 42);
  EXPECT_EQ(holder_of(queue_of(range, "p/")[0].kv).command, "not dlock (lease 1a)");
}

TEST(EtcdElect, AnotherClientsProposalIsShownCheckedAndCapped)
{
  // etcdctl elect NAME PROPOSAL: not dlock, proclaiming its proposal, its term the revision
  KeyValue kv{.key = "p/1f", .value = "10.0.0.2:80", .create_revision = 12, .lease = 0x1f};
  lock::HolderInfo holder = holder_of(kv);
  EXPECT_EQ(holder.command, "not dlock (lease 1f)");
  EXPECT_EQ(holder.value, "10.0.0.2:80");
  EXPECT_EQ(holder.fence, 12);
  EXPECT_EQ(proposal_of(std::string(1000, 'x')), std::string(lock::max_holder_field_bytes, 'x'));
  EXPECT_EQ(proposal_of("a\nb"), "");
  EXPECT_EQ(proposal_of("\xff\xfe"), "");
  EXPECT_EQ(proposal_of("ü"), "ü");
  EXPECT_EQ(holder_of(KeyValue{.key = "p/1", .value = "", .lease = 1}).value, "");
  // dlock's own record with an oversized value: not a dlock holder
  kv.value = R"({"host":"h","pid":4,"value":")" + std::string(300, 'v') + R"("})";
  EXPECT_FALSE(dlock_holder_of(kv));
  EXPECT_EQ(holder_of(kv).command, "not dlock (lease 1f)");
  // a leader watcher's watch: every change under the prefix, deletions too
  Json watch = watch_prefix_request("p/", 13);
  EXPECT_EQ(watch["create_request"]["range_end"], base64_encode("p0"));
  EXPECT_FALSE(watch["create_request"].contains("filters"));
  EXPECT_EQ(watch["create_request"]["start_revision"], "13");
}

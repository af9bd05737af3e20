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
  std::string holder = holder_value(lock::HolderInfo{"h", 42, "u", "sleep 1", 1000, 0, 5000, ""},
                                    token_fingerprint("t"));
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

#pragma once

#include "lock/holder.hpp"
#include "lock/kind.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// etcd v3's JSON gateway (the grpc-gateway every etcd server serves beside gRPC): the URL,
// the request bodies and what the answers mean, with no I/O, so that they are unit-tested.
namespace dlock::etcd {

using Json = nlohmann::json;

// One etcd://[user[:password]@]host[:port][,host[:port]…] URL (etcds:// for TLS).
struct EtcdUrl {
  bool tls = false;
  std::vector<std::string> endpoints; // "host:port" ("[::1]:2379" for IPv6), in order
  std::optional<std::string> user;
  std::optional<std::string> password;

  // "etcd://host:port,host:port" with no user information, for messages.
  std::string shown() const;
  // The base of endpoint i's requests: "http://host:port".
  std::string base(std::size_t i) const;
};

// Whether a URL names etcd (etcd://, etcds://).
bool is_etcd_url(std::string_view url);
// Parses url; throws Error(usage) naming what is wrong (a port, an empty host).
EtcdUrl parse_url(std::string_view url);

// The gateway's encoding of keys and values.
std::string base64_encode(std::string_view bytes);
// nullopt when text is not base64.
std::optional<std::string> base64_decode(std::string_view text);

// An int64 field, which the gateway writes as a string (or leaves out when 0); 0 when it is
// of another type or not a number (values come from other tenants of the store too).
std::int64_t int_field(const Json& object, const char* name);
// A string field; "" when it is missing or of another type (a number, an array, an object).
std::string string_field(const Json& object, const char* name);
// A boolean field; false when it is missing or of another type.
bool bool_field(const Json& object, const char* name);
// Whether a watch response ends its watch: compacted past its start, or canceled by the
// server. Its watcher then reads afresh and watches anew.
bool watch_ended(const Json& result);

// The most dlock reads of one answer of the gateway (a lock's keys with their values), or of
// one message of a watch: past it the transfer stops and fails (69), so that another tenant's
// keys under the prefix cannot make dlock take memory without bound.
inline constexpr std::size_t max_answer_bytes = std::size_t{8} << 20;

// Where a lock name's keys are, the same as `etcdctl lock PFX`: PFX/<lease ID in hex>, with
// PFX = dlock's --prefix followed by the name (man dlock, ETCD).
std::string lock_prefix(std::string_view prefix, std::string_view name);
std::string lock_key(std::string_view lock_prefix, std::int64_t lease);
// Whether key is one of the lock keys under lock_prefix (PFX/hex), not a key of a longer name
// ("a/b/…" lies under "a/" too).
bool is_lock_key(std::string_view key, std::string_view lock_prefix);
// A shared (read) holder's key, PFX/read/<lease ID in hex>: the recipes' RWMutex puts its
// readers under PFX/read, where etcdctl lock (which waits for every key under PFX/) sees them.
std::string read_key(std::string_view lock_prefix, std::int64_t lease);

// A key as a range answer gives it.
struct KeyValue {
  std::string key;
  std::string value;
  std::int64_t create_revision = 0;
  std::int64_t mod_revision = 0;
  std::int64_t lease = 0;
};
KeyValue key_value(const Json& kv);
// The kvs of a range answer.
std::vector<KeyValue> key_values(const Json& range_response);

// One key of a lock name's queue and how it holds: PFX/<hex> is etcdctl lock's or dlock's
// (exclusive, or a slot of a semaphore when dlock's record says "limit:N"), PFX/read/<hex> a
// reader (dlock --shared, the recipes' RWMutex), PFX/write/<hex> the recipes' writer.
struct Member {
  KeyValue kv;
  lock::LockKind kind;
};
// How key kv holds lock_prefix's name, or nullopt when it is not of its queue (a longer name's
// key: dlock's record of another kind under PFX/read/ is the lock NAME/read's).
std::optional<lock::LockKind> member_kind(const KeyValue& kv, std::string_view lock_prefix);
// The members of a range answer (or the acquire transaction's), oldest first; with records
// (a range answer of records_prefix), each candidate's key with its record (with_record).
std::vector<Member> queue_of(const Json& range_response, const std::string& lock_prefix,
                             const Json* records = nullptr, std::string_view records_prefix = {});
// Whether two kinds may share one name: exclusive and shared make a read/write lock; a
// semaphore shares it with the same N only.
bool kinds_mix(const lock::LockKind& a, const lock::LockKind& b);
// How many members at the head of queue hold the name now: one exclusive, the shared ones
// before the first exclusive, or a semaphore's first N.
std::size_t holders_of(const std::vector<Member>& queue);
// The fields a record of kind carries ("kind" for shared and limit:N; none for exclusive, so
// that an exclusive holder's record is as it always was).
Json kind_fields(const lock::LockKind& kind);

// Request bodies.
Json grant_request(std::int64_t ttl_s);
Json lease_request(std::int64_t lease); // keepalive, revoke, timetolive
// Puts key (with lease) if it does not exist, else reads it; either way reads every key under
// lock_prefix by create revision, then each of side_keys, then (records_prefix given) every
// candidate's record, in the same transaction. With records_prefix, value is put as
// record_puts does (a candidate's record goes beside the key, put last).
Json acquire_txn(const std::string& key, const std::string& value, std::int64_t lease,
                 const std::string& lock_prefix, const std::vector<std::string>& side_keys = {},
                 const std::string& records_prefix = {});
// Every key under prefix, oldest create revision first.
Json range_prefix_request(const std::string& prefix);
Json range_key_request(const std::string& key);
// A watch of key's deletions from revision on.
Json watch_deletes_request(const std::string& key, std::int64_t start_revision);
// A watch of the deletions of every key under prefix from revision on (a semaphore's waiter:
// any earlier key's end may free a slot).
Json watch_prefix_deletes_request(const std::string& prefix, std::int64_t start_revision);
// A watch of every change from delay_key to the end of lock_prefix's range, from revision on,
// when delay_key sorts just before the queue (NAME#delay, NAME/…: a name with no '/' or '%'):
// a waiter sees a --lock-delay armed (a put of #delay) before the deletion that follows it,
// in one stream; nullopt for a name whose side keys lie elsewhere.
std::optional<Json> watch_queue_and_delay_request(const std::string& lock_prefix,
                                                  const std::string& delay_key,
                                                  std::int64_t start_revision);
// A watch of every change (put or deletion) of the keys under prefix from revision on (a
// leader watcher: the leader's key deleted or written, a candidate's key put).
Json watch_prefix_request(const std::string& prefix, std::int64_t start_revision);
Json authenticate_request(const std::string& user, const std::string& password);

// The lock keys (is_lock_key) of a range answer, or of the acquire transaction's, oldest first.
std::vector<KeyValue> lock_keys(const Json& range_response, const std::string& lock_prefix);
// The range answer inside a transaction's answer (response i of responses).
const Json* txn_range(const Json& txn_response, std::size_t i);

// What dlock stores as a lock key's value: the holder, and a fingerprint of its token so that
// `dlock renew`/`release --token` from another process can find its key.
// extra: more fields of the record (--min-hold's and --lock-delay's leases, a waiter's id).
std::string holder_value(const lock::HolderInfo& holder, const std::string& token_fingerprint,
                         const Json& extra = Json::object());
// The holder stored in value (etcdctl's keys have an empty value: "etcdctl lock"); a value
// that is not dlock's record (too long, not a JSON object) is shown as "not dlock", with the
// value as what it proclaims (proposal_of: etcdctl elect's proposal).
lock::HolderInfo holder_of(const KeyValue& kv);
// What another client's key proclaims (etcdctl elect's proposal is its value): the value when
// it is printable text (util::printable leaves it as it is), cut to max_holder_field_bytes;
// "" otherwise, so that no other tenant's bytes reach a terminal.
std::string proposal_of(std::string_view value);
// The holder in value when it is a record dlock could have written, else nullopt.
std::optional<lock::HolderInfo> dlock_holder_of(const KeyValue& kv);
std::string fingerprint_of(const KeyValue& kv);
// etcd's records carry 32 hex digits of the token's fingerprint.
std::string token_fingerprint(const std::string& token);

// The side keys of one lock name (--lock-delay, --replace, --supersede), outside its queue:
// PFX-without-slash with the name's '%' and '/' escaped, then "#delay", "#replace" or
// "#newest". No lock's queue (any name's PFX/) holds them, so `etcdctl lock` never waits on
// them, and list() passes them over.
std::string side_key(std::string_view prefix, std::string_view name, std::string_view kind);

// A lock name's history (dlock history): one key per event, history_prefix followed by 16 hex
// digits (random: reads order them by create revision), beside the side keys, outside every
// queue, all on the log's one lease (history_lease).
std::string history_prefix(std::string_view prefix, std::string_view name);
std::string history_key(std::string_view history_prefix, std::uint64_t id);
// Whether key is an event key of that log (another lock's keys may share its prefix).
bool is_history_key(std::string_view key, std::string_view history_prefix);
// The log's lease ID, the same in every process (a hash of its prefix, positive): a keepalive
// finds it with no read; the first event grants it.
std::int64_t history_lease(std::string_view history_prefix);
// The keys (without values) under prefix by create revision, newest or oldest first, at most
// limit; the answer's count says how many there are in all.
Json range_keys_request(const std::string& prefix, std::int64_t limit, bool newest_first);
// A grant of a lease with this ID (a keepalive of it found none).
Json grant_request(std::int64_t ttl_s, std::int64_t lease);

// dlock elect's candidates share etcdctl elect's layout (concurrency.Election, whose leader is
// the oldest key under PFX/ and whose value is the proposal): a candidate's key holds its plain
// --value, and its holder record lies beside it, outside every queue (so that `etcdctl elect
// -l` never sees it), on the same lease: PFX-less-slash#elect:<the key's lease hex>.
std::string records_prefix_of(std::string_view prefix, std::string_view name);
// The record key of lock key key (its last part, the lease hex, after records_prefix).
std::string record_key(std::string_view records_prefix, std::string_view key);
// The puts that store record (a holder_value) as key's on lease: a candidate's (a record with
// a "value") as that value at key and the record at its record_key; any other as key's value.
Json record_puts(const std::string& key, const std::string& record, std::int64_t lease,
                 std::string_view records_prefix);
// kv with its candidate's record in place of its value, when records (of records_prefix) hold
// one for it: at its record_key, on its lease, whose value is kv's; else kv as it is.
KeyValue with_record(KeyValue kv, const std::vector<KeyValue>& records,
                     std::string_view records_prefix);

// One operation of a transaction, and a comparison guarding it.
Json put_op(const std::string& key, const std::string& value, std::int64_t lease);
Json range_op(const std::string& key);
// Deletes key; the answer keeps what it was (txn_deleted).
Json delete_op(const std::string& key);
// The keys that a transaction's delete (response i of responses) removed, as they were.
std::vector<KeyValue> txn_deleted(const Json& txn_response, std::size_t i);
// key's create revision is revision (0: the key does not exist).
Json create_revision_is(const std::string& key, std::int64_t revision);
// A transaction: when every compare holds, success runs, else failure.
Json txn_request(Json compare, Json success, Json failure = Json::array());
// Whether a transaction's answer says its compares held.
bool txn_succeeded(const Json& txn_response);

// A dlock record's JSON object (a lock key's or a side key's value), or null when it is not one
// dlock could have written (larger than max_holder_record_bytes, not an object).
Json record_of(const KeyValue& kv);
// record with its integer or string fields in extra set, as it is stored again.
std::string with_fields(const Json& record, const Json& extra);

// The error an etcd answer carries (HTTP status and body), or nullopt when it is a success:
// authentication → 77, unavailable → 69, anything else → 70. where names the server.
std::optional<Error> answer_error(long http_status, const Json& body, const std::string& where);
// Whether body is the gateway's "the auth token expired or is unknown" (authenticate again).
bool token_invalid(const Json& body);
// Whether body is "requested lease not found" (404 / code 5).
bool lease_not_found(const Json& body);

} // namespace dlock::etcd

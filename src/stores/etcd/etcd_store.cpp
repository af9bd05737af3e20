#include "stores/etcd/etcd_store.hpp"

#include "lock/features.hpp"
#include "util/log.hpp"
#include "util/random.hpp"

#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

namespace dlock::etcd {

using lock::Outcome;
using util::Millis;

namespace {

// The longest a waiter waits for a wake-up before it asks again (renewing its lease then).
constexpr Millis longest_block{30'000};

// etcd leases are whole seconds: a TTL rounds up (etcd itself raises one below its minimum).
std::int64_t lease_seconds(Millis ttl)
{
  return std::max<std::int64_t>(1, (ttl.count() + 999) / 1000);
}

// A keepalive's answer: the lease's TTL after it, 0 when the lease is gone.
std::int64_t kept_ttl(const Json& body)
{
  return int_field(body.is_object() && body.contains("result") ? body["result"] : body, "TTL");
}

std::int64_t header_revision(const Json& body)
{
  return body.is_object() && body.contains("header") ? int_field(body["header"], "revision") : 0;
}

// The one key a range answer found, if any.
std::optional<KeyValue> one_key(const Json* range)
{
  if (range == nullptr) {
    return std::nullopt;
  }
  std::vector<KeyValue> kvs = key_values(*range);
  if (kvs.size() != 1) {
    return std::nullopt;
  }
  return kvs.front();
}

// A side key that dlock honours: a record dlock could have written, on a lease (so it ends);
// anything else another tenant wrote there is passed over.
std::optional<lock::HolderInfo> live_side(const std::optional<KeyValue>& kv)
{
  if (!kv || kv->lease == 0 || fingerprint_of(*kv).empty()) {
    return std::nullopt;
  }
  return dlock_holder_of(*kv);
}

// A transaction of reads only.
Json reads(const std::vector<Json>& ops) { return txn_request(Json::array(), Json(ops)); }

Json range_prefix_op(const std::string& prefix)
{
  return {{"request_range", range_prefix_request(prefix)}};
}

// The key a transaction's range i found, with its candidate's record from range j (read in the
// same transaction: record_key).
std::optional<KeyValue> key_with_record(const Json& txn_response, std::size_t i, std::size_t j,
                                        std::string_view records_prefix)
{
  std::optional<KeyValue> kv = one_key(txn_range(txn_response, i));
  std::optional<KeyValue> record = one_key(txn_range(txn_response, j));
  if (kv && record) {
    return with_record(std::move(*kv), {*record}, records_prefix);
  }
  return kv;
}

// A lease's remaining TTL in a timetolive answer, in ms (0 when gone or not known).
Millis left_of(const Answer& a)
{
  std::int64_t ttl = a.error ? 0 : int_field(a.body, "TTL");
  return Millis(std::max<std::int64_t>(0, ttl) * 1000);
}

} // namespace

std::unique_ptr<lock::Store> open(const std::string& url, const stores::StoreConfig& config)
{
  EtcdUrl parsed = parse_url(url);
  return std::make_unique<EtcdStore>(std::move(parsed), config.password, config.tls,
                                     config.request_timeout, config.prefix);
}

EtcdStore::EtcdStore(EtcdUrl url, std::optional<std::string> password, stores::TlsFiles tls,
                     Millis request_timeout, std::string prefix)
  : m_client(std::move(url), std::move(password), std::move(tls), request_timeout),
    m_prefix(std::move(prefix)), m_timeout(request_timeout), m_pid(::getpid())
{
}

const lock::StoreTraits& EtcdStore::traits() const noexcept
{
  static const lock::StoreTraits traits{
    .name = "etcd (etcd://)",
    .features = lock::features_of(lock::StoreKind::etcd),
    .loss_cause = "its etcd lease expired or was revoked, or its key was deleted",
  };
  return traits;
}

EtcdStore::~EtcdStore()
{
  if (::getpid() != m_pid) {
    return;
  }
  try {
    if (m_recording) { // a history event still being written: given till it is, or a time-out
      util::run_until(
        util::deadline_after(m_timeout),
        [this] {
          m_client.pump();
          return !m_recording;
        },
        [this](util::EventLoop& loop) { m_client.watch(loop); });
    }
    m_client.cancel_requests();
    for (auto& [name, mine] : m_mine) {
      if (mine.owner) {
        // Not released: a lock `dlock acquire` took outlives this process (renewed by token or
        // ended by its TTL), as do --min-hold and --lock-delay; a run releases before this.
        continue;
      }
      m_client.call("/v3/lease/revoke", lease_request(mine.lease), util::deadline_after(m_timeout));
    }
    for (auto& [name, gate] : m_gates) { // a barrier party's arrival goes with it
      if (gate.party_lease != 0) {
        m_client.call("/v3/lease/revoke", lease_request(gate.party_lease),
                      util::deadline_after(m_timeout));
      }
    }
  } catch (...) { // NOLINT(bugprone-empty-catch): the leases expire by themselves
  }
}

void EtcdStore::start_acquire(const lock::LockName& name, const lock::AcquireRequest& request)
{
  std::string key = name.str();
  auto found = m_mine.find(key);
  if (found != m_mine.end() && found->second.token != request.token) {
    std::int64_t lease = found->second.lease;
    forget(found);
    revoke(lease, [](Answer&) {});
    found = m_mine.end();
  }
  if (found == m_mine.end()) {
    grant(key, request);
    return;
  }
  Mine& mine = found->second;
  if (mine.owner) { // asked again (a retry after a lost answer): it is ours
    Outcome outcome{.op = Op::acquire};
    outcome.acquire.acquired = true;
    outcome.acquire.fence = mine.revision;
    m_answers.answer(std::move(outcome));
    return;
  }
  if (mine.takes_over && mine.before.empty()) {
    // Every key before ours is gone (the watch saw them go): ours is the oldest, and our key is
    // still there (it goes only with its lease, or the watch would have seen it go). What is
    // left of the lease since this waiter last kept it alive is the lease taken (the holder
    // renews it by then), with no round trip; when that is under half of it, a keepalive first.
    Millis ttl(mine.ttl_s * 1000);
    auto left = std::chrono::duration_cast<Millis>(mine.kept_at + ttl - util::monotonic_now());
    if (request.policy.min_hold <= Millis(0) && request.policy.lock_delay <= Millis(0)
        && left >= ttl / 2) {
      mine.takes_over = false;
      mine.validity = left;
      become_owner(key);
      return;
    }
    util::TimePoint sent = util::monotonic_now();
    m_client.post("/v3/lease/keepalive", lease_request(mine.lease),
                  [this, key, request, sent](Answer& a) {
                    if (a.error && !lease_not_found(a.body)) {
                      fail(Op::acquire, *a.error);
                      return;
                    }
                    auto queued = m_mine.find(key);
                    if (queued == m_mine.end()) {
                      return;
                    }
                    if (a.error || kept_ttl(a.body) <= 0) { // our key went with its lease
                      forget(queued);
                      grant(key, request);
                      return;
                    }
                    queued->second.takes_over = false;
                    queued->second.kept_at = sent;
                    arm(key, request);
                  });
    return;
  }
  // Queued: keep our place (the lease alive) and see who is first now, both at once (on two
  // connections): a waiter woken by its predecessor's deletion takes over after one round trip.
  mine.reading = true;
  mine.held.clear();
  std::string prefix = mine.prefix;
  std::vector<Json> ops{range_prefix_op(prefix)};
  for (const std::string& side : side_keys(key)) {
    ops.push_back(range_op(side));
  }
  ops.push_back(range_prefix_op(records_of(key)));
  struct Both {
    std::optional<Answer> kept, read;
  };
  auto both = std::make_shared<Both>();
  util::TimePoint sent = util::monotonic_now();
  auto decide_when_both = [this, key, request, prefix, both, sent]() {
    if (!both->kept || !both->read) {
      return;
    }
    Answer& a = *both->kept;
    if (a.error && !lease_not_found(a.body)) {
      fail(Op::acquire, *a.error);
      return;
    }
    auto queued = m_mine.find(key);
    if (queued == m_mine.end()) {
      return;
    }
    if (a.error || kept_ttl(a.body) <= 0) { // our key went with its lease: queue again
      forget(queued);
      grant(key, request);
      return;
    }
    queued->second.kept_at = sent;
    Answer& r = *both->read;
    const Json* range = txn_range(r.body, 0);
    if (!r.error && range == nullptr) {
      r.error = Error(ExitCode::internal, "etcd at {} answered a transaction without its range",
                      m_client.current());
    }
    if (r.error) {
      fail(Op::acquire, *r.error);
      return;
    }
    decide(key, request,
           queue_of(*range, prefix, txn_range(r.body, 1 + side_count), records_of(key)),
           sides_of(r.body, 1), header_revision(r.body));
  };
  // The read, the longer of the two, goes first: it gets the kept connection.
  m_client.post("/v3/kv/txn", reads(ops), [both, decide_when_both](Answer& r) {
    both->read = std::move(r);
    decide_when_both();
  });
  m_client.post("/v3/lease/keepalive", lease_request(mine.lease),
                [both, decide_when_both](Answer& a) {
                  both->kept = std::move(a);
                  decide_when_both();
                });
}

void EtcdStore::grant(const std::string& name, const lock::AcquireRequest& request)
{
  util::TimePoint sent = util::monotonic_now();
  m_client.post("/v3/lease/grant", grant_request(lease_seconds(request.ttl)),
                [this, name, request, sent](Answer& a) {
                  if (a.error) {
                    fail(Op::acquire, *a.error);
                    return;
                  }
                  Mine mine;
                  mine.token = request.token;
                  mine.prefix = lock_prefix(m_prefix, name);
                  mine.lease = int_field(a.body, "ID");
                  mine.ttl_s = int_field(a.body, "TTL");
                  mine.kept_at = sent;
                  mine.kind = request.kind;
                  mine.key = request.kind.mode == lock::LockKind::Mode::shared
                               ? read_key(mine.prefix, mine.lease)
                               : lock_key(mine.prefix, mine.lease);
                  mine.fingerprint = token_fingerprint(request.token);
                  mine.policy = request.policy;
                  if (mine.lease == 0) {
                    fail(Op::acquire, Error(ExitCode::internal, "etcd at {} granted no lease",
                                            m_client.current()));
                    return;
                  }
                  m_mine[name] = std::move(mine);
                  put_key(name, request);
                });
}

void EtcdStore::put_key(const std::string& name, const lock::AcquireRequest& request)
{
  Mine& mine = m_mine.at(name);
  mine.me = request.holder;
  mine.me.acquired_ms = util::unix_ms();
  mine.me.ttl_ms = request.ttl.count();
  m_client.post("/v3/kv/txn",
                acquire_txn(mine.key,
                            holder_value(mine.me, mine.fingerprint, kind_fields(mine.kind)),
                            mine.lease, mine.prefix, side_keys(name), records_of(name)),
                [this, name, request](Answer& a) {
                  auto found = m_mine.find(name);
                  if (found == m_mine.end()) {
                    return;
                  }
                  const Json* range = txn_range(a.body, 1);
                  if (!a.error && range == nullptr) {
                    a.error = Error(ExitCode::internal,
                                    "etcd at {} answered a transaction "
                                    "without its range",
                                    m_client.current());
                  }
                  if (a.error) {
                    std::int64_t lease = found->second.lease;
                    m_mine.erase(found);
                    revoke(lease, [](Answer&) {});
                    fail(Op::acquire, *a.error);
                    return;
                  }
                  decide(name, request,
                         queue_of(*range, found->second.prefix, txn_range(a.body, 2 + side_count),
                                  records_of(name)),
                         sides_of(a.body, 2), header_revision(a.body));
                });
}

std::vector<std::string> EtcdStore::side_keys(const std::string& name) const
{
  return {side_key(m_prefix, name, "delay"), side_key(m_prefix, name, "replace"),
          side_key(m_prefix, name, "newest")};
}

EtcdStore::Sides EtcdStore::sides_of(const Json& txn_response, std::size_t first)
{
  return Sides{.delay = one_key(txn_range(txn_response, first)),
               .replace = one_key(txn_range(txn_response, first + 1)),
               .newest = one_key(txn_range(txn_response, first + 2))};
}

void EtcdStore::decide(const std::string& name, const lock::AcquireRequest& request,
                       std::vector<Member> queue, const Sides& sides, std::int64_t revision)
{
  auto found = m_mine.find(name);
  if (found == m_mine.end()) {
    return;
  }
  Mine& mine = found->second;
  auto ours =
    std::find_if(queue.begin(), queue.end(), [&](const Member& m) { return m.kv.key == mine.key; });
  if (ours == queue.end()) { // revoked or expired while queued: queue again
    forget(found);
    grant(name, request);
    return;
  }
  mine.revision = ours->kv.create_revision;
  mine.watch_range = false;
  mine.reading = false;
  std::vector<Deletion> held = std::exchange(mine.held, {});
  Outcome outcome{.op = Op::acquire};
  lock::AcquireResult& result = outcome.acquire;
  // One name, one kind: a semaphore shares it with the same N only (nothing is registered).
  for (const Member& other : queue) {
    if (other.kv.key != mine.key && !kinds_mix(other.kind, mine.kind)) {
      result.kind_in_use = other.kind;
      std::int64_t lease = mine.lease;
      forget(found);
      revoke(lease, [this, outcome](Answer&) { m_answers.answer(outcome); });
      return;
    }
  }
  std::size_t index = static_cast<std::size_t>(ours - queue.begin());
  std::size_t holding = holders_of(queue);
  // Who this key waits for: the key just before it (exclusive); the last exclusive key before
  // it (shared: a waiting exclusive one goes first); any earlier key's end (a semaphore).
  bool enters = index < holding;
  if (!enters && mine.kind.mode == lock::LockKind::Mode::shared) {
    enters = std::none_of(queue.begin(), ours, [](const Member& m) {
      return m.kind.mode == lock::LockKind::Mode::exclusive;
    });
  }
  // --supersede: a waiter that a newer one announced itself after gives up, leaving nothing.
  if (request.policy.supersede && request.ticket.registered) {
    std::optional<lock::HolderInfo> newest = live_side(sides.newest);
    if (newest && sides.newest->lease != mine.lease
        && string_field(record_of(*sides.newest), "waiter") != request.ticket.waiter_id) {
      result.superseded_by = *newest;
      result.block = Millis(1000); // not waited on: the waiter gives up
      std::int64_t lease = mine.lease;
      forget(found);
      revoke(lease, [this, outcome](Answer&) { m_answers.answer(outcome); });
      return;
    }
  }
  if (enters) {
    // --lock-delay: a holder's lease ended without a release; its #delay key says until when.
    std::optional<lock::HolderInfo> delayed = live_side(sides.delay);
    if (delayed && fingerprint_of(*sides.delay) != mine.fingerprint) {
      result.lease = lock::AcquireResult::Lease::lock_delay;
      result.holder = *delayed;
      mine.predecessor = sides.delay->key;
      mine.watch_from = revision + 1;
      std::int64_t lease = sides.delay->lease;
      if (request.policy.supersede && !request.ticket.registered
          && request.ticket.mode != lock::WaitMode::once) { // it registers: announce it
        m_client.post(
          "/v3/kv/txn",
          txn_request(Json::array(),
                      Json::array({put_op(side_key(m_prefix, name, "newest"),
                                          holder_value(mine.me, mine.fingerprint,
                                                       {{"waiter", request.ticket.waiter_id}}),
                                          mine.lease)})),
          [this, name, request, outcome, lease](Answer&) {
            answer_shut(name, request, outcome, lease);
          });
        return;
      }
      answer_shut(name, request, std::move(outcome), lease);
      return;
    }
    m_client.cancel(std::exchange(mine.queue_watch, 0));
    arm(name, request);
    return;
  }
  const KeyValue& front = queue.front().kv;
  result.holder = holder_of(front);
  result.holders = static_cast<std::int64_t>(holding);
  mine.watch_from = revision + 1;
  mine.watch_range = false;
  mine.takes_over =
    mine.kind.mode == lock::LockKind::Mode::exclusive && !request.policy.replace
    && !request.policy.supersede && !live_side(sides.delay)
    && (request.ticket.mode == lock::WaitMode::wait || request.ticket.mode == lock::WaitMode::fair);
  mine.before.clear();
  if (mine.takes_over) {
    for (auto member = queue.begin(); member != ours; ++member) {
      mine.before.insert(member->kv.key);
    }
    for (const Deletion& gone : held) { // what the kept watch saw after this read
      if (gone.revision > revision) {
        take_deletion(mine, gone);
      }
    }
  } else {
    m_client.cancel(std::exchange(mine.queue_watch, 0));
  }
  if (mine.kind.mode == lock::LockKind::Mode::limit) {
    mine.predecessor = mine.prefix;
    mine.watch_range = true;
  } else if (mine.kind.mode == lock::LockKind::Mode::shared) {
    auto writer = std::find_if(std::make_reverse_iterator(ours), queue.rend(), [](const Member& m) {
      return m.kind.mode == lock::LockKind::Mode::exclusive;
    });
    mine.predecessor = writer->kv.key;
  } else {
    mine.predecessor = std::prev(ours)->kv.key;
  }
  std::string holder_fingerprint = fingerprint_of(front);
  bool dlock = !holder_fingerprint.empty() && dlock_holder_of(front).has_value();
  bool ended = dlock && int_field(record_of(front), "ended") != 0;
  result.lease = !dlock  ? lock::AcquireResult::Lease::no_expiry
                 : ended ? lock::AcquireResult::Lease::min_hold
                         : lock::AcquireResult::Lease::ends;
  if (mine.kind.mode == lock::LockKind::Mode::shared
      && queue.front().kind.mode == lock::LockKind::Mode::shared) {
    result.lease = lock::AcquireResult::Lease::writer_first; // readers hold, a writer waits
  }
  Json writes = Json::array();
  // --replace: ask a running dlock holder to stand down (its renewal reads this, which goes
  // with its lease).
  bool asking = request.policy.replace && dlock && !ended && holder_fingerprint != mine.fingerprint;
  if (asking) {
    writes.push_back(put_op(
      side_key(m_prefix, name, "replace"),
      holder_value(mine.me, mine.fingerprint, {{"target", holder_fingerprint}}), front.lease));
  }
  // --supersede: the first registration announces this waiter as the newest (on its own
  // lease); the older ones watch that key.
  bool announce = request.policy.supersede && !request.ticket.registered
                  && request.ticket.mode != lock::WaitMode::once;
  if (announce) {
    writes.push_back(put_op(
      side_key(m_prefix, name, "newest"),
      holder_value(mine.me, mine.fingerprint, {{"waiter", request.ticket.waiter_id}}), mine.lease));
  }
  std::int64_t ask = dlock ? front.lease : 0;
  if (writes.empty()) {
    answer_shut(name, request, std::move(outcome), ask);
    return;
  }
  // One write per request: a lease that ended meanwhile makes it fail, and nothing was asked.
  auto remaining = std::make_shared<std::size_t>(writes.size());
  auto shut = std::make_shared<Outcome>(std::move(outcome));
  for (std::size_t i = 0; i < writes.size(); ++i) {
    bool is_replace = asking && i == 0;
    m_client.post("/v3/kv/txn", txn_request(Json::array(), Json::array({writes[i]})),
                  [this, name, request, ask, remaining, shut, is_replace](Answer& w) {
                    if (is_replace && !w.error) {
                      shut->acquire.replace_asked = true;
                    }
                    if (--*remaining == 0) {
                      answer_shut(name, request, *shut, ask);
                    }
                  });
  }
}

void EtcdStore::answer_shut(const std::string& name, const lock::AcquireRequest& request,
                            Outcome outcome, std::int64_t lease)
{
  auto finish = [this, name, request](Outcome shut) {
    auto found = m_mine.find(name);
    if (found == m_mine.end()) {
      return;
    }
    Mine& mine = found->second;
    lock::AcquireResult& result = shut.acquire;
    if (request.ticket.mode == lock::WaitMode::once) {
      std::int64_t own = mine.lease;
      forget(found);
      revoke(own, [this, shut](Answer&) { m_answers.answer(shut); });
      return;
    }
    Millis cap = request.ticket.max_block > Millis(0) ? request.ticket.max_block : longest_block;
    // The waiter's lease is renewed by its next attempt: wake up well before it could end.
    result.block = std::min({cap, longest_block, Millis(mine.ttl_s * 1000 / 3)});
    if (result.lease == lock::AcquireResult::Lease::min_hold
        || result.lease == lock::AcquireResult::Lease::lock_delay) {
      // A known end: the key's deletion wakes the waiter; it looks again by then at the latest.
      result.block = std::min(result.block, std::max(result.holder_ttl, Millis(1000)));
    }
    result.block = std::max(result.block, Millis(1));
    mine.supersede = request.policy.supersede;
    m_answers.answer(std::move(shut));
  };
  if (lease == 0) {
    finish(std::move(outcome));
    return;
  }
  m_client.post("/v3/lease/timetolive", lease_request(lease), [finish, outcome](Answer& a) mutable {
    outcome.acquire.holder_ttl = left_of(a);
    finish(std::move(outcome));
  });
}

void EtcdStore::arm(const std::string& name, const lock::AcquireRequest& request)
{
  std::int64_t hold_s =
    request.policy.min_hold > Millis(0) ? lease_seconds(request.policy.min_hold) : 0;
  std::int64_t delay_s =
    request.policy.lock_delay > Millis(0) ? lease_seconds(request.policy.lock_delay) : 0;
  if (hold_s == 0 && delay_s == 0) {
    become_owner(name);
    return;
  }
  m_mine.at(name).me.acquired_ms = util::unix_ms();
  // Steps, each granting a lease then the next: the hold (if any), the delay (if any), then one
  // transaction that writes them with the key if it is still ours.
  auto write = [this, name, request, hold_s]() {
    auto found = m_mine.find(name);
    if (found == m_mine.end()) {
      return;
    }
    Mine& mine = found->second;
    std::int64_t key_lease = hold_s >= mine.ttl_s ? mine.hold_lease : mine.lease;
    Json extra = kind_fields(mine.kind);
    if (mine.hold_lease != 0) {
      extra["hold_lease"] = std::to_string(mine.hold_lease);
      extra["hold_ms"] = request.policy.min_hold.count();
    }
    if (mine.delay_lease != 0) {
      extra["delay_lease"] = std::to_string(mine.delay_lease);
      extra["delay_ms"] = request.policy.lock_delay.count();
    }
    Json ops = record_puts(mine.key, holder_value(mine.me, mine.fingerprint, extra), key_lease,
                           records_of(name));
    if (mine.delay_lease != 0) {
      ops.push_back(put_op(
        side_key(m_prefix, name, "delay"),
        holder_value(mine.me, mine.fingerprint, {{"delay_ms", request.policy.lock_delay.count()}}),
        mine.delay_lease));
    }
    m_client.post(
      "/v3/kv/txn", txn_request(Json::array({create_revision_is(mine.key, mine.revision)}), ops),
      [this, name, request, key_lease](Answer& a) {
        auto now = m_mine.find(name);
        if (now == m_mine.end()) {
          return;
        }
        Mine& owned = now->second;
        if (a.error || !txn_succeeded(a.body)) {
          std::vector<std::int64_t> leases{owned.lease, owned.hold_lease, owned.delay_lease};
          forget(now);
          for (std::int64_t lease : leases) {
            if (lease != 0) {
              revoke(lease, [](Answer&) {});
            }
          }
          if (a.error) {
            fail(Op::acquire, *a.error);
          } else {
            grant(name, request); // our key went with its lease: queue again
          }
          return;
        }
        if (key_lease != owned.lease) {
          revoke(owned.lease, [](Answer&) {});
          owned.lease = key_lease;
          owned.on_hold = true;
        }
        become_owner(name);
      });
  };
  auto delay = [this, name, hold_s, delay_s, write]() {
    auto found = m_mine.find(name);
    if (found == m_mine.end()) {
      return;
    }
    if (delay_s == 0) {
      write();
      return;
    }
    std::int64_t key_s = std::max(hold_s, found->second.ttl_s);
    m_client.post("/v3/lease/grant", grant_request(key_s + delay_s),
                  [this, name, write](Answer& a) {
                    auto got = m_mine.find(name);
                    if (got == m_mine.end()) {
                      return;
                    }
                    if (a.error || int_field(a.body, "ID") == 0) {
                      fail(Op::acquire,
                           a.error.value_or(Error(ExitCode::internal, "etcd at {} granted no lease",
                                                  m_client.current())));
                      return;
                    }
                    got->second.delay_lease = int_field(a.body, "ID");
                    write();
                  });
  };
  if (hold_s == 0) {
    delay();
    return;
  }
  m_client.post("/v3/lease/grant", grant_request(hold_s), [this, name, delay](Answer& a) {
    auto found = m_mine.find(name);
    if (found == m_mine.end()) {
      return;
    }
    if (a.error || int_field(a.body, "ID") == 0) {
      fail(Op::acquire, a.error.value_or(Error(ExitCode::internal, "etcd at {} granted no lease",
                                               m_client.current())));
      return;
    }
    found->second.hold_lease = int_field(a.body, "ID");
    delay();
  });
}

void EtcdStore::become_owner(const std::string& name)
{
  Mine& mine = m_mine.at(name);
  mine.owner = true;
  m_client.cancel(std::exchange(mine.queue_watch, 0));
  watch_own_key(name);
  Outcome outcome{.op = Op::acquire};
  outcome.acquire.acquired = true;
  outcome.acquire.fence = mine.revision;
  outcome.acquire.validity = std::exchange(mine.validity, std::nullopt);
  m_answers.answer(std::move(outcome));
}

void EtcdStore::watch_own_key(const std::string& name)
{
  Mine& mine = m_mine.at(name);
  mine.own_watch = m_client.stream(
    "/v3/watch", watch_deletes_request(mine.key, mine.revision + 1),
    [this, name](const Json& result) {
      auto found = m_mine.find(name);
      if (found == m_mine.end()) {
        return;
      }
      bool gone = result.contains("events") && !result["events"].empty();
      if (gone || watch_ended(result)) {
        m_client.cancel(found->second.own_watch);
        // Confirm at once either way: the lock went with the key, or nothing tells.
        m_answers.answer(Outcome{
          .op = Op::disconnected,
          .error = gone
                     ? Error(ExitCode::lost,
                             "the key of lock '{}' was deleted (its lease was "
                             "revoked or expired)",
                             name)
                     : Error(ExitCode::unavailable, "the watch of lock '{}' was cancelled", name),
          .lease_ended = true,
        });
      }
    },
    [this, name](const Error& why) {
      if (m_mine.contains(name)) {
        m_answers.answer(Op::disconnected, why); // renew soon, watch again then
      }
    });
}

void EtcdStore::start_wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                                    Millis block)
{
  std::string key = name.str();
  if (ticket.mode == lock::WaitMode::watch || ticket.mode == lock::WaitMode::barrier
      || ticket.mode == lock::WaitMode::latch || ticket.mode == lock::WaitMode::leader) {
    start_gate_wait(key, block);
    return;
  }
  auto found = m_mine.find(key);
  if (found == m_mine.end() || found->second.owner || found->second.predecessor.empty()) {
    m_answers.answer(Op::wait_for_wake);
    return;
  }
  Mine& mine = found->second;
  m_client.cancel(mine.wake_watch);
  mine.wake_by = util::monotonic_now() + block;
  if (mine.takes_over || mine.queue_watch != 0) {
    if (mine.takes_over && !m_client.active(mine.queue_watch)) {
      watch_queue(key);
    }
    if (!mine.takes_over || mine.before.empty()) { // woken since the read: read (or take) now
      end_wait(key);
    }
    return;
  }
  mine.wake_watch = m_client.stream(
    "/v3/watch",
    mine.watch_range ? watch_prefix_deletes_request(mine.predecessor, mine.watch_from)
                     : watch_deletes_request(mine.predecessor, mine.watch_from),
    [this, key](const Json& result) {
      bool gone = result.contains("events") && !result["events"].empty();
      if (gone || watch_ended(result)) {
        end_wait(key);
      }
    },
    [this, key](const Error& why) {
      util::log_verbose("the watch of lock '{}' ended ({}); asking again", key, why.what());
      end_wait(key);
    });
  if (mine.supersede) { // a newer --supersede waiter's announcement wakes this one
    m_client.cancel(mine.side_watch);
    mine.side_watch = m_client.stream(
      "/v3/watch",
      {{"create_request",
        {{"key", base64_encode(side_key(m_prefix, key, "newest"))},
         {"start_revision", std::to_string(mine.watch_from)}}}},
      [this, key](const Json& result) {
        bool changed = result.contains("events") && !result["events"].empty();
        if (changed || watch_ended(result)) {
          end_wait(key);
        }
      },
      [this, key](const Error&) { end_wait(key); });
  }
}

void EtcdStore::watch_queue(const std::string& name)
{
  Mine& mine = m_mine.at(name);
  // Where it can, the watch takes in the #delay key: a --lock-delay is armed by a put of it,
  // before the key's end, so a deletion with no such put before it is clean; else the deleted
  // key's record says whether it armed one (prev_kv).
  std::string delay_key = side_key(m_prefix, name, "delay");
  std::optional<Json> wide = watch_queue_and_delay_request(mine.prefix, delay_key, mine.watch_from);
  Json request = wide.value_or(watch_prefix_deletes_request(mine.prefix, mine.watch_from));
  if (!wide) {
    request["create_request"]["prev_kv"] = true;
  }
  std::int64_t lease = mine.lease;
  mine.queue_watch = m_client.stream(
    "/v3/watch", request,
    [this, name, lease, delay_key, sees_delay = wide.has_value()](const Json& result) {
      auto queued = m_mine.find(name);
      if (queued == m_mine.end() || queued->second.lease != lease) {
        return;
      }
      Mine& waiting = queued->second;
      if (watch_ended(result)) {
        m_client.cancel(std::exchange(waiting.queue_watch, 0)); // the next wait watches anew
        end_wait(name);
        return;
      }
      if (result.contains("events") && result["events"].is_array()) {
        for (const Json& event : result["events"]) {
          if (!event.is_object() || !event.contains("kv")) {
            continue;
          }
          KeyValue kv = key_value(event["kv"]);
          bool deleted = string_field(event, "type") == "DELETE";
          bool delay = sees_delay && !deleted && kv.key == delay_key;
          if (!deleted && !delay) {
            continue; // a put of a newer candidate's key, of a record, of a history event
          }
          // Gone cleanly: no #delay put since the read (which found none live); without sight
          // of #delay, etcdctl lock's empty key or a dlock record that armed no --lock-delay;
          // anything else (a value not read, a candidate's whose record lies elsewhere) and a
          // --lock-delay may have begun: read the queue.
          bool clean = sees_delay;
          if (!sees_delay) {
            KeyValue was = event.contains("prev_kv") ? key_value(event["prev_kv"]) : KeyValue{};
            Json record = record_of(was);
            clean =
              !was.key.empty()
              && (was.value.empty() || (record.is_object() && int_field(record, "delay_ms") == 0));
          }
          Deletion gone{
            .revision = kv.mod_revision, .key = std::move(kv.key), .clean = clean, .delay = delay};
          if (waiting.reading) {
            waiting.held.push_back(std::move(gone));
          } else {
            take_deletion(waiting, gone);
          }
        }
      }
      if (!waiting.takes_over || waiting.before.empty()) {
        end_wait(name);
      }
    },
    [this, name, lease](const Error& why) {
      auto queued = m_mine.find(name);
      if (queued == m_mine.end() || queued->second.lease != lease) {
        return;
      }
      queued->second.queue_watch = 0;
      util::log_verbose("the watch of lock '{}' ended ({}); asking again", name, why.what());
      end_wait(name);
    });
}

void EtcdStore::take_deletion(Mine& mine, const Deletion& gone)
{
  if (gone.key == mine.key || gone.delay) { // ours (not by its lease: the keepalive would tell)
    mine.takes_over = false;
  } else if (mine.before.erase(gone.key) > 0) {
    mine.takes_over = mine.takes_over && gone.clean;
  }
}

void EtcdStore::forget(std::map<std::string, Mine>::iterator found)
{
  m_client.cancel(found->second.own_watch);
  m_client.cancel(found->second.wake_watch);
  m_client.cancel(found->second.side_watch);
  m_client.cancel(found->second.queue_watch);
  m_mine.erase(found);
}

void EtcdStore::end_wait(const std::string& name)
{
  auto found = m_mine.find(name);
  if (found == m_mine.end() || !found->second.wake_by) {
    return;
  }
  m_client.cancel(found->second.wake_watch);
  m_client.cancel(found->second.side_watch);
  found->second.wake_watch = 0;
  found->second.side_watch = 0;
  found->second.wake_by.reset();
  m_answers.answer(Op::wait_for_wake);
}

void EtcdStore::revoke(std::int64_t lease, std::function<void(Answer&)> done)
{
  m_client.post("/v3/lease/revoke", lease_request(lease), std::move(done));
}

void EtcdStore::find_token(const std::string& name, const std::string& token,
                           std::function<void(std::optional<Error>, std::optional<Member>)> found)
{
  std::string prefix = lock_prefix(m_prefix, name);
  std::string fingerprint = token_fingerprint(token);
  std::string records = records_of(name);
  m_client.post("/v3/kv/txn", reads({range_prefix_op(prefix), range_prefix_op(records)}),
                [prefix, records, fingerprint, found](Answer& a) {
                  const Json* range = a.error ? nullptr : txn_range(a.body, 0);
                  if (a.error || range == nullptr) {
                    found(a.error, std::nullopt);
                    return;
                  }
                  for (const Member& m : queue_of(*range, prefix, txn_range(a.body, 1), records)) {
                    // dlock's own key: a holder record on a lease (the one a release revokes) with
                    // the token's fingerprint; not always its name's lease (--min-hold, renew --ttl
                    // move it).
                    if (m.kv.lease != 0 && dlock_holder_of(m.kv)
                        && fingerprint_of(m.kv) == fingerprint) {
                      found(std::nullopt, m);
                      return;
                    }
                  }
                  found(std::nullopt, std::nullopt);
                });
}

void EtcdStore::start_renew(const lock::LockName& name, const lock::RenewRequest& request)
{
  std::string key = name.str();
  auto found = m_mine.find(key);
  if (found != m_mine.end() && found->second.owner && found->second.token == request.token) {
    Mine& mine = found->second;
    if (!m_client.active(mine.own_watch)) {
      watch_own_key(key);
    }
    // Read the key and the --replace request first: a holder asked to stand down is not
    // extended.
    std::string replace = side_key(m_prefix, key, "replace");
    std::string records = records_of(key);
    m_client.post(
      "/v3/kv/txn",
      reads({range_op(mine.key), range_op(replace), range_op(record_key(records, mine.key))}),
      [this, key, records](Answer& a) {
        auto held = m_mine.find(key);
        if (held == m_mine.end()) {
          return;
        }
        Outcome checked{.op = Op::renew, .error = a.error};
        std::optional<KeyValue> kv =
          a.error ? std::nullopt : key_with_record(a.body, 0, 2, records);
        Mine& owner = held->second;
        if (!kv || kv->create_revision != owner.revision) {
          m_answers.answer(std::move(checked));
          return;
        }
        std::optional<KeyValue> asked = one_key(txn_range(a.body, 1));
        std::optional<lock::HolderInfo> replacer = live_side(asked);
        if (replacer && string_field(record_of(*asked), "target") == owner.fingerprint) {
          owner.replaced = true;
          checked.replaced_by = *replacer;
          m_answers.answer(std::move(checked));
          return;
        }
        extend(key, *kv);
      });
    return;
  }
  // Another process's token (a nested run, `dlock renew`): its key carries the fingerprint.
  find_token(
    key, request.token, [this, key, request](std::optional<Error> error, std::optional<Member> m) {
      if (error || !m) {
        m_answers.answer(Op::renew, error);
        return;
      }
      const KeyValue* kv = &m->kv;
      bool slot = m->kind.has_slots();
      Json record = record_of(*kv);
      // On its --min-hold lease (or ended): a keepalive would stretch the hold; its holder's own
      // renewals move it off when due, this one only tells whether it is there.
      bool on_hold =
        int_field(record, "ended") != 0 || int_field(record, "hold_lease") == kv->lease;
      if (request.ttl && !on_hold && int_field(record, "ttl_ms") != request.ttl->count()) {
        renew_with_ttl(key, *kv, *request.ttl, slot); // `renew --ttl`: a lease of the new length
        return;
      }
      m_client.post(on_hold ? "/v3/lease/timetolive" : "/v3/lease/keepalive",
                    lease_request(kv->lease), [this, on_hold, slot](Answer& a) {
                      Outcome outcome{.op = Op::renew, .slot = slot};
                      if (a.error && !lease_not_found(a.body)) {
                        outcome.error = a.error;
                      }
                      outcome.held =
                        !a.error && (on_hold ? int_field(a.body, "TTL") : kept_ttl(a.body)) > 0;
                      m_answers.answer(std::move(outcome));
                    });
    });
}

void EtcdStore::renew_with_ttl(const std::string& name, const KeyValue& kv, Millis ttl, bool slot)
{
  std::string records = records_of(name);
  // etcd keeps a lease's TTL for good: grant one of the new length, move the key onto it (a
  // put keeps its create revision, so its place and fencing token), then revoke the old one.
  m_client.post(
    "/v3/lease/grant", grant_request(lease_seconds(ttl)),
    [this, kv, ttl, slot, records](Answer& g) {
      std::int64_t lease = g.error ? 0 : int_field(g.body, "ID");
      if (lease == 0) {
        m_answers.answer(Op::renew,
                         g.error.value_or(Error(ExitCode::internal, "etcd at {} granted no lease",
                                                m_client.current())));
        return;
      }
      Json compare = Json::array({create_revision_is(kv.key, kv.create_revision),
                                  {{"key", base64_encode(kv.key)},
                                   {"target", "LEASE"},
                                   {"result", "EQUAL"},
                                   {"lease", std::to_string(kv.lease)}}});
      Json puts =
        record_puts(kv.key, with_fields(record_of(kv), {{"ttl_ms", ttl.count()}}), lease, records);
      m_client.post("/v3/kv/txn", txn_request(compare, puts), [this, kv, lease, slot](Answer& w) {
        bool moved = !w.error && txn_succeeded(w.body);
        revoke(moved ? kv.lease : lease, [this, w, moved, slot](Answer&) {
          m_answers.answer(Outcome{.op = Op::renew, .error = w.error, .held = moved, .slot = slot});
        });
      });
    });
}

void EtcdStore::extend(const std::string& name, const KeyValue& kv)
{
  Mine& mine = m_mine.at(name);
  if (mine.on_hold) {
    // On the --min-hold lease, never kept alive: enough while it outlasts the TTL, else the key
    // moves onto a lease kept alive.
    m_client.post("/v3/lease/timetolive", lease_request(mine.hold_lease),
                  [this, name, kv](Answer& a) {
                    auto held = m_mine.find(name);
                    if (held == m_mine.end()) {
                      return;
                    }
                    if (a.error) {
                      m_answers.answer(Op::renew, a.error);
                      return;
                    }
                    if (left_of(a) >= Millis((held->second.ttl_s + 1) * 1000)) {
                      m_answers.answer(Outcome::holding(Op::renew, true));
                      return;
                    }
                    move_off_hold(name, kv);
                  });
    return;
  }
  if (mine.delay_lease != 0) { // the #delay key outlives the key by the delay
    m_client.post("/v3/lease/keepalive", lease_request(mine.delay_lease), [](Answer&) {});
  }
  m_client.post("/v3/lease/keepalive", lease_request(mine.lease), [this](Answer& a) {
    Outcome kept{.op = Op::renew};
    if (a.error && !lease_not_found(a.body)) {
      kept.error = a.error;
    }
    kept.held = !a.error && kept_ttl(a.body) > 0;
    m_answers.answer(std::move(kept));
  });
}

void EtcdStore::move_off_hold(const std::string& name, const KeyValue& kv)
{
  const Mine& current = m_mine.at(name);
  std::int64_t ttl_s = current.ttl_s;
  std::int64_t delay_s =
    current.policy.lock_delay > Millis(0) ? lease_seconds(current.policy.lock_delay) : 0;
  // A lease for the key, then (--lock-delay) one for the #delay key, then one transaction.
  auto granted = std::make_shared<std::vector<std::int64_t>>();
  auto write = [this, name, kv, granted]() {
    auto held = m_mine.find(name);
    if (held == m_mine.end()) {
      return;
    }
    Mine& mine = held->second;
    std::int64_t lease = granted->at(0);
    std::int64_t delay = granted->size() > 1 ? granted->at(1) : 0;
    Json extra = Json::object();
    Json ops = Json::array();
    if (delay != 0) {
      extra["delay_lease"] = std::to_string(delay);
      ops.push_back(put_op(
        side_key(m_prefix, name, "delay"),
        holder_value(mine.me, mine.fingerprint, {{"delay_ms", mine.policy.lock_delay.count()}}),
        delay));
    }
    Json puts = record_puts(kv.key, with_fields(record_of(kv), extra), lease, records_of(name));
    ops.insert(ops.begin(), puts.begin(), puts.end());
    m_client.post("/v3/kv/txn",
                  txn_request(Json::array({create_revision_is(kv.key, kv.create_revision)}), ops),
                  [this, name, lease, delay](Answer& a) {
                    bool moved = !a.error && txn_succeeded(a.body);
                    auto now = m_mine.find(name);
                    if (!moved || now == m_mine.end()) {
                      revoke(lease, [](Answer&) {});
                      if (delay != 0) {
                        revoke(delay, [](Answer&) {});
                      }
                      if (now != m_mine.end()) {
                        m_answers.answer(Outcome{.op = Op::renew, .error = a.error});
                      }
                      return;
                    }
                    Mine& moved_mine = now->second;
                    if (delay != 0 && moved_mine.delay_lease != 0) {
                      revoke(moved_mine.delay_lease, [](Answer&) {});
                    }
                    moved_mine.lease = lease;
                    moved_mine.on_hold = false;
                    if (delay != 0) {
                      moved_mine.delay_lease = delay;
                    }
                    m_answers.answer(Outcome::holding(Op::renew, true));
                  });
  };
  auto grant_one = [this, name, granted](std::int64_t ttl, std::function<void()> next) {
    m_client.post("/v3/lease/grant", grant_request(ttl), [this, name, granted, next](Answer& a) {
      if (a.error || int_field(a.body, "ID") == 0) {
        for (std::int64_t lease : *granted) {
          revoke(lease, [](Answer&) {});
        }
        m_answers.answer(Op::renew,
                         a.error.value_or(Error(ExitCode::internal, "etcd at {} granted no lease",
                                                m_client.current())));
        return;
      }
      granted->push_back(int_field(a.body, "ID"));
      next();
    });
  };
  grant_one(ttl_s, [grant_one, write, ttl_s, delay_s]() {
    if (delay_s == 0) {
      write();
    } else {
      grant_one(ttl_s + delay_s, write);
    }
  });
}

void EtcdStore::revoke_all(std::vector<std::int64_t> leases, std::function<void()> done)
{
  if (leases.empty()) {
    done();
    return;
  }
  std::int64_t first = leases.front();
  leases.erase(leases.begin());
  revoke(first, [this, leases = std::move(leases), done = std::move(done)](Answer&) mutable {
    revoke_all(std::move(leases), std::move(done));
  });
}

void EtcdStore::release_held(const std::string& name, const KeyValue& kv, bool replaced)
{
  std::string records = records_of(name);
  Json record = record_of(kv);
  std::int64_t hold = int_field(record, "hold_lease");
  std::int64_t delay = int_field(record, "delay_lease");
  // A clean end: the #delay key goes with its lease, then the key with its own.
  auto clean = [this, kv, hold, delay]() {
    auto done = [this, kv, hold](Answer& r) {
      Outcome outcome{.op = Op::release, .held = true};
      if (r.error && !lease_not_found(r.body)) {
        outcome.error = r.error;
      }
      std::vector<std::int64_t> rest;
      if (hold != 0 && hold != kv.lease) {
        rest.push_back(hold);
      }
      revoke_all(std::move(rest), [this, outcome]() { m_answers.answer(outcome); });
    };
    if (delay == 0) {
      revoke(kv.lease, done);
      return;
    }
    revoke(delay, [this, kv, done](Answer&) { revoke(kv.lease, done); });
  };
  if (replaced || hold == 0 || int_field(record, "ended") != 0) {
    clean();
    return;
  }
  m_client.post(
    "/v3/lease/timetolive", lease_request(hold),
    [this, kv, record, hold, delay, clean, records](Answer& a) {
      Millis left = left_of(a);
      if (left <= Millis(0)) {
        clean();
        return;
      }
      // --min-hold not over: the key stays on the hold's lease, marked ended, until it ends.
      m_client.post(
        "/v3/kv/txn",
        txn_request(Json::array({create_revision_is(kv.key, kv.create_revision)}),
                    record_puts(kv.key, with_fields(record, {{"ended", 1}}), hold, records)),
        [this, kv, hold, delay, left](Answer& w) {
          if (w.error) {
            m_answers.answer(Op::release, w.error);
            return;
          }
          Outcome outcome = Outcome::holding(Op::release, true);
          outcome.kept_for = txn_succeeded(w.body) ? left : Millis(0);
          // Then the --lock-delay disarmed and the key's former lease revoked, each answered
          // before the outcome (dlock may exit right after it).
          std::vector<std::int64_t> leases;
          for (std::int64_t lease : {delay, kv.lease == hold ? 0 : kv.lease}) {
            if (lease != 0) {
              leases.push_back(lease);
            }
          }
          revoke_all(std::move(leases), [this, outcome]() { m_answers.answer(outcome); });
        });
    });
}

void EtcdStore::start_release(const lock::LockName& name, const std::string& token)
{
  std::string key = name.str();
  auto found = m_mine.find(key);
  if (!token.empty() && found != m_mine.end() && found->second.token == token) {
    Mine mine = std::move(found->second);
    m_mine.erase(found);
    m_client.cancel(mine.own_watch);
    m_client.cancel(mine.wake_watch);
    m_client.cancel(mine.side_watch);
    m_client.cancel(mine.queue_watch);
    std::string replace = side_key(m_prefix, key, "replace");
    std::string records = records_of(key);
    if (mine.owner && mine.hold_lease == 0 && mine.delay_lease == 0 && !mine.on_hold) {
      // No --min-hold to keep it, no --lock-delay to disarm: the key (with its record) goes in
      // one transaction if it is still ours, which hands the lock over at once; then its lease.
      Json deletes = Json::array({delete_op(mine.key), delete_op(record_key(records, mine.key))});
      m_client.post(
        "/v3/kv/txn",
        txn_request(Json::array({create_revision_is(mine.key, mine.revision)}), deletes),
        [this, mine](Answer& a) {
          bool held = !a.error && txn_succeeded(a.body);
          std::vector<KeyValue> deleted = held ? txn_deleted(a.body, 0) : std::vector<KeyValue>{};
          // The key's lease: its own, unless another process's `renew --ttl` moved it.
          std::int64_t lease =
            deleted.size() == 1 && deleted.front().lease != 0 ? deleted.front().lease : mine.lease;
          Outcome outcome{.op = Op::release, .error = a.error, .held = held};
          revoke(lease, [this, outcome, held](Answer& r) mutable {
            if (held && r.error && !lease_not_found(r.body)) {
              outcome.error = r.error;
            }
            m_answers.answer(outcome);
          });
        });
      return;
    }
    // Whether the key is still ours and was asked to stand down (a read), then the release.
    m_client.post(
      "/v3/kv/txn",
      reads({range_op(mine.key), range_op(replace), range_op(record_key(records, mine.key))}),
      [this, mine, records, mine_name = key](Answer& a) {
        std::optional<KeyValue> kv =
          a.error ? std::nullopt : key_with_record(a.body, 0, 2, records);
        if (mine.owner && kv && kv->create_revision == mine.revision) {
          std::optional<KeyValue> asked = one_key(txn_range(a.body, 1));
          bool replaced =
            mine.replaced
            || (live_side(asked) && string_field(record_of(*asked), "target") == mine.fingerprint);
          release_held(mine_name, *kv, replaced);
          return;
        }
        // Not ours any more (lost): a --lock-delay stays armed, a hold lease runs out by itself.
        Outcome outcome{.op = Op::release, .error = a.error};
        revoke(mine.lease, [this, outcome](Answer& r) mutable {
          if (r.error && !lease_not_found(r.body) && !outcome.error) {
            outcome.error = r.error;
          }
          m_answers.answer(outcome);
        });
      });
    return;
  }
  if (token.empty()) { // --force: revoke the holder's lease (its key goes with it)
    std::string prefix = lock_prefix(m_prefix, key);
    std::string delay_key = side_key(m_prefix, key, "delay");
    std::string records = records_of(key);
    m_client.post(
      "/v3/kv/txn", reads({range_prefix_op(prefix), range_op(delay_key), range_prefix_op(records)}),
      [this, prefix, delay_key, records](Answer& a) {
        const Json* range = a.error ? nullptr : txn_range(a.body, 0);
        std::vector<Member> queue =
          range ? queue_of(*range, prefix, txn_range(a.body, 2), records) : std::vector<Member>{};
        std::optional<KeyValue> delay = range ? one_key(txn_range(a.body, 1)) : std::nullopt;
        if (a.error || queue.empty()) {
          if (delay && !a.error) { // free, but delayed (or another tenant's key there): clear it
            m_client.post("/v3/kv/deleterange", range_key_request(delay_key),
                          [this](Answer& d) { m_answers.answer(Op::release, d.error); });
            return;
          }
          m_answers.answer(Op::release, a.error);
          return;
        }
        const KeyValue& front = queue.front().kv;
        Json record = record_of(front);
        std::int64_t delay_ms = int_field(record, "delay_ms");
        // Every holder goes (the shared ones, a semaphore's): their leases, the last answered.
        std::vector<std::int64_t> others;
        for (std::size_t i = 1; i < holders_of(queue); ++i) {
          others.push_back(queue[i].kv.lease);
        }
        auto revoke_front = [this, lease = front.lease, others](Answer&) {
          revoke_all(others, [this, lease]() {
            revoke(lease, [this](Answer& r) {
              Outcome outcome{.op = Op::release, .held = true};
              if (r.error && !lease_not_found(r.body)) {
                outcome.error = r.error;
              }
              m_answers.answer(std::move(outcome));
            });
          });
        };
        bool armed = delay_ms > 0 && delay && int_field(record, "ended") == 0
                     && std::to_string(delay->lease) == string_field(record, "delay_lease");
        if (!armed) {
          Answer none;
          revoke_front(none);
          return;
        }
        // --lock-delay: the #delay key stays for the delay from now, on a lease of its own.
        m_client.post(
          "/v3/lease/grant", grant_request(lease_seconds(Millis(delay_ms))),
          [this, delay = *delay, revoke_front](Answer& g) {
            std::int64_t lease = g.error ? 0 : int_field(g.body, "ID");
            if (lease == 0) {
              revoke_front(g);
              return;
            }
            Json compare = Json::array({{{"key", base64_encode(delay.key)},
                                         {"target", "MOD"},
                                         {"result", "EQUAL"},
                                         {"mod_revision", std::to_string(delay.mod_revision)}}});
            m_client.post(
              "/v3/kv/txn",
              txn_request(compare, Json::array({put_op(delay.key, delay.value, lease)})),
              revoke_front);
          });
      });
    return;
  }
  find_token(key, token, [this, key](std::optional<Error> error, std::optional<Member> m) {
    if (error || !m) {
      m_answers.answer(Op::release, error);
      return;
    }
    release_held(key, m->kv, false);
  });
}

void EtcdStore::start_withdraw(const lock::LockName& name, const lock::WaitTicket& ticket)
{
  if (ticket.mode == lock::WaitMode::barrier) {
    withdraw_party(name.str(), ticket);
    return;
  }
  if (ticket.mode == lock::WaitMode::watch || ticket.mode == lock::WaitMode::latch
      || ticket.mode == lock::WaitMode::leader) { // a watch stream: nothing left in etcd
    if (auto gate = m_gates.find(name.str()); gate != m_gates.end()) {
      m_client.cancel(gate->second.wake_watch);
      m_gates.erase(gate);
    }
    m_answers.answer(Op::withdraw);
    return;
  }
  auto found = m_mine.find(name.str());
  if (found == m_mine.end() || found->second.owner) {
    m_answers.answer(Op::withdraw);
    return;
  }
  std::int64_t lease = found->second.lease;
  forget(found);
  revoke(lease, [this](Answer&) { m_answers.answer(Op::withdraw); });
}

void EtcdStore::watch(util::EventLoop& loop)
{
  m_client.pump();
  util::TimePoint now = util::monotonic_now();
  for (auto& [name, mine] : m_mine) {
    if (mine.wake_by) {
      loop.wake_at(*mine.wake_by <= now ? now : *mine.wake_by);
    }
  }
  for (auto& [name, gate] : m_gates) {
    if (gate.wake_by) {
      loop.wake_at(*gate.wake_by <= now ? now : *gate.wake_by);
    }
  }
  m_answers.watch(loop);
  m_client.watch(loop);
}

std::optional<Outcome> EtcdStore::next_outcome()
{
  m_client.pump();
  util::TimePoint now = util::monotonic_now();
  std::vector<std::string> due;
  for (auto& [name, mine] : m_mine) {
    if (mine.wake_by && *mine.wake_by <= now) {
      due.push_back(name);
    }
  }
  for (const std::string& name : due) {
    end_wait(name);
  }
  due.clear();
  for (auto& [name, gate] : m_gates) {
    if (gate.wake_by && *gate.wake_by <= now) {
      due.push_back(name);
    }
  }
  for (const std::string& name : due) {
    end_gate_wait(name);
  }
  return m_answers.next();
}

void EtcdStore::abandon() noexcept
{
  std::vector<std::uint64_t> keep;
  for (auto& [name, mine] : m_mine) {
    if (mine.owner && m_client.active(mine.own_watch)) {
      keep.push_back(mine.own_watch);
    }
  }
  for (auto& [name, mine] : m_mine) {
    mine.wake_by.reset();
  }
  for (auto& [name, gate] : m_gates) {
    gate.wake_by.reset();
  }
  m_client.cancel_requests_except(keep); // every transfer but the watches of held keys
  m_answers.clear();
  m_records.clear();
  m_recording = false;
}

Error EtcdStore::timed_out() noexcept
{
  abandon();
  return Error(ExitCode::unavailable, "etcd at {} did not answer in time", m_client.current());
}

lock::LockStatus EtcdStore::status(const lock::LockName& name, util::TimePoint deadline)
{
  std::string prefix = lock_prefix(m_prefix, name.str());
  std::string records = records_of(name.str());
  Answer a =
    m_client.call("/v3/kv/txn",
                  reads({range_prefix_op(prefix), range_op(side_key(m_prefix, name.str(), "delay")),
                         range_prefix_op(records)}),
                  deadline);
  const Json* range = a.error ? nullptr : txn_range(a.body, 0);
  if (!a.error && range == nullptr) {
    a.error = Error(ExitCode::internal, "etcd at {} answered a transaction without its range",
                    m_client.current());
  }
  if (a.error) {
    throw *a.error;
  }
  std::vector<Member> queue = queue_of(*range, prefix, txn_range(a.body, 2), records);
  lock::LockStatus status;
  status.name = name.str();
  status.server_time_ms = util::unix_ms();
  if (queue.empty()) {
    std::optional<KeyValue> delay = one_key(txn_range(a.body, 1));
    if (std::optional<lock::HolderInfo> delayed = live_side(delay)) {
      Answer ttl = m_client.call("/v3/lease/timetolive", lease_request(delay->lease), deadline);
      if (ttl.error) {
        throw *ttl.error;
      }
      status.delay_ms = left_of(ttl).count();
      status.holder = status.delay_ms > 0 ? *delayed : lock::HolderInfo{};
    }
    return status;
  }
  fill_held(status, queue, deadline);
  return status;
}

void EtcdStore::fill_held(lock::LockStatus& status, const std::vector<Member>& queue,
                          util::TimePoint deadline)
{
  std::size_t holding = holders_of(queue);
  status.held = true;
  status.kind = queue.front().kind;
  status.holder = holder_of(queue.front().kv);
  status.command_ended = int_field(record_of(queue.front().kv), "ended") != 0;
  status.last_fence = queue.back().kv.create_revision;
  status.waiters = std::int64_t(queue.size() - holding);
  for (std::size_t i = 0; i < holding; ++i) {
    Answer ttl = m_client.call("/v3/lease/timetolive", lease_request(queue[i].kv.lease), deadline);
    if (ttl.error) {
      throw *ttl.error;
    }
    std::int64_t ttl_ms = int_field(ttl.body, "TTL") * 1000;
    status.ttl_ms = i == 0 ? ttl_ms : std::max(status.ttl_ms, ttl_ms);
    if (status.kind.has_slots()) {
      status.slots.push_back({.holder = holder_of(queue[i].kv), .ttl_ms = ttl_ms});
    }
  }
}

std::vector<lock::LockStatus> EtcdStore::list(std::string_view pattern, Millis timeout)
{
  util::TimePoint deadline = util::deadline_after(timeout);
  // The keys first, oldest first, then the values of all but the histories' (up to 100 events
  // a name, which would crowd the answer), a transaction of ranges at a time.
  Answer a = m_client.call("/v3/kv/range", range_keys_request(m_prefix, 0, false), deadline);
  if (a.error) {
    throw *a.error;
  }
  std::vector<Json> ops;
  for (const KeyValue& kv : key_values(a.body)) {
    bool side = kv.key.find('/', m_prefix.size()) == std::string::npos;
    if (!side || kv.key.find("#history:", m_prefix.size()) == std::string::npos) {
      ops.push_back(range_op(kv.key));
    }
  }
  std::vector<KeyValue> kvs;
  constexpr std::size_t batch = 100; // etcd takes at most 128 operations a transaction
  for (std::size_t first = 0; first < ops.size(); first += batch) {
    std::size_t end = std::min(ops.size(), first + batch);
    Answer r =
      m_client.call("/v3/kv/txn",
                    reads(std::vector<Json>(ops.begin() + static_cast<std::ptrdiff_t>(first),
                                            ops.begin() + static_cast<std::ptrdiff_t>(end))),
                    deadline);
    if (r.error) {
      throw *r.error;
    }
    for (std::size_t i = 0; i < end - first; ++i) {
      if (std::optional<KeyValue> kv = one_key(txn_range(r.body, i))) { // none: gone meanwhile
        kvs.push_back(std::move(*kv));
      }
    }
  }
  std::map<std::string, std::vector<Member>> by_name;
  std::map<std::string, KeyValue> sides; // the candidates' records among them, by key
  for (KeyValue& kv : kvs) {
    if (kv.key.find('/', m_prefix.size()) == std::string::npos) { // a side key (side_key)
      std::string key = kv.key;
      sides.emplace(std::move(key), std::move(kv));
      continue;
    }
    std::size_t slash = kv.key.rfind('/');
    if (slash == std::string::npos || slash < m_prefix.size()) {
      continue;
    }
    std::string name = kv.key.substr(m_prefix.size(), slash - m_prefix.size());
    // A reader's key (PFX/read/<hex>) is of the shorter name, as member_kind decides.
    for (std::string_view sub : {"/read", "/write"}) {
      std::string shorter = name.substr(0, name.size() - sub.size());
      if (name.ends_with(sub) && !shorter.empty()
          && member_kind(kv, lock_prefix(m_prefix, shorter))) {
        name = shorter;
      }
    }
    std::optional<lock::LockKind> kind = name.empty() || name.size() > lock::max_name_bytes
                                           ? std::nullopt
                                           : member_kind(kv, lock_prefix(m_prefix, name));
    if (!kind) {
      continue; // not a lock of dlock's (another tenant's key)
    }
    by_name[name].push_back(Member{.kv = std::move(kv), .kind = *kind}); // oldest first
  }
  std::vector<lock::LockStatus> found;
  std::string glob(pattern);
  for (auto& [name, queue] : by_name) {
    if (::fnmatch(glob.c_str(), name.c_str(), 0) != 0) {
      continue;
    }
    std::string candidates = records_of(name);
    for (Member& member : queue) {
      if (auto record = sides.find(record_key(candidates, member.kv.key)); record != sides.end()) {
        member.kv = with_record(std::move(member.kv), {record->second}, candidates);
      }
    }
    lock::LockStatus status;
    status.name = name;
    status.server_time_ms = util::unix_ms();
    fill_held(status, queue, util::deadline_after(timeout));
    found.push_back(std::move(status));
  }
  return found;
}

void EtcdStore::start_record(const lock::LockName& name, const std::string& text)
{
  m_records.push_back(Record{.name = name.str(), .text = text});
  next_record();
}

void EtcdStore::next_record()
{
  if (m_recording || m_records.empty()) {
    return;
  }
  m_recording = true;
  append(m_records.front().name, m_records.front().text, false);
}

void EtcdStore::recorded(std::optional<Error> error)
{
  if (!m_recording) {
    return; // abandoned meanwhile
  }
  m_recording = false;
  m_records.pop_front();
  m_answers.answer(Op::record, std::move(error));
  next_record();
}

void EtcdStore::append(const std::string& name, const std::string& text, bool granted)
{
  std::string log = history_prefix(m_prefix, name);
  std::int64_t lease = history_lease(log);
  std::string token = util::random_token();
  std::uint64_t id = std::stoull(token.substr(0, 16), nullptr, 16);
  // The put, and the log's oldest keys with its count (a few past the cap: each event trims).
  Json ops = Json::array({put_op(history_key(log, id), text, lease),
                          {{"request_range", range_keys_request(log, 8, false)}}});
  struct Both {
    std::optional<Answer> put, kept;
  };
  auto both = std::make_shared<Both>();
  auto when_both = [this, both, name, text, lease, granted]() {
    if (!both->put || (!granted && !both->kept)) {
      return;
    }
    Answer& a = *both->put;
    if (a.error && lease_not_found(a.body) && !granted) { // the log's first event (or expired)
      m_client.post("/v3/lease/grant", grant_request(lease_seconds(lock::history_keep), lease),
                    [this, name, text](Answer&) { append(name, text, true); });
      return;
    }
    if (a.error) {
      recorded(a.error);
      return;
    }
    const Json* oldest = txn_range(a.body, 1);
    trim(name, oldest != nullptr ? *oldest : Json::object());
  };
  m_client.post("/v3/kv/txn", txn_request(Json::array(), std::move(ops)),
                [both, when_both](Answer& a) {
                  both->put = std::move(a);
                  when_both();
                });
  if (!granted) { // the log lasts history_keep from this event (a granted lease does already)
    m_client.post("/v3/lease/keepalive", lease_request(lease), [both, when_both](Answer& a) {
      both->kept = std::move(a);
      when_both();
    });
  }
}

void EtcdStore::trim(const std::string& name, const Json& oldest)
{
  std::int64_t count = int_field(oldest, "count");
  auto surplus = count - static_cast<std::int64_t>(lock::max_history_events);
  std::string log = history_prefix(m_prefix, name);
  Json deletes = Json::array();
  for (const KeyValue& kv : key_values(oldest)) {
    if (std::ssize(deletes) >= surplus) {
      break;
    }
    if (is_history_key(kv.key, log)) {
      deletes.push_back({{"request_delete_range", {{"key", base64_encode(kv.key)}}}});
    }
  }
  if (deletes.empty()) {
    recorded(std::nullopt);
    return;
  }
  m_client.post("/v3/kv/txn", txn_request(Json::array(), std::move(deletes)),
                [this](Answer& a) { recorded(a.error); });
}

std::vector<std::string> EtcdStore::events(const lock::LockName& name, std::size_t limit,
                                           util::TimePoint deadline)
{
  limit = std::min(limit, lock::max_history_events);
  std::string log = history_prefix(m_prefix, name.str());
  // The newest keys first (no values: another tenant's may be large), a few more than asked
  // for, in case other keys share the log's prefix.
  Answer a = m_client.call(
    "/v3/kv/range", range_keys_request(log, static_cast<std::int64_t>(limit) + 16, true), deadline);
  if (a.error) {
    throw *a.error;
  }
  std::vector<std::string> keys;
  for (const KeyValue& kv : key_values(a.body)) {
    if (keys.size() < limit && is_history_key(kv.key, log)) {
      keys.push_back(kv.key);
    }
  }
  // Their values, a few keys a transaction; a batch that fails (too large an answer: another
  // tenant's values) is read key by key, and a key that fails so is left out.
  std::map<std::string, std::string> values;
  auto take = [&values](const Json* range) {
    if (range == nullptr) {
      return;
    }
    for (KeyValue& kv : key_values(*range)) {
      if (kv.value.size() <= lock::max_event_bytes) {
        values[kv.key] = std::move(kv.value);
      }
    }
  };
  constexpr std::size_t batch = 8;
  for (std::size_t first = 0; first < keys.size(); first += batch) {
    std::vector<Json> ops;
    for (std::size_t i = first; i < std::min(keys.size(), first + batch); ++i) {
      ops.push_back(range_op(keys[i]));
    }
    Answer r = m_client.call("/v3/kv/txn", reads(ops), deadline);
    if (!r.error) {
      for (std::size_t i = 0; i < ops.size(); ++i) {
        take(txn_range(r.body, i));
      }
      continue;
    }
    if (util::monotonic_now() >= deadline) {
      throw *r.error;
    }
    for (std::size_t i = first; i < std::min(keys.size(), first + batch); ++i) {
      Answer one = m_client.call("/v3/kv/range", range_key_request(keys[i]), deadline);
      if (!one.error) {
        take(&one.body);
      }
    }
  }
  std::vector<std::string> texts;
  for (const std::string& key : keys) {
    if (auto found = values.find(key); found != values.end()) {
      texts.push_back(std::move(found->second));
    }
  }
  return texts;
}

} // namespace dlock::etcd

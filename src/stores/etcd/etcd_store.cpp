#include "stores/etcd/etcd_store.hpp"

#include "lock/features.hpp"
#include "util/log.hpp"

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
    m_client.cancel_requests();
    for (auto& [name, mine] : m_mine) {
      m_client.call("/v3/lease/revoke", lease_request(mine.lease), util::deadline_after(m_timeout));
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
    m_client.cancel(found->second.own_watch);
    m_client.cancel(found->second.wake_watch);
    m_mine.erase(found);
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
  // Queued: keep our place (the lease alive), then see who is first now.
  m_client.post("/v3/lease/keepalive", lease_request(mine.lease), [this, key, request](Answer& a) {
    if (a.error && !lease_not_found(a.body)) {
      fail(Op::acquire, *a.error);
      return;
    }
    auto queued = m_mine.find(key);
    if (queued == m_mine.end()) {
      return;
    }
    if (a.error || kept_ttl(a.body) <= 0) { // our key went with its lease: queue again
      m_mine.erase(queued);
      grant(key, request);
      return;
    }
    std::string prefix = queued->second.prefix;
    m_client.post("/v3/kv/range", range_prefix_request(prefix),
                  [this, key, request, prefix](Answer& r) {
                    if (r.error) {
                      fail(Op::acquire, *r.error);
                      return;
                    }
                    decide(key, request, lock_keys(r.body, prefix), header_revision(r.body));
                  });
  });
}

void EtcdStore::grant(const std::string& name, const lock::AcquireRequest& request)
{
  m_client.post(
    "/v3/lease/grant", grant_request(lease_seconds(request.ttl)), [this, name, request](Answer& a) {
      if (a.error) {
        fail(Op::acquire, *a.error);
        return;
      }
      Mine mine;
      mine.token = request.token;
      mine.prefix = lock_prefix(m_prefix, name);
      mine.lease = int_field(a.body, "ID");
      mine.ttl_s = int_field(a.body, "TTL");
      mine.key = lock_key(mine.prefix, mine.lease);
      if (mine.lease == 0) {
        fail(Op::acquire,
             Error(ExitCode::internal, "etcd at {} granted no lease", m_client.current()));
        return;
      }
      m_mine[name] = std::move(mine);
      put_key(name, request);
    });
}

void EtcdStore::put_key(const std::string& name, const lock::AcquireRequest& request)
{
  const Mine& mine = m_mine.at(name);
  lock::HolderInfo me = request.holder;
  me.acquired_ms = util::unix_ms();
  me.ttl_ms = request.ttl.count();
  m_client.post("/v3/kv/txn",
                acquire_txn(mine.key, holder_value(me, token_fingerprint(request.token)),
                            mine.lease, mine.prefix),
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
                  decide(name, request, lock_keys(*range, found->second.prefix),
                         header_revision(a.body));
                });
}

void EtcdStore::decide(const std::string& name, const lock::AcquireRequest& request,
                       std::vector<KeyValue> keys, std::int64_t revision)
{
  auto found = m_mine.find(name);
  if (found == m_mine.end()) {
    return;
  }
  Mine& mine = found->second;
  auto ours =
    std::find_if(keys.begin(), keys.end(), [&](const KeyValue& kv) { return kv.key == mine.key; });
  if (ours == keys.end()) { // revoked or expired while queued: queue again
    m_mine.erase(found);
    grant(name, request);
    return;
  }
  mine.revision = ours->create_revision;
  Outcome outcome{.op = Op::acquire};
  lock::AcquireResult& result = outcome.acquire;
  if (ours == keys.begin()) {
    mine.owner = true;
    watch_own_key(name);
    result.acquired = true;
    result.fence = mine.revision;
    m_answers.answer(std::move(outcome));
    return;
  }
  result.holder = holder_of(keys.front());
  result.holders = 1;
  result.lease = lock::AcquireResult::Lease::no_expiry;
  if (request.ticket.mode == lock::WaitMode::once) {
    std::int64_t lease = mine.lease;
    m_mine.erase(found);
    revoke(lease, [this, outcome](Answer&) { m_answers.answer(outcome); });
    return;
  }
  mine.predecessor = std::prev(ours)->key;
  mine.watch_from = revision + 1;
  Millis cap = request.ticket.max_block > Millis(0) ? request.ticket.max_block : longest_block;
  // The waiter's lease is renewed by its next attempt: wake up well before it could end.
  result.block = std::min({cap, longest_block, Millis(mine.ttl_s * 1000 / 3)});
  result.block = std::max(result.block, Millis(1));
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
      bool compacted = int_field(result, "compact_revision") > 0;
      if (gone || compacted || bool_field(result, "canceled")) {
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

void EtcdStore::start_wait_for_wake(const lock::LockName& name, const lock::WaitTicket&,
                                    Millis block)
{
  std::string key = name.str();
  auto found = m_mine.find(key);
  if (found == m_mine.end() || found->second.owner || found->second.predecessor.empty()) {
    m_answers.answer(Op::wait_for_wake);
    return;
  }
  Mine& mine = found->second;
  m_client.cancel(mine.wake_watch);
  mine.wake_by = util::monotonic_now() + block;
  mine.wake_watch = m_client.stream(
    "/v3/watch", watch_deletes_request(mine.predecessor, mine.watch_from),
    [this, key](const Json& result) {
      bool gone = result.contains("events") && !result["events"].empty();
      if (gone || int_field(result, "compact_revision") > 0 || bool_field(result, "canceled")) {
        end_wait(key);
      }
    },
    [this, key](const Error& why) {
      util::log_verbose("the watch of lock '{}' ended ({}); asking again", key, why.what());
      end_wait(key);
    });
}

void EtcdStore::end_wait(const std::string& name)
{
  auto found = m_mine.find(name);
  if (found == m_mine.end() || !found->second.wake_by) {
    return;
  }
  m_client.cancel(found->second.wake_watch);
  found->second.wake_watch = 0;
  found->second.wake_by.reset();
  m_answers.answer(Op::wait_for_wake);
}

void EtcdStore::revoke(std::int64_t lease, std::function<void(Answer&)> done)
{
  m_client.post("/v3/lease/revoke", lease_request(lease), std::move(done));
}

void EtcdStore::find_token(const std::string& name, const std::string& token,
                           std::function<void(std::optional<Error>, std::optional<KeyValue>)> found)
{
  std::string prefix = lock_prefix(m_prefix, name);
  std::string fingerprint = token_fingerprint(token);
  m_client.post("/v3/kv/range", range_prefix_request(prefix),
                [prefix, fingerprint, found](Answer& a) {
                  if (a.error) {
                    found(a.error, std::nullopt);
                    return;
                  }
                  for (const KeyValue& kv : lock_keys(a.body, prefix)) {
                    if (fingerprint_of(kv) == fingerprint) {
                      found(std::nullopt, kv);
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
    m_client.post("/v3/lease/keepalive", lease_request(mine.lease), [this, key](Answer& a) {
      Outcome kept{.op = Op::renew};
      auto held = m_mine.find(key);
      if (a.error && !lease_not_found(a.body)) {
        kept.error = a.error;
      }
      if (a.error || held == m_mine.end() || kept_ttl(a.body) <= 0) {
        m_answers.answer(std::move(kept)); // the lease is gone: so is the key
        return;
      }
      std::int64_t revision = held->second.revision;
      m_client.post("/v3/kv/range", range_key_request(held->second.key),
                    [this, revision](Answer& r) {
                      Outcome checked{.op = Op::renew, .error = r.error};
                      if (!r.error) {
                        std::vector<KeyValue> kvs = key_values(r.body);
                        checked.held = kvs.size() == 1 && kvs.front().create_revision == revision;
                      }
                      m_answers.answer(std::move(checked));
                    });
    });
    return;
  }
  // Another process's token (a nested run, `dlock renew`): its key carries the fingerprint.
  find_token(key, request.token, [this](std::optional<Error> error, std::optional<KeyValue> kv) {
    if (error || !kv) {
      m_answers.answer(Op::renew, error);
      return;
    }
    m_client.post("/v3/lease/keepalive", lease_request(kv->lease), [this](Answer& a) {
      Outcome outcome{.op = Op::renew};
      if (a.error && !lease_not_found(a.body)) {
        outcome.error = a.error;
      }
      outcome.held = !a.error && kept_ttl(a.body) > 0;
      m_answers.answer(std::move(outcome));
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
    std::int64_t lease = mine.lease;
    bool owner = mine.owner;
    // Whether the key is still ours (a read), then one write: revoking the lease deletes it.
    std::int64_t revision = mine.revision;
    m_client.post(
      "/v3/kv/range", range_key_request(mine.key), [this, lease, owner, revision](Answer& a) {
        Outcome outcome{.op = Op::release, .error = a.error};
        std::vector<KeyValue> kvs = a.error ? std::vector<KeyValue>{} : key_values(a.body);
        outcome.held = owner && kvs.size() == 1 && kvs.front().create_revision == revision;
        revoke(lease, [this, outcome](Answer& r) mutable {
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
    m_client.post("/v3/kv/range", range_prefix_request(prefix), [this, prefix](Answer& a) {
      std::vector<KeyValue> keys = a.error ? std::vector<KeyValue>{} : lock_keys(a.body, prefix);
      if (a.error || keys.empty()) {
        m_answers.answer(Op::release, a.error);
        return;
      }
      revoke(keys.front().lease, [this](Answer& r) {
        Outcome outcome{.op = Op::release, .held = true};
        if (r.error && !lease_not_found(r.body)) {
          outcome.error = r.error;
        }
        m_answers.answer(std::move(outcome));
      });
    });
    return;
  }
  find_token(key, token, [this](std::optional<Error> error, std::optional<KeyValue> kv) {
    if (error || !kv) {
      m_answers.answer(Op::release, error);
      return;
    }
    revoke(kv->lease, [this](Answer& r) {
      Outcome outcome{.op = Op::release, .held = !r.error};
      if (r.error && !lease_not_found(r.body)) {
        outcome.error = r.error;
      }
      m_answers.answer(std::move(outcome));
    });
  });
}

void EtcdStore::start_withdraw(const lock::LockName& name, const lock::WaitTicket&)
{
  auto found = m_mine.find(name.str());
  if (found == m_mine.end() || found->second.owner) {
    m_answers.answer(Op::withdraw);
    return;
  }
  std::int64_t lease = found->second.lease;
  m_client.cancel(found->second.wake_watch);
  m_mine.erase(found);
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
  m_client.cancel_requests_except(keep); // every transfer but the watches of held keys
  m_answers.clear();
}

Error EtcdStore::timed_out() noexcept
{
  abandon();
  return Error(ExitCode::unavailable, "etcd at {} did not answer in time", m_client.current());
}

lock::LockStatus EtcdStore::status(const lock::LockName& name, util::TimePoint deadline)
{
  std::string prefix = lock_prefix(m_prefix, name.str());
  Answer a = m_client.call("/v3/kv/range", range_prefix_request(prefix), deadline);
  if (a.error) {
    throw *a.error;
  }
  std::vector<KeyValue> keys = lock_keys(a.body, prefix);
  lock::LockStatus status;
  status.name = name.str();
  status.server_time_ms = util::unix_ms();
  if (keys.empty()) {
    return status;
  }
  status.held = true;
  status.holder = holder_of(keys.front());
  status.last_fence = keys.back().create_revision;
  status.waiters = std::int64_t(keys.size()) - 1;
  Answer ttl = m_client.call("/v3/lease/timetolive", lease_request(keys.front().lease), deadline);
  if (ttl.error) {
    throw *ttl.error;
  }
  status.ttl_ms = int_field(ttl.body, "TTL") * 1000;
  return status;
}

std::vector<lock::LockStatus> EtcdStore::list(std::string_view pattern, Millis timeout)
{
  util::TimePoint deadline = util::deadline_after(timeout);
  Answer a = m_client.call("/v3/kv/range", range_prefix_request(m_prefix), deadline);
  if (a.error) {
    throw *a.error;
  }
  std::map<std::string, std::vector<KeyValue>> by_name;
  for (KeyValue& kv : key_values(a.body)) {
    std::size_t slash = kv.key.rfind('/');
    if (slash == std::string::npos || slash < m_prefix.size()) {
      continue;
    }
    std::string name = kv.key.substr(m_prefix.size(), slash - m_prefix.size());
    if (name.empty() || name.size() > lock::max_name_bytes
        || !is_lock_key(kv.key, lock_prefix(m_prefix, name))) {
      continue; // not a lock of dlock's (another tenant's key)
    }
    by_name[name].push_back(std::move(kv)); // oldest first, as the range sorted them
  }
  std::vector<lock::LockStatus> found;
  std::string glob(pattern);
  for (auto& [name, keys] : by_name) {
    if (::fnmatch(glob.c_str(), name.c_str(), 0) != 0) {
      continue;
    }
    lock::LockStatus status;
    status.name = name;
    status.held = true;
    status.server_time_ms = util::unix_ms();
    status.holder = holder_of(keys.front());
    status.last_fence = keys.back().create_revision;
    status.waiters = std::int64_t(keys.size()) - 1;
    Answer ttl = m_client.call("/v3/lease/timetolive", lease_request(keys.front().lease),
                               util::deadline_after(timeout));
    if (ttl.error) {
      throw *ttl.error;
    }
    status.ttl_ms = int_field(ttl.body, "TTL") * 1000;
    found.push_back(std::move(status));
  }
  return found;
}

} // namespace dlock::etcd

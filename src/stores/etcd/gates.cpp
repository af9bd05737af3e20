// The waiters that take nothing on etcd:// (dlock wait, barrier, latch): EtcdStore's
// lock::Coordination. Every key they write lies outside every lock's queue (side_key) and is on
// a lease, so that nothing is left forever; what they read back is checked (another tenant's
// value is not a count, not a barrier's state, not a party).
#include "stores/etcd/etcd_store.hpp"

#include "util/log.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <utility>

namespace dlock::etcd {

using lock::Outcome;
using util::Millis;

namespace {

// How long a barrier's state is kept after its last arrival (as on Redis): its generation
// outlives every party that may still ask whether it tripped.
constexpr std::int64_t barrier_keep_s = 24 * 3600;
// A party's arrival key lives on a lease of this many seconds, kept alive by its attempts
// (each blocks a third of it at most), so that a party that died is no longer counted.
constexpr std::int64_t party_ttl_s = 15;
// The most attempts at a transaction that lost a race (another party, a count-down).
constexpr int max_tries = 50;

std::int64_t header_revision(const Json& body)
{
  return body.is_object() && body.contains("header") ? int_field(body["header"], "revision") : 0;
}

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

// A name's queue (every key under prefix, oldest first) and its candidates' records, read at
// one revision.
Json queue_reads(const std::string& prefix, const std::string& records)
{
  return txn_request(Json::array(),
                     Json::array({{{"request_range", range_prefix_request(prefix)}},
                                  {{"request_range", range_prefix_request(records)}}}));
}

// A decimal count of at most 18 digits, or nullopt (another tenant's value).
std::optional<std::int64_t> count_of(const KeyValue& kv)
{
  std::int64_t n = 0;
  const char* end = kv.value.data() + kv.value.size();
  auto [ptr, error] = std::from_chars(kv.value.data(), end, n);
  if (kv.value.empty() || kv.value.size() > 18 || error != std::errc() || ptr != end || n < 0) {
    return std::nullopt;
  }
  return n;
}

// A latch dlock could have set: a count on a lease (so that it expires).
std::optional<std::int64_t> latch_count(const std::optional<KeyValue>& kv)
{
  return kv && kv->lease != 0 ? count_of(*kv) : std::nullopt;
}

Json delete_range_op(const std::string& prefix, const std::string& end)
{
  return {
    {"request_delete_range", {{"key", base64_encode(prefix)}, {"range_end", base64_encode(end)}}}};
}

Json mod_revision_is(const std::string& key, std::int64_t revision)
{
  return {{"key", base64_encode(key)},
          {"target", "MOD"},
          {"result", "EQUAL"},
          {"mod_revision", std::to_string(revision)}};
}

// The arrivals of a barrier's generation: NAME#party:<generation>: then the party's lease.
std::string party_prefix(const std::string& barrier_key, std::int64_t generation)
{
  return fmt::format("{}:{}:", barrier_key, generation);
}

} // namespace

void EtcdStore::start_gate(const lock::LockName& name, const lock::GateRequest& request)
{
  switch (request.ticket.mode) {
  case lock::WaitMode::watch:
    gate_watch(name.str(), request);
    return;
  case lock::WaitMode::barrier:
    gate_barrier(name.str(), request);
    return;
  case lock::WaitMode::latch:
    gate_latch(name.str(), request);
    return;
  case lock::WaitMode::leader:
    gate_leader(name.str(), request);
    return;
  case lock::WaitMode::once:
  case lock::WaitMode::wait:
  case lock::WaitMode::fair:
    break;
  }
  m_answers.answer(Op::gate, Error(ExitCode::internal, "a lock waiter at a gate"));
}

void EtcdStore::gate_shut(const std::string& name, lock::GateResult result, std::string watched,
                          Wakes wakes, std::int64_t revision)
{
  Gate& gate = m_gates[name];
  gate.watched = std::move(watched);
  gate.wakes = wakes;
  gate.watch_from = revision + 1;
  Outcome outcome{.op = Op::gate};
  outcome.gate = std::move(result);
  m_answers.answer(std::move(outcome));
}

// wait: open when the queue is empty, or when the holders seen at the first attempt (the
// ticket's since: the newest one's create revision) have all gone; else the waiter watches the
// deletion of the oldest holder's key.
void EtcdStore::gate_watch(const std::string& name, const lock::GateRequest& request)
{
  std::int64_t since = request.ticket.since;
  Millis cap = std::min(request.ticket.max_block, Millis(30'000));
  read_queue_for_gate(name,
                      [this, name, since, cap](std::vector<Member> queue, std::int64_t revision) {
                        std::size_t holding = holders_of(queue);
                        std::int64_t oldest = holding > 0 ? queue.front().kv.create_revision : 0;
                        std::int64_t newest = 0;
                        for (std::size_t i = 0; i < holding; ++i) {
                          newest = std::max(newest, queue[i].kv.create_revision);
                        }
                        if (holding == 0 || (since > 0 && oldest > since)) {
                          m_gates.erase(name);
                          Outcome open{.op = Op::gate};
                          open.gate.open = true;
                          m_answers.answer(std::move(open));
                          return;
                        }
                        lock::GateResult result;
                        result.since = since > 0 ? since : newest;
                        result.lock.holder = holder_of(queue.front().kv);
                        result.lock.holders = static_cast<std::int64_t>(holding);
                        result.block = std::max(cap, Millis(1));
                        gate_shut(name, result, queue.front().kv.key, Wakes::deletion, revision);
                      });
}

// leader --watch: the term is the leader's (the queue's first key's) create revision, 0 when
// there is none; open when it is not the one seen, or when the leader's key was written since
// the last look (a new value under the same term: a Go client's Proclaim); else the watcher
// waits for any change of the queue (the leader's key deleted: the next key's owner leads
// then, or nobody; a candidate's key put). The gate and its watch live until the watcher
// withdraws: opening keeps them. No timed re-check but the usual ceiling of one block (30 s),
// a safety net for a watch that ended unannounced.
void EtcdStore::gate_leader(const std::string& name, const lock::GateRequest& request)
{
  std::string prefix = lock_prefix(m_prefix, name);
  std::int64_t seen = request.ticket.since;
  Millis cap = std::min(request.ticket.max_block, Millis(30'000));
  read_queue_for_gate(
    name, [this, name, prefix, seen, cap](std::vector<Member> queue, std::int64_t revision) {
      lock::GateResult result;
      std::int64_t leader_mod = 0;
      if (!queue.empty()) {
        result.since = queue.front().kv.create_revision;
        result.lock.holder = holder_of(queue.front().kv);
        result.lock.holders = static_cast<std::int64_t>(holders_of(queue));
        leader_mod = queue.front().kv.mod_revision;
      }
      Gate& gate = m_gates[name];
      bool rewritten = gate.kept && leader_mod != gate.leader_mod;
      gate.kept = true;
      gate.watched = prefix;
      gate.wakes = Wakes::any_under;
      gate.read_at = revision;
      gate.watch_from = revision + 1;
      gate.leader_mod = leader_mod;
      if (result.since != seen || rewritten) {
        result.open = true;
        m_answers.answer(Outcome{.op = Op::gate, .gate = result});
        return;
      }
      result.block = std::max(cap, Millis(1));
      m_answers.answer(Outcome{.op = Op::gate, .gate = result});
    });
}

void EtcdStore::read_queue_for_gate(
  const std::string& name, std::function<void(std::vector<Member>, std::int64_t revision)> seen)
{
  std::string prefix = lock_prefix(m_prefix, name);
  std::string records = records_of(name);
  m_client.post(
    "/v3/kv/txn", queue_reads(prefix, records),
    [this, prefix, records, seen = std::move(seen)](Answer& a) {
      const Json* range = a.error ? nullptr : txn_range(a.body, 0);
      if (!a.error && range == nullptr) {
        a.error = Error(ExitCode::internal, "etcd at {} answered a transaction without its range",
                        m_client.current());
      }
      if (a.error) {
        m_answers.answer(Op::gate, a.error);
        return;
      }
      seen(queue_of(*range, prefix, txn_range(a.body, 1), records), header_revision(a.body));
    });
}

// latch --wait: open at a count of zero; else (or not set yet) the waiter watches the key.
void EtcdStore::gate_latch(const std::string& name, const lock::GateRequest& request)
{
  std::string key = side_key(m_prefix, name, "latch");
  Millis cap = std::min(request.ticket.max_block, Millis(30'000));
  m_client.post("/v3/kv/range", range_key_request(key), [this, name, key, cap](Answer& a) {
    if (a.error) {
      m_answers.answer(Op::gate, a.error);
      return;
    }
    std::optional<std::int64_t> count = latch_count(one_key(&a.body));
    lock::GateResult result;
    result.count = count.value_or(-1);
    if (count && *count == 0) {
      m_gates.erase(name);
      result.open = true;
      m_answers.answer(Outcome{.op = Op::gate, .gate = result});
      return;
    }
    result.block = std::max(cap, Millis(1));
    gate_shut(name, result, key, Wakes::change, header_revision(a.body));
  });
}

void EtcdStore::start_set_latch(const lock::LockName& name, std::int64_t count, Millis expire)
{
  std::string key = side_key(m_prefix, name.str(), "latch");
  std::int64_t ttl_s = std::max<std::int64_t>(1, (expire.count() + 999) / 1000);
  m_client.post("/v3/lease/grant", grant_request(ttl_s), [this, key, count](Answer& g) {
    std::int64_t lease = g.error ? 0 : int_field(g.body, "ID");
    if (lease == 0) {
      m_answers.answer(Op::set_latch,
                       g.error.value_or(Error(ExitCode::internal, "etcd at {} granted no lease",
                                              m_client.current())));
      return;
    }
    // The latch set before (if any) is replaced; its lease, with no key left, runs out.
    m_client.post(
      "/v3/kv/txn",
      txn_request(Json::array(), Json::array({put_op(key, std::to_string(count), lease)})),
      [this](Answer& w) { m_answers.answer(Op::set_latch, w.error); });
  });
}

void EtcdStore::start_count_down(const lock::LockName& name) { count_down_from(name.str(), 0); }

void EtcdStore::count_down_from(const std::string& name, int tries)
{
  std::string key = side_key(m_prefix, name, "latch");
  m_client.post("/v3/kv/range", range_key_request(key), [this, name, key, tries](Answer& a) {
    if (a.error) {
      m_answers.answer(Op::count_down, a.error);
      return;
    }
    std::optional<KeyValue> kv = one_key(&a.body);
    std::optional<std::int64_t> count = latch_count(kv);
    if (!count || *count == 0) {
      Outcome left{.op = Op::count_down};
      left.gate.count = count.value_or(-1);
      m_answers.answer(std::move(left));
      return;
    }
    // One step down, if nobody counted meanwhile (else read again); on the key's own lease.
    m_client.post("/v3/kv/txn",
                  txn_request(Json::array({mod_revision_is(key, kv->mod_revision)}),
                              Json::array({put_op(key, std::to_string(*count - 1), kv->lease)})),
                  [this, name, tries, left = *count - 1](Answer& w) {
                    if (w.error) {
                      m_answers.answer(Op::count_down, w.error);
                      return;
                    }
                    if (!txn_succeeded(w.body)) {
                      if (tries + 1 >= max_tries) {
                        m_answers.answer(Op::count_down,
                                         Error(ExitCode::unavailable,
                                               "latch '{}' kept changing under {} count-downs",
                                               name, tries));
                        return;
                      }
                      count_down_from(name, tries + 1);
                      return;
                    }
                    Outcome done{.op = Op::count_down};
                    done.gate.count = left;
                    m_answers.answer(std::move(done));
                  });
  });
}

// barrier: a party gets a lease (its arrival key goes with it if it dies), then arrives.
void EtcdStore::gate_barrier(const std::string& name, const lock::GateRequest& request)
{
  auto found = m_gates.find(name);
  if (found != m_gates.end() && found->second.party_lease != 0) {
    m_client.post(
      "/v3/lease/keepalive", lease_request(found->second.party_lease),
      [this, name, request](Answer& a) {
        auto gate = m_gates.find(name);
        if (gate == m_gates.end()) {
          return;
        }
        if (a.error
            || int_field(
                 a.body.is_object() && a.body.contains("result") ? a.body["result"] : a.body, "TTL")
                 <= 0) {
          gate->second.party_lease = 0; // lapsed: arrive again on a new one
          gate_barrier(name, request);
          return;
        }
        barrier_arrive(name, request);
      });
    return;
  }
  m_client.post("/v3/lease/grant", grant_request(party_ttl_s), [this, name, request](Answer& g) {
    std::int64_t lease = g.error ? 0 : int_field(g.body, "ID");
    if (lease == 0) {
      m_answers.answer(Op::gate,
                       g.error.value_or(Error(ExitCode::internal, "etcd at {} granted no lease",
                                              m_client.current())));
      return;
    }
    m_gates[name].party_lease = lease;
    barrier_arrive(name, request);
  });
}

void EtcdStore::barrier_arrive(const std::string& name, const lock::GateRequest& request)
{
  std::string state_key = side_key(m_prefix, name, "barrier");
  std::string parties_key = side_key(m_prefix, name, "party");
  m_client.post(
    "/v3/kv/txn",
    txn_request(Json::array(),
                Json::array({range_op(state_key),
                             {{"request_range", range_prefix_request(parties_key + ":")}}})),
    [this, name, request, state_key, parties_key](Answer& a) {
      auto gate = m_gates.find(name);
      if (gate == m_gates.end()) {
        return;
      }
      if (a.error) {
        m_answers.answer(Op::gate, a.error);
        return;
      }
      std::int64_t lease = gate->second.party_lease;
      std::int64_t revision = header_revision(a.body);
      std::optional<KeyValue> state = one_key(txn_range(a.body, 0));
      Json record = state && state->lease != 0 ? record_of(*state) : Json();
      std::int64_t generation = int_field(record, "generation");
      std::int64_t in_progress = int_field(record, "parties");
      std::int64_t joined = request.ticket.generation;
      lock::GateResult result;
      if (joined > 0 && generation > joined) { // tripped since this party joined
        std::int64_t own = gate->second.party_lease;
        m_gates.erase(gate);
        result.open = true;
        result.generation = joined;
        result.parties = request.parties;
        revoke(own, [this, result](Answer&) {
          m_answers.answer(Outcome{.op = Op::gate, .gate = result});
        });
        return;
      }
      if (generation <= 0) {
        generation = revision; // a new barrier: above every generation it can have had
      }
      std::string prefix = party_prefix(parties_key, generation);
      std::string mine = prefix + fmt::format("{:x}", static_cast<std::uint64_t>(lease));
      std::int64_t arrived = 0;
      bool here = false;
      const Json* range = txn_range(a.body, 1);
      for (const KeyValue& kv : range ? key_values(*range) : std::vector<KeyValue>{}) {
        if (kv.lease != 0 && is_lock_key(kv.key, prefix)) {
          ++arrived;
          here = here || kv.key == mine;
        }
      }
      result.generation = generation;
      if (arrived > 0 && in_progress != request.parties) {
        result.parties = in_progress; // another barrier's parties: nothing registered
        m_answers.answer(Outcome{.op = Op::gate, .gate = result});
        return;
      }
      result.parties = request.parties;
      arrived += here ? 0 : 1;
      Json compare = Json::array({state ? mod_revision_is(state_key, state->mod_revision)
                                        : create_revision_is(state_key, 0)});
      auto write = [this, name, request, state_key, compare, generation, arrived, mine, lease,
                    prefix, result](std::int64_t state_lease) mutable {
        bool last = arrived >= request.parties;
        Json state_value = Json{{"generation", std::to_string(last ? generation + 1 : generation)},
                                {"parties", std::to_string(request.parties)}}
                             .dump();
        Json ops = Json::array({put_op(state_key, state_value, state_lease)});
        if (last) {
          std::string end = prefix;
          end.back() = static_cast<char>(end.back() + 1);
          ops.push_back(delete_range_op(prefix, end)); // the others' keys: they watch them
        } else {
          ops.push_back(put_op(mine, "", lease));
        }
        m_client.post(
          "/v3/kv/txn", txn_request(compare, ops),
          [this, name, request, last, arrived, mine, result](Answer& w) mutable {
            if (w.error) {
              m_answers.answer(Op::gate, w.error);
              return;
            }
            if (!txn_succeeded(w.body)) { // another party arrived meanwhile: again
              barrier_arrive(name, request);
              return;
            }
            if (last) {
              auto passed = m_gates.find(name);
              std::int64_t own = passed != m_gates.end() ? passed->second.party_lease : 0;
              m_gates.erase(name);
              result.open = true;
              revoke(own, [this, result](Answer&) {
                m_answers.answer(Outcome{.op = Op::gate, .gate = result});
              });
              return;
            }
            result.arrived = arrived;
            result.block = std::max(
              std::min(request.ticket.max_block, Millis(party_ttl_s * 1000 / 3)), Millis(1));
            gate_shut(name, result, mine, Wakes::deletion, header_revision(w.body));
          });
      };
      if (state && state->lease != 0 && record.is_object()) {
        write(state->lease);
        return;
      }
      m_client.post(
        "/v3/lease/grant", grant_request(barrier_keep_s), [this, write](Answer& g) mutable {
          std::int64_t kept = g.error ? 0 : int_field(g.body, "ID");
          if (kept == 0) {
            m_answers.answer(
              Op::gate, g.error.value_or(Error(ExitCode::internal, "etcd at {} granted no lease",
                                               m_client.current())));
            return;
          }
          write(kept);
        });
    });
}

void EtcdStore::withdraw_party(const std::string& name, const lock::WaitTicket& ticket)
{
  auto found = m_gates.find(name);
  std::int64_t lease = found != m_gates.end() ? found->second.party_lease : 0;
  if (found != m_gates.end()) {
    m_client.cancel(found->second.wake_watch);
    m_gates.erase(found);
  }
  // Tripped before the withdrawal (its generation passed): it passed the barrier.
  std::string state_key = side_key(m_prefix, name, "barrier");
  m_client.post("/v3/kv/range", range_key_request(state_key), [this, lease, ticket](Answer& a) {
    std::optional<KeyValue> state = a.error ? std::nullopt : one_key(&a.body);
    Json record = state && state->lease != 0 ? record_of(*state) : Json();
    bool tripped = ticket.generation > 0 && int_field(record, "generation") > ticket.generation;
    auto done = [this, tripped](Answer&) {
      Outcome outcome{.op = Op::withdraw};
      outcome.gate.open = tripped;
      m_answers.answer(std::move(outcome));
    };
    if (lease == 0) {
      Answer none;
      done(none);
      return;
    }
    revoke(lease, done); // its arrival key goes with its lease
  });
}

void EtcdStore::start_gate_wait(const std::string& name, Millis block)
{
  auto found = m_gates.find(name);
  if (found == m_gates.end() || found->second.watched.empty()) {
    m_answers.answer(Op::wait_for_wake);
    return;
  }
  Gate& gate = found->second;
  gate.wake_by = util::monotonic_now() + block;
  if (gate.kept && m_client.active(gate.wake_watch)) {
    if (gate.changed_at > gate.read_at) {
      end_gate_wait(name); // it changed during the read, or after it
    }
    return;
  }
  m_client.cancel(gate.wake_watch);
  Json request =
    gate.wakes == Wakes::any_under  ? watch_prefix_request(gate.watched, gate.watch_from)
    : gate.wakes == Wakes::deletion ? watch_deletes_request(gate.watched, gate.watch_from)
                                    : Json{{"create_request",
                                            {{"key", base64_encode(gate.watched)},
                                             {"start_revision", std::to_string(gate.watch_from)}}}};
  gate.changed_at = 0;
  gate.wake_watch = m_client.stream(
    "/v3/watch", request,
    [this, name](const Json& result) {
      auto watching = m_gates.find(name);
      if (watching == m_gates.end()) {
        return;
      }
      Gate& g = watching->second;
      if (watch_ended(result)) {
        m_client.cancel(std::exchange(g.wake_watch, 0)); // the next wait watches anew
        end_gate_wait(name);
        return;
      }
      if (!result.contains("events") || !result["events"].is_array() || result["events"].empty()) {
        return;
      }
      for (const Json& event : result["events"]) {
        if (event.is_object() && event.contains("kv")) {
          g.changed_at = std::max(g.changed_at, key_value(event["kv"]).mod_revision);
        }
      }
      if (!g.kept || g.changed_at > g.read_at) {
        end_gate_wait(name);
      }
    },
    [this, name](const Error& why) {
      util::log_verbose("the watch of '{}' ended ({}); asking again", name, why.what());
      if (auto watching = m_gates.find(name); watching != m_gates.end()) {
        watching->second.wake_watch = 0;
      }
      end_gate_wait(name);
    });
}

void EtcdStore::end_gate_wait(const std::string& name)
{
  auto found = m_gates.find(name);
  if (found == m_gates.end() || !found->second.wake_by) {
    return;
  }
  if (!found->second.kept) {
    m_client.cancel(std::exchange(found->second.wake_watch, 0));
  }
  found->second.wake_by.reset();
  m_answers.answer(Op::wait_for_wake);
}

} // namespace dlock::etcd

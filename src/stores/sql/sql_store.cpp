#include "stores/sql/sql_store.hpp"

#include "util/clock.hpp"
#include "util/log.hpp"

#include <fnmatch.h>

#include <algorithm>

namespace dlock::sql {

using lock::Outcome;
using util::Millis;

namespace {

// The longest a waiter blocks in one wait in the server before it asks again.
constexpr Millis longest_block{30'000};
// The longest a --supersede waiter blocks in the server: a newer one cannot wake it there,
// so it looks again this often.
constexpr Millis supersede_block{1'000};

// Whether the request needs the side record (the note alone does not: it is shown when kept).
bool needs_policy(const lock::AcquireRequest& request)
{
  const lock::LockPolicy& p = request.policy;
  return p.min_hold > Millis(0) || p.lock_delay > Millis(0) || p.replace || p.supersede;
}

const char* policy_named(const lock::AcquireRequest& request)
{
  const lock::LockPolicy& p = request.policy;
  if (p.min_hold > Millis(0)) {
    return "--min-hold";
  }
  if (p.lock_delay > Millis(0)) {
    return "--lock-delay";
  }
  return p.replace ? "--replace" : "--supersede";
}

} // namespace

SqlStore::SqlStore(std::string server, std::string shown, std::string prefix,
                   std::string idle_timeout_setting)
  : SessionStore(std::move(idle_timeout_setting)), m_server(std::move(server)),
    m_shown(std::move(shown)), m_prefix(std::move(prefix))
{
}

SqlStore::Named* SqlStore::find(const lock::LockName& name)
{
  auto found = m_named.find(name.str());
  if (found == m_named.end() || !found->second.session->owned()) {
    return nullptr;
  }
  return &found->second;
}

SqlStore::Named& SqlStore::named(const lock::LockName& name, const std::string& token,
                                 const lock::HolderInfo& me)
{
  Named* existing = find(name);
  if (existing != nullptr && !existing->session->broken() && !existing->closing) {
    return *existing;
  }
  m_named.erase(name.str()); // ended, released, or opened by the process this one was forked from
  Named n;
  n.prefixed = m_prefix + name.str();
  n.token = token;
  n.holder = me;
  n.session = open_session(n);
  std::string key = name.str();
  n.session->on_end([this, key](const Error& error) {
    auto found = m_named.find(key);
    if (found != m_named.end() && found->second.held && !found->second.session->busy()) {
      Outcome ended = Outcome::of(Op::disconnected, error);
      ended.lease_ended = true; // the session was the lease: the lock went with it
      answer(std::move(ended));
    }
  });
  return m_named.insert_or_assign(key, std::move(n)).first->second;
}

Session& SqlStore::control_session()
{
  if (!m_control || m_control->broken() || !m_control->owned()) {
    m_control.reset();
    m_control = open_control();
  }
  return *m_control;
}

void SqlStore::start_acquire(const lock::LockName& name, const lock::AcquireRequest& request)
{
  Named& n = named(name, request.token, request.holder);
  n.kind = request.kind;
  n.token = request.token;
  n.holder = request.holder;
  n.closed_until.reset();
  if (n.held) {
    // Granted through a wait, or asked again for a lock this session holds (a retry after a
    // lost answer): it is ours; taking it again would count it twice.
    n.granted_by_wait = false;
    check_policy(name.str(), request);
    return;
  }
  if (!n.limit_read) {
    read_limit(name.str(), request);
    return;
  }
  if (ttl_allowed(name.str(), request)) {
    try_lock(name.str(), request);
  }
}

void SqlStore::limit_found(const std::string& name, const lock::AcquireRequest& request,
                           std::optional<SessionLimit> limit)
{
  Named& n = m_named.at(name);
  n.limit_read = true;
  n.limit = std::move(limit);
  if (ttl_allowed(name, request)) {
    before_first_try(name, [this, name, request] { try_lock(name, request); });
  }
}

bool SqlStore::ttl_allowed(const std::string& name, const lock::AcquireRequest& request)
{
  try {
    check_ttl(request.ttl, m_named.at(name).limit, m_server);
    return true;
  } catch (const Error& error) {
    answer(Op::acquire, error);
    return false;
  }
}

void SqlStore::tried(const std::string& name, const lock::AcquireRequest& request, bool taken)
{
  if (!taken) {
    report_holder(name, request);
    return;
  }
  m_named.at(name).held = true;
  after_taken(name, [this, name, request] { check_policy(name, request); });
}

Error SqlStore::policy_refused(const lock::AcquireRequest& request) const
{
  return Error(m_no_policy->code(),
               "{} on {} needs the table dlock_policy, which dlock cannot use: {}",
               policy_named(request), m_server, m_no_policy->what());
}

void SqlStore::refuse(const std::string& name, const Error& error)
{
  m_named.at(name).held = false;
  let_go(name);
  answer(Op::acquire, error);
}

void SqlStore::check_policy(const std::string& name, const lock::AcquireRequest& request)
{
  if (m_no_policy) {
    if (needs_policy(request)) {
      refuse(name, policy_refused(request));
    } else {
      fence(name, false);
    }
    return;
  }
  read_policy(name, false, true, [this, name, request](PolicyRead read) {
    if (read.error && m_named.at(name).session->broken()) {
      refuse(name, *read.error);
      return;
    }
    if (read.error && needs_policy(request)) {
      refuse(name, Error(ExitCode::config, "{} on {}: cannot read the table dlock_policy: {}",
                         policy_named(request), m_server, read.error->what()));
      return;
    }
    if (read.error) { // a table another tenant changed: plain locking goes on without it
      util::log_verbose("the side record cannot be read: {}", read.error->what());
      fence(name, false);
      return;
    }
    if (read.unavailable) {
      m_no_policy = read.unavailable;
      util::log_verbose("no side records (min-hold, lock-delay, note): {}",
                        read.unavailable->what());
      check_policy(name, request);
      return;
    }
    Named& n = m_named.at(name);
    std::string fp = lock::token_fingerprint(n.token);
    Closed closed = read.row ? closed_to(*read.row, fp, read.now) : Closed{};
    if (closed.why != Closed::Why::open) {
      if (closed.stamp) {
        write_policy(name, false,
                     PolicyWrite{.kind = PolicyWrite::Kind::stamp, .token_fp = read.row->token_fp},
                     nullptr);
      }
      n.held = false;
      let_go(name);
      Outcome outcome = Outcome::of(Op::acquire);
      lock::AcquireResult& result = outcome.acquire;
      result.lease = closed.why == Closed::Why::min_hold ? lock::AcquireResult::Lease::min_hold
                                                         : lock::AcquireResult::Lease::lock_delay;
      result.holder_ttl = closed.left;
      result.holder = read.row->holder.value_or(lock::HolderInfo{});
      Millis cap = request.ticket.max_block > Millis(0) ? request.ticket.max_block : longest_block;
      result.block = std::min({cap, longest_block, closed.left});
      if (request.policy.supersede) {
        result.block = std::min(result.block, supersede_block);
      }
      n.closed_until = util::monotonic_now() + closed.left;
      answer_waiter(name, request, read.row, read.now, std::move(outcome));
      return;
    }
    std::optional<lock::HolderInfo> newer;
    if (read.row && request.policy.supersede && request.ticket.registered) {
      newer = superseded(*read.row, request.ticket.waiter_id, read.now);
    }
    if (newer) { // granted through a wait, but a newer --supersede waiter came meanwhile
      n.held = false;
      let_go(name);
      Outcome outcome = Outcome::of(Op::acquire);
      outcome.acquire.superseded_by = newer;
      answer(std::move(outcome));
      return;
    }
    lock::HolderInfo me = request.holder;
    me.acquired_ms = read.now;
    me.ttl_ms = request.ttl.count();
    PolicyWrite claim{
      .kind = PolicyWrite::Kind::claim, .token_fp = fp, .holder = encode_holder(me)};
    if (request.policy.min_hold > Millis(0)) {
      claim.hold_until = read.now + request.policy.min_hold.count();
    }
    claim.delay_ms = request.policy.lock_delay.count();
    write_policy(
      name, false, claim, [this, name, request](const std::optional<Error>& error, std::int64_t) {
        if (error && needs_policy(request)) {
          refuse(name, Error(error->code(), "{} on {}: cannot write the table dlock_policy: {}",
                             policy_named(request), m_server, error->what()));
          return;
        }
        if (error) {
          util::log_verbose("the holder's side record was not written: {}", error->what());
        }
        fence(name, false);
      });
  });
}

void SqlStore::fence(const std::string& name, bool again)
{
  if (!m_fencing) {
    fenced(name, 0);
    return;
  }
  take_fence(name, again);
}

void SqlStore::fenced(const std::string& name, std::int64_t fence)
{
  auto found = m_named.find(name);
  if (!m_gates || found == m_named.end() || found->second.holder.value.empty()
      || found->second.session->broken()) {
    fenced(fence);
    return;
  }
  m_gates->elected(name, *found->second.session, [this, fence] { fenced(fence); });
}

void SqlStore::fenced(std::int64_t fence)
{
  Outcome outcome = Outcome::of(Op::acquire);
  outcome.acquire.acquired = true;
  outcome.acquire.fence = fence;
  answer(std::move(outcome));
}

void SqlStore::no_fencing(const std::string& why) { no_fencing(std::string(), why); }

void SqlStore::no_fencing(const std::string& name, const std::string& why)
{
  m_fencing = false; // no right to create or write it, or a read-only server
  util::log_verbose("no fencing token: {}", why);
  fenced(name, 0); // a name not taken here (none given): answered alone
}

void SqlStore::holders_found(const std::string& name, const lock::AcquireRequest& request,
                             const lock::HolderInfo* first, std::int64_t count,
                             std::int64_t first_session)
{
  Outcome outcome = Outcome::of(Op::acquire);
  lock::AcquireResult& result = outcome.acquire;
  result.lease = lock::AcquireResult::Lease::no_expiry; // a session has no expiry
  if (first != nullptr) {
    result.holder = *first;
  }
  result.holders = count;
  Millis cap = request.ticket.max_block > Millis(0) ? request.ticket.max_block : longest_block;
  result.block = std::min(cap, longest_block);
  if (request.policy.supersede) {
    result.block = std::min(result.block, supersede_block);
  }
  if (m_no_policy) {
    if (needs_policy(request)) {
      answer(Op::acquire, policy_refused(request));
      return;
    }
    answer(std::move(outcome));
    return;
  }
  read_policy(name, false, needs_policy(request),
              [this, name, request, outcome, first_session](PolicyRead read) mutable {
                if (read.unavailable && needs_policy(request)) {
                  answer(Op::acquire,
                         Error(read.unavailable->code(),
                               "{} on {} needs the table dlock_policy, which dlock cannot use: {}",
                               policy_named(request), m_server, read.unavailable->what()));
                  return;
                }
                if (read.error || !read.row || first_session == 0
                    || read.row->session != first_session || !read.row->holder
                    || read.row->token_fp.empty()) {
                  // not a holder that dlock recorded
                  answer_waiter(name, request, read.error ? std::nullopt : read.row, read.now,
                                std::move(outcome));
                  return;
                }
                lock::HolderInfo& holder = outcome.acquire.holder;
                std::int64_t fence = holder.fence;
                holder = *read.row->holder;
                holder.fence = fence;
                if (!request.policy.replace) {
                  answer_waiter(name, request, read.row, read.now, std::move(outcome));
                  return;
                }
                PolicyWrite ask{.kind = PolicyWrite::Kind::replace,
                                .token_fp = read.row->token_fp,
                                .holder = encode_holder(request.holder),
                                .session = first_session};
                write_policy(name, false, ask,
                             [this, name, request, read, outcome](const std::optional<Error>& error,
                                                                  std::int64_t rows) mutable {
                               if (error) {
                                 answer(Op::acquire, *error);
                                 return;
                               }
                               outcome.acquire.replace_asked = rows > 0;
                               answer_waiter(name, request, read.row, read.now, std::move(outcome));
                             });
              });
}

void SqlStore::answer_waiter(const std::string& name, const lock::AcquireRequest& request,
                             const std::optional<PolicyRow>& row, std::int64_t now, Outcome outcome)
{
  lock::WaitMode mode = request.ticket.mode;
  if (!request.policy.supersede || (mode != lock::WaitMode::wait && mode != lock::WaitMode::fair)) {
    answer(std::move(outcome));
    return;
  }
  if (request.ticket.registered && row) {
    outcome.acquire.superseded_by = superseded(*row, request.ticket.waiter_id, now);
    if (outcome.acquire.superseded_by) {
      answer(std::move(outcome)); // nothing of it is left: its wait is in the server
      return;
    }
  }
  // Its first registration announces it the newest (an older one sees it within
  // supersede_block, far sooner than the record expires); its later attempts write nothing,
  // which could overwrite a newer one's announcement.
  if (request.ticket.registered) {
    answer(std::move(outcome));
    return;
  }
  PolicyWrite newest{.kind = PolicyWrite::Kind::newest,
                     .holder = encode_holder(request.holder),
                     .waiter = request.ticket.waiter_id,
                     .lifetime_ms = 2 * longest_block.count()};
  write_policy(name, false, newest,
               [this, outcome](const std::optional<Error>& error, std::int64_t) mutable {
                 if (error) {
                   outcome = Outcome::of(Op::acquire, error);
                 }
                 answer(std::move(outcome));
               });
}

void SqlStore::start_wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                                   Millis block)
{
  if (m_gates && SqlGates::is_gate(ticket.mode)) {
    m_gates->wait_for_wake(name, ticket, block);
    return;
  }
  Named* n = find(name);
  if (n == nullptr || n->session->broken() || n->held) {
    answer(Op::wait_for_wake);
    return;
  }
  util::TimePoint now = util::monotonic_now();
  if (n->closed_until && *n->closed_until > now) {
    // closed by a side record, though free in the server: a timed wait for its end
    n->wake_at = std::min(*n->closed_until, now + block);
    return;
  }
  wait_in_server(name.str(), block);
}

void SqlStore::start_withdraw(const lock::LockName& name, const lock::WaitTicket& ticket)
{
  if (m_gates && SqlGates::is_gate(ticket.mode)) {
    m_gates->withdraw(name, ticket);
    return;
  }
  SessionStore::start_withdraw(name, ticket);
}

void SqlStore::granted(const std::string& name)
{
  Named& n = m_named.at(name);
  n.held = true;
  n.granted_by_wait = true;
}

void SqlStore::woken(std::optional<Error> error) { answer(Op::wait_for_wake, std::move(error)); }

void SqlStore::start_renew(const lock::LockName& name, const lock::RenewRequest& request)
{
  Named* n = find(name);
  if (n == nullptr || !n->held || n->token != request.token) {
    // Held by another process (a nested run checks its parent's token, the renewer of a
    // stopped job).
    confirm_other(name, request.token);
    return;
  }
  if (n->session->broken()) {
    Outcome outcome = Outcome::of(Op::renew);
    outcome.slot = n->kind.has_slots();
    answer(std::move(outcome)); // the session that held it ended: a new one would not hold it
    return;
  }
  confirm_held(name.str());
}

void SqlStore::held_confirmed(const std::string& name, const std::optional<Error>& error, bool held)
{
  Named& n = m_named.at(name);
  Outcome outcome = Outcome::of(Op::renew);
  outcome.slot = n.kind.has_slots();
  if (error && n.session->broken()) {
    n.held = false;
  } else if (error) {
    outcome.error = error;
  } else {
    outcome.held = held;
    n.held = held;
  }
  if (!outcome.held || m_no_policy) {
    answer(std::move(outcome));
    return;
  }
  // The renewal is where a holder learns of a --replace request against its token.
  read_policy(name, false, false, [this, name, outcome](PolicyRead read) mutable {
    Named& again = m_named.at(name);
    if (!read.error && read.row && read.row->replace_by
        && read.row->token_fp == lock::token_fingerprint(again.token)) {
      outcome.held = false; // the lock stays the token's until it releases it
      outcome.replaced_by = read.row->replace_by;
    }
    answer(std::move(outcome));
  });
}

void SqlStore::other_confirmed(const std::optional<Error>& error, bool held)
{
  Outcome outcome = Outcome::of(Op::renew, error);
  outcome.held = !error && held;
  answer(std::move(outcome));
}

void SqlStore::start_release(const lock::LockName& name, const std::string& token)
{
  Named* n = find(name);
  if (token.empty() || n == nullptr || !n->held || n->token != token) {
    end_holder(name, token);
    return;
  }
  n->held = false;
  n->granted_by_wait = false;
  n->kept_for = Millis(0);
  if (n->session->broken()) {
    answer(Op::release);
    return;
  }
  if (m_no_policy) {
    unlock(name.str());
    return;
  }
  // A clean release: the side record goes (no lock-delay), or stays for what is left of the
  // min-hold, unless a --replace acquirer asked for the lock.
  std::string key = name.str();
  read_policy(key, false, false, [this, key](PolicyRead read) {
    Named& releasing = m_named.at(key);
    std::string fp = lock::token_fingerprint(releasing.token);
    if (read.error || !read.row || read.row->token_fp != fp) {
      unlock(key);
      return;
    }
    bool keep = !read.row->replace_by && read.row->hold_until > read.now;
    PolicyWrite write{.kind = keep ? PolicyWrite::Kind::keep : PolicyWrite::Kind::drop,
                      .token_fp = fp};
    if (keep) {
      releasing.kept_for = Millis(read.row->hold_until - read.now);
    }
    write_policy(key, false, write, [this, key](const std::optional<Error>& error, std::int64_t) {
      if (error) {
        m_named.at(key).kept_for = Millis(0);
        util::log_verbose("the side record was not cleared: {}", error->what());
      }
      // best effort: what crashed holders of other locks left, once nothing keeps it; nobody
      // waits for its answer (MySQL sends it after the release, in the release's round trip)
      write_policy(key, false, PolicyWrite{.kind = PolicyWrite::Kind::sweep}, nullptr);
      unlock(key);
    });
  });
}

void SqlStore::released(const std::string& name, const std::optional<Error>& error, bool ended,
                        bool held)
{
  Outcome outcome = Outcome::of(Op::release);
  if (error && ended) {
    // the session ended: the server freed the lock
  } else if (error) {
    outcome.error = error;
  } else {
    outcome.held = held;
  }
  auto found = m_named.find(name);
  bool let_go = outcome.held;
  if (found != m_named.end() && found->second.kept_for > Millis(0)) {
    outcome.held = true;
    outcome.kept_for = found->second.kept_for;
    found->second.kept_for = Millis(0);
  }
  if (m_gates && let_go && found != m_named.end() && !found->second.session->broken()) {
    // its watchers are told before the release is answered
    m_gates->freed(name, *found->second.session,
                   [this, outcome]() mutable { answer(std::move(outcome)); });
    return;
  }
  answer(std::move(outcome));
}

void SqlStore::holder_ended(const lock::LockName& name, const std::string& token,
                            lock::Outcome outcome)
{
  if (m_gates && outcome.held && !outcome.error) {
    m_gates->freed(name.str(), control_session(), [] {}); // its watchers, best effort
  }
  if (outcome.error || m_no_policy) {
    answer(std::move(outcome));
    return;
  }
  std::string key = name.str();
  read_policy(key, true, false, [this, key, token, outcome](PolicyRead read) mutable {
    if (read.error || read.unavailable || !read.row || read.row->token_fp.empty()) {
      answer(std::move(outcome));
      return;
    }
    std::string fp = token.empty() ? std::string() : lock::token_fingerprint(token);
    if (!token.empty() && read.row->token_fp != fp) {
      answer(std::move(outcome));
      return;
    }
    PolicyWrite write{.kind = PolicyWrite::Kind::force, .token_fp = read.row->token_fp};
    Idle idle = idle_state(*read.row, read.now);
    if (token.empty() && !outcome.held) {
      // no session held it: nothing but the record closes it (a min-hold, a lock-delay, or
      // another tenant's row), which --force clears
      outcome.held = idle.held_for > Millis(0) || idle.delay_for > Millis(0);
    } else if (!read.row->released && !read.row->replace_by && read.row->delay_ms > 0) {
      // its lock-delay counts from the end of its lease: now, unless it ended before
      write.delay_ms = read.row->delay_ms;
      write.ended_at = read.row->ended_at;
      write.holder = read.row->holder ? encode_holder(*read.row->holder) : std::string();
    }
    if (!token.empty()) { // the token's holder, ended from another process: a clean release
      bool keep = !read.row->replace_by && read.row->hold_until > read.now;
      write.kind = keep ? PolicyWrite::Kind::keep : PolicyWrite::Kind::drop;
      if (keep && outcome.held) {
        outcome.kept_for = Millis(read.row->hold_until - read.now);
      }
    }
    write_policy(key, true, write,
                 [this, outcome](const std::optional<Error>& error, std::int64_t) mutable {
                   if (error) {
                     outcome.error = error;
                   }
                   answer(std::move(outcome));
                 });
  });
}

void SqlStore::add_policy(lock::LockStatus& status, std::int64_t holder_session,
                          util::TimePoint deadline)
{
  if (m_no_policy) {
    return;
  }
  std::optional<PolicyRead> got;
  read_policy(status.name, true, false, [&got](PolicyRead read) { got = std::move(read); });
  block_until([&got] { return got.has_value(); }, deadline);
  if (got->error && control_session().broken()) {
    throw *got->error;
  }
  if (got->error) { // a table another tenant changed: the lock's status without it
    util::log_verbose("the side record cannot be read: {}", got->error->what());
    return;
  }
  if (got->unavailable || !got->row) {
    return;
  }
  apply_policy(status, holder_session, *got->row, got->now);
}

void SqlStore::add_policies(std::vector<lock::LockStatus>& found,
                            const std::map<std::string, std::int64_t>& sessions,
                            std::string_view pattern, util::TimePoint deadline)
{
  if (m_no_policy) {
    return;
  }
  std::int64_t now = 0;
  std::vector<NamedPolicy> rows = list_policies(deadline, now);
  std::string glob(pattern);
  for (const NamedPolicy& one : rows) {
    auto held = std::find_if(found.begin(), found.end(), [&one](const lock::LockStatus& status) {
      return status.name == one.name;
    });
    if (held != found.end()) {
      auto session = sessions.find(one.name);
      apply_policy(*held, session == sessions.end() ? 0 : session->second, one.row, now);
      continue;
    }
    if (::fnmatch(glob.c_str(), one.name.c_str(), 0) != 0) {
      continue;
    }
    lock::LockStatus status;
    status.name = one.name;
    status.ttl_ms = -1;
    status.server_time_ms = now;
    apply_policy(status, 0, one.row, now);
    if (status.held) {
      found.push_back(std::move(status));
    }
  }
  std::sort(found.begin(), found.end(),
            [](const lock::LockStatus& a, const lock::LockStatus& b) { return a.name < b.name; });
}

void SqlStore::apply_policy(lock::LockStatus& status, std::int64_t holder_session,
                            const PolicyRow& row, std::int64_t now)
{
  if (row.token_fp.empty()) {
    return;
  }
  if (status.held) {
    if (holder_session != 0 && row.session == holder_session && row.holder) {
      std::int64_t fence = status.holder.fence;
      std::int64_t acquired = status.holder.acquired_ms;
      status.holder = *row.holder;
      status.holder.fence = fence;
      if (acquired != 0) {
        status.holder.acquired_ms = acquired;
      }
    }
    return;
  }
  Idle idle = idle_state(row, now);
  if (idle.held_for > Millis(0)) {
    status.held = true;
    status.command_ended = true;
    status.ttl_ms = idle.held_for.count();
    status.holder = row.holder.value_or(lock::HolderInfo{});
  } else if (idle.delay_for > Millis(0)) {
    status.delay_ms = idle.delay_for.count();
    status.holder = row.holder.value_or(lock::HolderInfo{});
  }
}

void SqlStore::start_record(const lock::LockName& name, const std::string& text)
{
  if (m_no_history) {
    answer(Op::record, m_no_history);
    return;
  }
  if (text.size() > lock::max_event_bytes) {
    answer(Op::record,
           Error(ExitCode::internal, "an event of {} bytes is too long to record", text.size()));
    return;
  }
  Named* n = find(name);
  bool control = n == nullptr || n->session->broken();
  std::string key = name.str();
  write_history(key, control, text, [this, key, control](const std::optional<Error>& error) {
    answer(Op::record, error);
    auto found = m_named.find(key);
    if (!error || control || found == m_named.end()) {
      return;
    }
    const Named& writer = found->second;
    if (writer.held && writer.session->broken() && !writer.session->busy()) {
      // the session ended under the record, which the holder would not hear of (a record's
      // answer is nobody's to act on) until its next renewal: as named()'s on_end says it
      Outcome ended = Outcome::of(Op::disconnected, error);
      ended.lease_ended = true;
      answer(std::move(ended));
    }
  });
}

std::vector<std::string> SqlStore::events(const lock::LockName& name, std::size_t limit,
                                          util::TimePoint deadline)
{
  std::optional<HistoryRead> got;
  read_history(name.str(), limit, [&got](HistoryRead read) { got = std::move(read); });
  if (!got) {
    block_until([&got] { return got.has_value(); }, deadline);
  }
  if (got->error && (got->refused || (m_control && m_control->broken()))) {
    throw *got->error;
  }
  if (got->error) { // a table another tenant changed: no history rather than a failure
    util::log_verbose("the history cannot be read: {}", got->error->what());
    return {};
  }
  return kept_events(std::move(got->texts));
}

std::vector<int> SqlStore::lease_descriptors() const
{
  std::vector<int> fds;
  for (const auto& [name, n] : m_named) {
    if (n.held && n.session && !n.session->broken() && n.session->descriptor() >= 0) {
      fds.push_back(n.session->descriptor());
    }
  }
  return fds;
}

void SqlStore::watch(util::EventLoop& loop)
{
  for (auto it = m_named.begin(); it != m_named.end();) {
    Named& n = it->second;
    if (n.closing && !n.session->busy()) {
      it = m_named.erase(it); // released: ending the session frees what else it holds
      continue;
    }
    if (n.session->owned()) {
      n.session->watch(loop);
    }
    if (n.wake_at && *n.wake_at <= util::monotonic_now()) {
      n.wake_at.reset();
      answer(Op::wait_for_wake); // the end of a min-hold or lock-delay: look again
    } else if (n.wake_at) {
      loop.wake_at(*n.wake_at);
    }
    ++it;
  }
  if (m_control && m_control->owned()) {
    m_control->watch(loop);
  }
  if (m_gates) {
    m_gates->watch(loop);
  }
  if (has_answers()) {
    loop.wake_at(util::monotonic_now());
  }
}

void SqlStore::abandon() noexcept
{
  for (auto it = m_named.begin(); it != m_named.end();) {
    Named& n = it->second;
    if (n.session->owned() && n.held && !n.session->broken()) {
      n.session->forget_queries();
      ++it;
    } else {
      n.session->cancel();
      it = m_named.erase(it);
    }
  }
  if (m_control) {
    m_control->cancel();
    m_control.reset();
  }
  if (m_gates) {
    m_gates->abandon();
  }
  forget_answers();
}

Error SqlStore::timed_out() noexcept
{
  std::string what = "did not answer in time";
  for (auto& [name, n] : m_named) {
    if (n.session->owned() && n.session->connecting()) {
      what = "did not accept a connection in time";
    }
  }
  if (m_control && m_control->connecting()) {
    what = "did not accept a connection in time";
  }
  abandon();
  return Error(ExitCode::unavailable, "{} at {} {}", m_server, m_shown, what);
}

void SqlStore::block_until(const std::function<bool()>& answered, util::TimePoint deadline)
{
  if (!util::run_until(deadline, answered,
                       [this](util::EventLoop& loop) { m_control->watch(loop); })) {
    throw timed_out();
  }
}

} // namespace dlock::sql

#include "stores/sql/sql_store.hpp"

#include "util/clock.hpp"
#include "util/log.hpp"

#include <algorithm>

namespace dlock::sql {

using lock::Outcome;
using util::Millis;

namespace {

// The longest a waiter blocks in one wait in the server before it asks again.
constexpr Millis longest_block{30'000};

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
  if (n.held) {
    // Granted through a wait, or asked again for a lock this session holds (a retry after a
    // lost answer): it is ours; taking it again would count it twice.
    n.granted_by_wait = false;
    fence(name.str(), false);
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
  after_taken(name, [this, name] { fence(name, false); });
}

void SqlStore::fence(const std::string& name, bool again)
{
  if (!m_fencing) {
    fenced(0);
    return;
  }
  take_fence(name, again);
}

void SqlStore::fenced(std::int64_t fence)
{
  Outcome outcome = Outcome::of(Op::acquire);
  outcome.acquire.acquired = true;
  outcome.acquire.fence = fence;
  answer(std::move(outcome));
}

void SqlStore::no_fencing(const std::string& why)
{
  m_fencing = false; // no right to create or write it, or a read-only server
  util::log_verbose("no fencing token: {}", why);
  fenced(0);
}

void SqlStore::holders_found(const lock::AcquireRequest& request, const lock::HolderInfo* first,
                             std::int64_t count)
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
  answer(std::move(outcome));
}

void SqlStore::start_wait_for_wake(const lock::LockName& name, const lock::WaitTicket&,
                                   Millis block)
{
  Named* n = find(name);
  if (n == nullptr || n->session->broken() || n->held) {
    answer(Op::wait_for_wake);
    return;
  }
  wait_in_server(name.str(), block);
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
  answer(std::move(outcome));
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
  if (n->session->broken()) {
    answer(Op::release);
    return;
  }
  unlock(name.str());
}

void SqlStore::released(const std::optional<Error>& error, bool ended, bool held)
{
  Outcome outcome = Outcome::of(Op::release);
  if (error && ended) {
    // the session ended: the server freed the lock
  } else if (error) {
    outcome.error = error;
  } else {
    outcome.held = held;
  }
  answer(std::move(outcome));
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
    ++it;
  }
  if (m_control && m_control->owned()) {
    m_control->watch(loop);
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

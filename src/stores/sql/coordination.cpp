#include "stores/sql/coordination.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace dlock::sql {

using lock::Outcome;
using util::Millis;
using Op = lock::Outcome::Op;

namespace {

constexpr const char* barrier_member = "barrier";
constexpr const char* latch_member = "latch";
// A barrier's state outlives every arrival (as on Redis).
constexpr std::int64_t barrier_keep_ms = 24LL * 3600 * 1000;
// An arrival lapses this long after its party's block ends (as on Redis).
constexpr std::int64_t arrival_grace_ms = 2000;
// An arrival row that claims to last longer than this is not one dlock wrote.
constexpr std::int64_t longest_arrival_ms = 60'000;
// The most rows of one name read back: a barrier's parties and its state (the rest is junk).
constexpr int most_rows = 10'001;

const SqlGates::Row* find_member(const std::vector<SqlGates::Row>& rows, std::string_view member)
{
  auto found = std::find_if(rows.begin(), rows.end(),
                            [member](const SqlGates::Row& row) { return row.member == member; });
  return found == rows.end() ? nullptr : &*found;
}

// The barrier's generation now: 0 when none is going (none set, expired, or junk).
std::int64_t generation_of(const std::vector<SqlGates::Row>& rows, std::int64_t now)
{
  const SqlGates::Row* state = find_member(rows, barrier_member);
  if (state == nullptr || state->until < now || state->generation <= 0) {
    return 0;
  }
  return state->generation;
}

} // namespace

std::string party_member(std::string_view waiter_id)
{
  std::string member = "p:";
  for (char c : waiter_id.substr(0, 32)) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      member.push_back(c);
    }
  }
  return member;
}

SqlGates::SqlGates(Tell answer, std::string server, std::string prefix)
  : m_answer(std::move(answer)), m_server(std::move(server)), m_prefix(std::move(prefix))
{
}

bool SqlGates::is_gate(lock::WaitMode mode) noexcept
{
  return mode == lock::WaitMode::watch || mode == lock::WaitMode::barrier
         || mode == lock::WaitMode::latch || mode == lock::WaitMode::leader;
}

std::string SqlGates::columns()
{
  // member cut to what dlock writes; the numbers are the table's own BIGINT columns
  return fmt::format("{}, LEFT(member, 40), generation, parties, latch_count, until_ms",
                     dialect().now_ms);
}

Error SqlGates::refused(const Read& read, const char* what) const
{
  if (read.no_table) {
    return Error(read.error ? read.error->code() : ExitCode::config,
                 "{} on {} needs the table dlock_gate, which dlock cannot use: {}", what, m_server,
                 read.error ? read.error->what() : "there is none");
  }
  return read.error ? *read.error : Error(ExitCode::internal, "{}: no answer", m_server);
}

std::string SqlGates::sweep(const std::string& key, std::int64_t generation)
{
  const Dialect& d = dialect();
  return fmt::format(
    "DELETE FROM {0} WHERE gate_key = {2} AND (until_ms < {1} OR (member LIKE 'p:%' AND "
    "(until_ms > {1} + {3} OR generation <> {4})) OR (member <> 'barrier' AND member <> 'latch' "
    "AND member NOT LIKE 'p:%'))",
    d.table, d.now_ms, key, longest_arrival_ms, generation);
}

void SqlGates::sweep_all(const lock::LockName& name, std::function<void()> then)
{
  const Dialect& d = dialect();
  std::string expired = fmt::format(
    "SELECT gate_key, member FROM {} WHERE until_ms < {} LIMIT {} FOR UPDATE SKIP LOCKED", d.table,
    d.now_ms, most_rows);
  transact(name, {fmt::vformat(d.delete_expired_from, fmt::make_format_args(expired))}, -1, true,
           false, [then](const Read&) { then(); });
}

SqlGates::BarrierPlan SqlGates::plan_barrier(const std::vector<Row>& rows,
                                             const lock::GateRequest& request, std::int64_t now)
{
  BarrierPlan plan;
  lock::GateResult& result = plan.result;
  const lock::WaitTicket& ticket = request.ticket;
  std::int64_t generation = generation_of(rows, now);
  if (ticket.generation > 0 && generation > ticket.generation) {
    result.open = true; // tripped since this party joined
    result.generation = ticket.generation;
    result.parties = request.parties;
    return plan;
  }
  if (generation == 0) {
    // A new barrier starts at the server's clock in µs, above every generation it had.
    generation = now * 1000;
  }
  const Row* state = find_member(rows, barrier_member);
  std::int64_t in_progress = state != nullptr ? state->parties : 0;
  std::string me = party_member(ticket.waiter_id);
  std::int64_t arrived = 0;
  bool here = false;
  for (const Row& row : rows) {
    if (row.member.starts_with("p:") && row.generation == generation && row.until >= now
        && row.until <= now + longest_arrival_ms) {
      ++arrived;
      here = here || row.member == me;
    }
  }
  result.generation = generation;
  if (arrived > 0 && !here && in_progress != request.parties) {
    result.parties = in_progress; // another barrier of that many parties: nothing written
    return plan;
  }
  if (arrived > 0 && here && in_progress != request.parties) {
    result.parties = in_progress;
    return plan;
  }
  if (!here) {
    ++arrived;
  }
  result.parties = request.parties;
  if (arrived >= request.parties) {
    result.open = true;
    result.arrived = arrived;
    plan.write = BarrierPlan::Write::trip;
    plan.generation = generation;
    return plan;
  }
  result.arrived = arrived;
  result.block = ticket.max_block;
  plan.write = BarrierPlan::Write::arrive;
  plan.generation = generation;
  return plan;
}

bool SqlGates::tripped(const std::vector<Row>& rows, std::int64_t joined, std::int64_t now)
{
  return joined > 0 && generation_of(rows, now) > joined;
}

std::int64_t SqlGates::latch_count(const std::vector<Row>& rows, std::int64_t now)
{
  const Row* latch = find_member(rows, latch_member);
  if (latch == nullptr || latch->until < now || latch->count < 0) {
    return -1;
  }
  return latch->count;
}

void SqlGates::start_gate(const lock::LockName& name, const lock::GateRequest& request)
{
  switch (request.ticket.mode) {
  case lock::WaitMode::barrier:
    barrier_step(name, request);
    return;
  case lock::WaitMode::latch:
    latch_step(name, request);
    return;
  case lock::WaitMode::watch:
    break;
  case lock::WaitMode::leader: {
    lock::WaitTicket ticket = request.ticket;
    leadership(name, [this, ticket](std::optional<Error> error, Leadership leadership) {
      if (error) {
        m_answer(Outcome::of(Op::gate, std::move(error)));
        return;
      }
      Outcome outcome = Outcome::of(Op::gate);
      outcome.gate = look_leader(ticket, leadership, ticket.max_block);
      m_answer(std::move(outcome));
    });
    return;
  }
  default:
    m_answer(Outcome::of(Op::gate, Error(ExitCode::internal, "a lock waiter at a gate")));
    return;
  }
  lock::WaitTicket ticket = request.ticket;
  holding(name, [this, ticket](std::optional<Error> error, Holding holding, std::int64_t now_us) {
    if (error) {
      m_answer(Outcome::of(Op::gate, std::move(error)));
      return;
    }
    Outcome outcome = Outcome::of(Op::gate);
    outcome.gate = look(ticket, holding, now_us, ticket.max_block);
    m_answer(std::move(outcome));
  });
}

lock::GateResult SqlGates::look(const lock::WaitTicket& ticket, const Holding& holding,
                                std::int64_t now_us, Millis block)
{
  lock::GateResult result;
  auto seen = m_seen.find(ticket.waiter_id);
  bool first = ticket.since == 0 || seen == m_seen.end();
  bool freed = false;
  if (!first && !holding.sessions.empty()) {
    const Seen& before = seen->second;
    if (holding.exclusive) {
      // granted exclusively to a session that did not hold it: it was free in between
      freed = before.sessions.count(holding.sessions.front()) == 0;
    } else {
      freed = before.exclusive; // shared now, exclusive before: released in between
    }
  }
  if (holding.sessions.empty() || freed) {
    m_seen.erase(ticket.waiter_id);
    result.open = true;
    return result;
  }
  if (first) {
    Seen& remember = m_seen[ticket.waiter_id];
    remember.sessions = {holding.sessions.begin(), holding.sessions.end()};
    remember.exclusive = holding.exclusive;
    result.since = now_us > 0 ? now_us : 1;
  } else {
    result.since = ticket.since;
  }
  result.block = block;
  result.lock.lease = lock::AcquireResult::Lease::no_expiry;
  result.lock.holder = holding.first;
  result.lock.holders = std::int64_t(holding.sessions.size());
  return result;
}

void SqlGates::leadership(const lock::LockName&, LeadershipThen then)
{
  then(Error(ExitCode::internal, "leader --watch on {}: no leader gate", m_server), Leadership{});
}

lock::GateResult SqlGates::look_leader(const lock::WaitTicket& ticket, const Leadership& leadership,
                                       Millis block)
{
  lock::GateResult result;
  result.since = leadership.term;
  result.open = leadership.term != ticket.since;
  if (leadership.term != 0) {
    result.lock.lease = lock::AcquireResult::Lease::no_expiry;
    result.lock.holder = leadership.holder;
    result.lock.holders = std::max<std::int64_t>(1, leadership.holders);
  }
  if (!result.open) {
    result.block = block;
  }
  return result;
}

void SqlGates::barrier_step(const lock::LockName& name, const lock::GateRequest& request,
                            int attempt)
{
  if (request.parties < 1) {
    m_answer(Outcome::of(Op::gate, Error(ExitCode::usage, "--parties must be at least 1")));
    return;
  }
  const Dialect& d = dialect();
  std::string key = key_of(name);
  std::vector<std::string> statements{
    fmt::format("{} {} (gate_key, member, generation, parties, latch_count, until_ms) VALUES ({}, "
                "'barrier', 0, 0, -1, {} + {}){}",
                d.insert_new, d.table, key, d.now_ms, barrier_keep_ms, d.ignore_tail),
    fmt::format("SELECT {} FROM {} WHERE gate_key = {} ORDER BY member LIMIT {} FOR UPDATE",
                columns(), d.table, key, most_rows)};
  // The plan needs the rows: the transaction goes on in two parts (the first keeps it open).
  transact(
    name, std::move(statements), 1, false, false, [this, name, request, key, attempt](Read read) {
      if (read.retry && attempt < most_attempts) {
        barrier_step(name, request, attempt + 1);
        return;
      }
      if (read.error || read.no_table) {
        m_answer(Outcome::of(Op::gate, refused(read, "barrier")));
        return;
      }
      BarrierPlan plan = plan_barrier(read.rows, request, read.now);
      const Dialect& dd = dialect();
      std::vector<std::string> writes{sweep(
        key, plan.write == BarrierPlan::Write::none ? plan.result.generation : plan.generation)};
      std::int64_t block_ms = std::max<std::int64_t>(1, request.ticket.max_block.count());
      if (plan.write == BarrierPlan::Write::trip) {
        writes.push_back(fmt::format(
          "UPDATE {} SET generation = {}, parties = {}, until_ms = {} + {} WHERE gate_key "
          "= {} AND member = 'barrier'",
          dd.table, plan.generation + 1, request.parties, dd.now_ms, barrier_keep_ms, key));
        writes.push_back(
          fmt::format("DELETE FROM {} WHERE gate_key = {} AND member LIKE 'p:%'", dd.table, key));
      } else if (plan.write == BarrierPlan::Write::arrive) {
        writes.push_back(fmt::format(
          "UPDATE {} SET generation = {}, parties = {}, until_ms = {} + {} WHERE gate_key "
          "= {} AND member = 'barrier'",
          dd.table, plan.generation, request.parties, dd.now_ms, barrier_keep_ms, key));
        writes.push_back(
          fmt::format("INSERT INTO {} (gate_key, member, generation, parties, latch_count, "
                      "until_ms) VALUES ({}, '{}', {}, 0, -1, {} + {}){}",
                      dd.table, key, party_member(request.ticket.waiter_id), plan.generation,
                      dd.now_ms, block_ms + arrival_grace_ms, dd.upsert_tail));
      }
      bool trip = plan.write == BarrierPlan::Write::trip;
      transact(name, std::move(writes), -1, true, trip,
               [this, name, request, plan, attempt, trip](Read done) {
                 if (done.retry && attempt < most_attempts) {
                   barrier_step(name, request, attempt + 1);
                   return;
                 }
                 if (done.error) {
                   m_answer(Outcome::of(Op::gate, refused(done, "barrier")));
                   return;
                 }
                 Outcome outcome = Outcome::of(Op::gate);
                 outcome.gate = plan.result;
                 if (!trip) {
                   m_answer(std::move(outcome));
                   return;
                 }
                 sweep_all(name, [this, outcome] { m_answer(outcome); });
               });
    });
}

void SqlGates::withdraw(const lock::LockName& name, const lock::WaitTicket& ticket)
{
  if (ticket.mode != lock::WaitMode::barrier || ticket.generation == 0) {
    m_seen.erase(ticket.waiter_id);
    m_answer(Outcome::of(Op::withdraw));
    return;
  }
  const Dialect& d = dialect();
  std::string key = key_of(name);
  std::vector<std::string> statements{
    fmt::format("SELECT {} FROM {} WHERE gate_key = {} AND member = 'barrier' FOR UPDATE",
                columns(), d.table, key)};
  transact(name, std::move(statements), 0, false, false, [this, name, ticket, key](Read read) {
    if (read.error || read.no_table) {
      m_answer(Outcome::of(Op::withdraw, refused(read, "barrier")));
      return;
    }
    if (tripped(read.rows, ticket.generation, read.now)) {
      Outcome outcome = Outcome::of(Op::withdraw);
      outcome.gate.open = true;
      // the transaction holds the row: end it
      transact(name, {}, -1, true, false, [this, outcome](Read) { m_answer(outcome); });
      return;
    }
    transact(name,
             {fmt::format("DELETE FROM {} WHERE gate_key = {} AND member = '{}'", dialect().table,
                          key, party_member(ticket.waiter_id))},
             -1, true, false, [this](Read done) {
               m_answer(Outcome::of(Op::withdraw,
                                    done.error ? std::optional<Error>(*done.error) : std::nullopt));
             });
  });
}

void SqlGates::latch_step(const lock::LockName& name, const lock::GateRequest& request)
{
  const Dialect& d = dialect();
  Millis block = request.ticket.max_block;
  select(name,
         fmt::format("SELECT {} FROM (SELECT 1 AS one) one LEFT JOIN {} g ON g.gate_key = {} AND "
                     "g.member = 'latch'",
                     columns(), d.table, key_of(name)),
         [this, block](Read read) {
           if (read.error || read.no_table) {
             m_answer(Outcome::of(Op::gate, refused(read, "latch")));
             return;
           }
           Outcome outcome = Outcome::of(Op::gate);
           std::int64_t count = latch_count(read.rows, read.now);
           if (count == 0) {
             outcome.gate.open = true;
             outcome.gate.count = 0;
           } else {
             outcome.gate.count = count;
             outcome.gate.block = block;
           }
           m_answer(std::move(outcome));
         });
}

void SqlGates::start_set_latch(const lock::LockName& name, std::int64_t count, Millis expire)
{
  const Dialect& d = dialect();
  std::string key = key_of(name);
  std::vector<std::string> statements{fmt::format(
    "INSERT INTO {} (gate_key, member, generation, parties, latch_count, until_ms) "
    "VALUES ({}, 'latch', 0, 0, {}, {} + {}){}",
    d.table, key, std::max<std::int64_t>(0, count), d.now_ms, expire.count(), d.upsert_tail)};
  transact(name, std::move(statements), -1, true, count <= 0, [this, name](Read read) {
    if (read.error || read.no_table) {
      m_answer(Outcome::of(Op::set_latch, refused(read, "latch")));
      return;
    }
    sweep_all(name, [this] { m_answer(Outcome::of(Op::set_latch)); });
  });
}

void SqlGates::start_count_down(const lock::LockName& name) { count_down_step(name, 0); }

void SqlGates::count_down_step(const lock::LockName& name, int attempt)
{
  const Dialect& d = dialect();
  std::string key = key_of(name);
  std::vector<std::string> statements{
    fmt::format("SELECT {} FROM {} WHERE gate_key = {} AND member = 'latch' FOR UPDATE", columns(),
                d.table, key)};
  transact(name, std::move(statements), 0, false, false, [this, name, key, attempt](Read read) {
    if (read.retry && attempt < most_attempts) {
      count_down_step(name, attempt + 1);
      return;
    }
    if (read.error || read.no_table) {
      m_answer(Outcome::of(Op::count_down, refused(read, "latch")));
      return;
    }
    std::int64_t count = latch_count(read.rows, read.now);
    std::vector<std::string> writes;
    if (count > 0) {
      --count;
      writes.push_back(fmt::format("UPDATE {} SET latch_count = {} WHERE gate_key = {} AND "
                                   "member = 'latch'",
                                   dialect().table, count, key));
    }
    bool zero = count == 0 && !writes.empty();
    transact(name, std::move(writes), -1, true, zero, [this, name, count, attempt](Read done) {
      if (done.retry && attempt < most_attempts) {
        count_down_step(name, attempt + 1);
        return;
      }
      Outcome outcome = Outcome::of(Op::count_down, done.error);
      outcome.gate.count = count;
      m_answer(std::move(outcome));
    });
  });
}

} // namespace dlock::sql

#include "stores/zookeeper/zookeeper_store.hpp"

#include "lock/features.hpp"
#include "util/clock.hpp"
#include "util/log.hpp"

#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>
#include <chrono>

namespace dlock::zookeeper {

using lock::Outcome;
using util::Millis;

namespace {

// The session timeout asked for by a process that takes no lock (status, list, release).
constexpr Millis inspect_session{10'000};
// How often one acquisition may find its node gone, or the lock's node deleted under it,
// before it stops trying.
constexpr int max_steps = 20;

std::string basename_of(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// A lock closed by the last holder's policy node: until when, and whether the lock-delay's start
// must be written (its holder was just found gone without a release: ended_at = now).
struct Closure {
  std::int64_t hold_until = 0; // the --min-hold's end (0: none)
  std::int64_t delay_end = 0;  // the --lock-delay's end (0: none)
  bool stamp = false;
  std::int64_t until() const { return std::max(hold_until, delay_end); }
};

Closure closure_of(const SideRecord& record, std::int64_t ctime, std::int64_t now)
{
  Closure closure;
  if (record.min_hold_ms > 0) {
    closure.hold_until = ctime + record.min_hold_ms;
  }
  if (record.lock_delay_ms > 0 && !record.released) {
    closure.stamp = record.ended_at == 0;
    closure.delay_end =
      (closure.stamp ? now : std::min(record.ended_at, now)) + record.lock_delay_ms;
  }
  return closure;
}

std::string side_path(const std::string& dir, std::string_view node)
{
  return dir + "/" + std::string(node);
}

// The node with a contender's holder record: a dlock pair's "__WRIT__" partner (its "lock-"
// node may have a candidate's value instead: nodes.hpp), else the contender's own.
const std::string& record_of(const Contender& contender)
{
  return contender.partner.empty() ? contender.name : contender.partner;
}

// Enough of a side node to know it is larger than dlock writes.
constexpr std::size_t side_cap = lock::max_holder_record_bytes + 1;

Role role_of(const lock::LockKind& kind)
{
  return kind.mode == lock::LockKind::Mode::shared ? Role::read : Role::exclusive;
}

} // namespace

ZkUrl connect_params(const std::string& url, const stores::StoreConfig& config)
{
  ZkUrl parsed = parse_url(url);
  if (config.password) {
    if (parsed.user.empty()) {
      throw Error(ExitCode::usage, "a password for ZooKeeper needs a user name in the URL "
                                   "(zk://user@host:port/…, digest authentication)");
    }
    parsed.password = config.password;
  }
  return parsed;
}

ZookeeperStore::ZookeeperStore(ZkUrl url, Millis request_timeout, std::string prefix)
  : m_url(std::move(url)), m_request_timeout(request_timeout), m_prefix(std::move(prefix))
{
}

ZookeeperStore::~ZookeeperStore()
{
  if (!m_recording || !m_client || !m_client->owned()) {
    return;
  }
  try { // the last event (a run's end) may be behind an earlier one still in flight
    util::run_until(
      util::deadline_after(m_request_timeout),
      [this] {
        m_client->drain();
        return !m_recording;
      },
      [this](util::EventLoop& loop) { m_client->watch(loop); });
  } catch (...) { // NOLINT(bugprone-empty-catch): the event is lost, as with no answer
  }
}

std::string ZookeeperStore::dir_of(const lock::LockName& name) const
{
  return m_url.chroot + "/" + encode_name(m_prefix + name.str());
}

ZookeeperStore::Named* ZookeeperStore::find(const lock::LockName& name)
{
  auto found = m_named.find(name.str());
  return found == m_named.end() ? nullptr : &found->second;
}

ZookeeperStore::Named& ZookeeperStore::named(const lock::LockName& name)
{
  auto found = m_named.find(name.str());
  if (found != m_named.end()) {
    return found->second;
  }
  Named n;
  n.dir = dir_of(name);
  n.uuid = random_uuid();
  return m_named.emplace(name.str(), std::move(n)).first->second;
}

Client& ZookeeperStore::client(Millis session_timeout)
{
  if (m_client && !m_client->owned()) {
    (void)m_client.release(); // the parent's: its destructor must not run here
  }
  bool idle = true;
  for (const auto& [key, n] : m_named) {
    idle = idle && n.node.empty() && !n.maybe_created;
  }
  for (const auto& [key, g] : m_gates) {
    idle = idle && g.member.empty(); // a barrier party's node is its session's
  }
  if (m_client && (m_dead || (idle && session_timeout != m_asked_timeout && !m_client->busy()))) {
    m_client.reset(); // expired, or asked for another timeout with nothing to keep
  }
  if (!m_client) {
    m_dead = false;
    m_was_connected = false;
    m_cut_off_since.reset();
    m_asked_timeout = session_timeout;
    // With digest credentials, dlock's nodes are that user's alone (Curator's ACLProvider
    // does the same when asked); without, anyone's, as Curator's default.
    m_client = std::make_unique<Client>(
      m_url.hosts, session_timeout, [this](const WatchEvent& event) { on_event(event); },
      !m_url.user.empty());
    if (!m_url.user.empty()) {
      // The digest scheme takes any user:password and adds it to the session's identities;
      // a wrong one shows as ZNOAUTH where an ACL wants another.
      m_client->add_auth(
        "digest", m_url.user + ":" + m_url.password.value_or(""), [this](Reply& reply) {
          if (reply.rc != ZOK) {
            util::log_verbose("ZooKeeper refused digest authentication: {}", describe(reply.rc));
          }
        });
    }
  }
  return *m_client;
}

void ZookeeperStore::when_ready(std::function<void(std::optional<Error>)> then)
{
  if (m_client->connected()) {
    m_was_connected = true;
    then(std::nullopt);
    return;
  }
  m_on_ready.push_back(std::move(then));
}

void ZookeeperStore::on_event(const WatchEvent& event)
{
  const LibZookeeper& lib = zoo();
  if (event.type == lib.ZOO_SESSION_EVENT) {
    std::optional<Error> failed;
    bool lease_ended = false;
    if (event.state == lib.ZOO_CONNECTED_STATE) {
      m_was_connected = true;
      m_cut_off_since.reset();
    } else if (event.state == lib.ZOO_EXPIRED_SESSION_STATE) {
      m_dead = true;
      lease_ended = true;
      failed = Error(ExitCode::unavailable, "ZooKeeper at {} expired dlock's session", m_url.shown);
    } else if (event.state == lib.ZOO_AUTH_FAILED_STATE) {
      m_dead = true;
      lease_ended = true;
      failed = Error(ExitCode::auth, "ZooKeeper at {} refused dlock's authentication", m_url.shown);
    } else if (event.state == lib.ZOO_CONNECTING_STATE && m_was_connected) {
      if (!m_cut_off_since) {
        m_cut_off_since = util::monotonic_now();
      }
      bool holds = false;
      bool bounded = false; // a holder's session is shorter than its TTL: confirm at once
      for (const auto& [key, n] : m_named) {
        holds = holds || n.held;
        bounded = bounded || (n.held && m_client->session_timeout() < n.request.ttl);
      }
      if (holds) {
        Outcome cut{.op = Op::disconnected,
                    .error = Error(ExitCode::unavailable, "lost the connection to ZooKeeper at {}",
                                   m_url.shown)};
        cut.lease_ended = bounded;
        m_answers.answer(std::move(cut));
      }
      return;
    } else {
      return;
    }
    std::vector<std::function<void(std::optional<Error>)>> waiting;
    waiting.swap(m_on_ready);
    for (auto& then : waiting) {
      then(failed);
    }
    if (failed) {
      bool holds = false;
      for (auto& [key, n] : m_named) {
        holds = holds || n.held;
        if (n.wake_by) {
          n.wake_by.reset();
          m_answers.answer(Op::wait_for_wake);
        }
        n.woken = true;
      }
      for (auto& [key, g] : m_gates) {
        g.member.clear(); // went with the session
        if (g.wake_by) {
          g.wake_by.reset();
          m_answers.answer(Op::wait_for_wake);
        }
        g.woken = true;
      }
      if (holds) {
        Outcome lost{.op = Op::disconnected, .error = failed};
        lost.lease_ended = lease_ended; // the session was the lease: its nodes are gone
        m_answers.answer(std::move(lost));
      }
    }
    return;
  }
  for (auto& [key, g] : m_gates) {
    if (std::find(g.watched.begin(), g.watched.end(), event.path) != g.watched.end()) {
      g.watched.clear();
      g.woken = true;
      if (g.wake_by) {
        g.wake_by.reset();
        m_answers.answer(Op::wait_for_wake);
      }
    }
  }
  for (auto& [key, n] : m_named) {
    if (event.path == side_path(n.dir, replace_node)) {
      n.replace_clear = false; // a release looks at it again
    }
    if (n.held && event.path == side_path(n.dir, replace_node)
        && event.type != lib.ZOO_DELETED_EVENT) {
      // A --replace asked: the holder confirms at once, and its renewal says who.
      m_answers.answer(
        Outcome{.op = Op::disconnected, .lease_ended = true, .replaced_by = lock::HolderInfo{}});
    }
    if (std::find(n.side_watches.begin(), n.side_watches.end(), event.path)
        != n.side_watches.end()) {
      n.side_watches.clear();
      n.woken = true;
      if (n.wake_by) {
        n.wake_by.reset();
        m_answers.answer(Op::wait_for_wake);
      }
    }
    if (!n.node.empty() && n.held
        && (event.path == n.node || event.path == n.partner
            || (!n.latch.empty() && event.path == n.latch))) {
      m_answers.answer(Outcome{
        .op = Op::disconnected,
        .error = Error(ExitCode::lost, "the node of lock '{}' changed or was deleted", key),
        .lease_ended = true, // confirm at once: a deleted node is a lost lock
      });
    }
    if (!n.watching.empty() && event.path == n.watching) {
      n.watching.clear();
      n.woken = true;
      if (n.wake_by) {
        n.wake_by.reset();
        m_answers.answer(Op::wait_for_wake);
      }
    }
  }
}

std::optional<Error> ZookeeperStore::check_session(Millis ttl, bool given)
{
  Millis granted = m_client->session_timeout();
  if (!given && granted != ttl) {
    // The default --ttl: the server's bound is the lease (the holder counts its lease from it:
    // AcquireResult::validity; a renewal while cut off from the server stops at 2/3 of it).
    if (!m_told_granted) {
      m_told_granted = true;
      util::log_verbose("ZooKeeper at {} grants sessions of {} at most ({}SessionTimeout), not the "
                        "default --ttl {}: the lease is {}",
                        m_url.shown, util::format_duration(granted), granted < ttl ? "max" : "min",
                        util::format_duration(ttl), util::format_duration(granted));
    }
    return std::nullopt;
  }
  if (granted > ttl) {
    return Error(ExitCode::usage,
                 "--ttl {} is shorter than the shortest session ZooKeeper at {} grants ({}, its "
                 "minSessionTimeout): dlock's lease is the session; use --ttl {} or more",
                 util::format_duration(ttl), m_url.shown, util::format_duration(granted),
                 util::format_duration(granted));
  }
  if (granted < ttl) {
    return Error(ExitCode::usage,
                 "--ttl {} is longer than the longest session ZooKeeper at {} grants ({}, its "
                 "maxSessionTimeout): it would end dlock's session, and free the lock, before the "
                 "lease runs out; use --ttl {} or less",
                 util::format_duration(ttl), m_url.shown, util::format_duration(granted),
                 util::format_duration(granted));
  }
  return std::nullopt;
}

Error ZookeeperStore::error_of(int rc, std::string_view what) const
{
  switch (rc) {
  case ZNOAUTH:
  case ZAUTHFAILED:
    return Error(ExitCode::auth, "ZooKeeper at {} refused to {}: {}{}", m_url.shown, what,
                 describe(rc), m_url.user.empty() ? " (give user:password@ in the URL)" : "");
  case ZCONNECTIONLOSS:
  case ZOPERATIONTIMEOUT:
  case ZSESSIONEXPIRED:
  case ZSESSIONMOVED:
  case ZCLOSING:
  case ZINVALIDSTATE:
    return Error(ExitCode::unavailable, "ZooKeeper at {} could not {}: {}", m_url.shown, what,
                 describe(rc));
  case ZNOCHILDRENFOREPHEMERALS:
    return Error(ExitCode::config, "ZooKeeper at {}: cannot {}: the chroot is an ephemeral node",
                 m_url.shown, what);
  default:
    return Error(ExitCode::internal, "ZooKeeper at {} could not {}: {}", m_url.shown, what,
                 describe(rc));
  }
}

// --- acquisition -------------------------------------------------------------------------

void ZookeeperStore::start_acquire(const lock::LockName& name, const lock::AcquireRequest& request)
{
  Named& n = named(name);
  n.token = request.token;
  n.kind = request.kind;
  n.request = request;
  n.request.holder.ttl_ms = request.ttl.count();
  n.attempts = 0;
  n.woken = false;
  n.wake_by.reset();
  n.side_watches.clear();
  try {
    client(request.ttl);
  } catch (const Error& error) {
    m_answers.answer(Op::acquire, error);
    return;
  }
  if (n.held && !m_dead && n.session == m_client->session_id()) {
    // Asked again for a lock this session holds (a retry after a lost answer): it is ours.
    Outcome outcome{.op = Op::acquire};
    outcome.acquire.acquired = true;
    outcome.acquire.fence = n.fence;
    m_answers.answer(std::move(outcome));
    return;
  }
  n.held = false;
  std::string key = name.str();
  Millis ttl = request.ttl;
  bool given = request.ttl_given;
  bool check_superseded = request.policy.supersede && request.ticket.registered;
  when_ready([this, key, ttl, given, check_superseded](std::optional<Error> error) {
    if (!error) {
      error = check_session(ttl, given);
    }
    if (error) {
      m_answers.answer(Op::acquire, error);
      return;
    }
    if (!check_superseded) {
      place(key);
      return;
    }
    auto asking = m_named.find(key);
    if (asking == m_named.end()) {
      return;
    }
    // --supersede: a newer waiter's record ends this one's wait.
    m_client->get(side_path(asking->second.dir, supersede_node), side_cap, [this, key](Reply& got) {
      auto found = m_named.find(key);
      if (found == m_named.end()) {
        return;
      }
      Named& e = found->second;
      std::optional<SideRecord> newest;
      if (got.rc == ZOK) {
        newest = parse_side_record(got.value);
      }
      if (!newest || newest->waiter == e.request.ticket.waiter_id) {
        place(key);
        return;
      }
      Outcome outcome{.op = Op::acquire};
      outcome.acquire.lease = lock::AcquireResult::Lease::no_expiry;
      outcome.acquire.superseded_by = newest->holder;
      std::string node = e.node;
      std::vector<std::string> partner = others_of(e);
      bool ours = !node.empty() && e.session == m_client->session_id();
      m_named.erase(found); // its registration goes
      if (!ours) {
        m_answers.answer(std::move(outcome));
        return;
      }
      remove_contender(node, partner,
                       [this, outcome](Reply&) mutable { m_answers.answer(std::move(outcome)); });
    });
  });
}

void ZookeeperStore::place(const std::string& key)
{
  Named& n = m_named.at(key);
  if (++n.attempts > max_steps) {
    m_answers.answer(Op::acquire, Error(ExitCode::unavailable,
                                        "ZooKeeper at {}: the node of lock '{}' kept disappearing",
                                        m_url.shown, key));
    return;
  }
  if (!n.node.empty() && n.session != m_client->session_id()) {
    forget_nodes(n); // made by a session that ended: the server deleted them
  }
  if (!n.node.empty()) {
    judge(key);
    return;
  }
  if (!n.maybe_created) {
    create(key);
    return;
  }
  // A create whose answer was lost may have made our node: find it by its uuid.
  m_client->get_children(queue_dir(n), [this, key](Reply& reply) {
    auto found = m_named.find(key);
    if (found == m_named.end()) {
      return;
    }
    Named& e = found->second;
    if (reply.rc != ZOK && reply.rc != ZNONODE) {
      m_answers.answer(Op::acquire,
                       error_of(reply.rc, "list the contenders of lock '" + key + "'"));
      return;
    }
    e.maybe_created = false;
    for (const Contender& c : sorted_contenders(reply.children)) {
      if (c.uuid == e.uuid) {
        e.node = queue_dir(e) + "/" + c.name;
        e.partner = c.partner.empty() ? "" : queue_dir(e) + "/" + c.partner;
        e.latch = c.latch.empty() ? "" : queue_dir(e) + "/" + c.latch;
        e.session = m_client->session_id();
        e.fence = 0; // read again by judge
      }
    }
    place(key);
  });
}

void ZookeeperStore::create(const std::string& key)
{
  Named& n = m_named.at(key);
  Role role = role_of(n.kind);
  std::string record = holder_record(n.request.holder, token_fingerprint(n.token));
  bool semaphore = n.kind.mode == lock::LockKind::Mode::limit;
  bool pair = role == Role::exclusive && !semaphore;
  std::vector<Client::Op> ops{{.path = queue_dir(n) + "/" + contender_prefix(n.uuid, role),
                               .data = pair ? lock_node_data(n.request.holder, record) : record,
                               .flags = zoo().ZOO_EPHEMERAL_SEQUENTIAL}};
  if (pair) {
    // Its pair (nodes.hpp): the node Curator's read and write locks see, in the same step; it
    // has the record, where the "lock-" node has a candidate's value (Curator's leader id).
    ops.push_back({.path = n.dir + "/" + contender_prefix(n.uuid, Role::write),
                   .data = record,
                   .flags = zoo().ZOO_EPHEMERAL_SEQUENTIAL});
    if (!n.request.holder.value.empty()) {
      // A candidate's third node, for Curator's LeaderLatch, which sees only "latch-" nodes.
      ops.push_back({.path = n.dir + "/" + contender_prefix(n.uuid, Role::latch),
                     .data = n.request.holder.value,
                     .flags = zoo().ZOO_EPHEMERAL_SEQUENTIAL});
    }
  }
  n.creating = true;
  auto made = std::make_shared<bool>(false); // the listing sent with it judges
  m_client->multi(std::move(ops), [this, key, made](Reply& reply) {
    auto found = m_named.find(key);
    if (found == m_named.end()) {
      return;
    }
    Named& e = found->second;
    e.creating = false;
    if (reply.rc == ZOK && !reply.children.empty()) {
      e.node = reply.children.front();
      e.partner = reply.children.size() > 1 ? reply.children[1] : "";
      e.latch = reply.children.size() > 2 ? reply.children[2] : "";
      e.session = m_client->session_id();
      e.fence = 0; // its czxid (a transaction's creates do not say it): watch_held reads it
      *made = true;
      return;
    }
    if (reply.rc == ZNONODE) {
      bool levels = e.kind.mode == lock::LockKind::Mode::limit;
      make_path(
        queue_dir(e),
        [this, key](std::optional<Error> error) {
          if (error) {
            m_answers.answer(Op::acquire, error);
          } else if (m_named.contains(key)) {
            place(key);
          }
        },
        levels ? 2 : 1);
      return;
    }
    if (reply.rc == ZCONNECTIONLOSS || reply.rc == ZOPERATIONTIMEOUT) {
      e.maybe_created = true;
    }
    m_answers.answer(Op::acquire, error_of(reply.rc, "create a node for lock '" + key + "'"));
  });
  // The queue, asked in the same round trip: ZooKeeper answers a session's requests in the
  // order sent, so this listing is taken after the transaction and has our nodes.
  m_client->get_children(queue_dir(n), [this, key, made](Reply& listed) {
    if (*made && m_named.contains(key)) {
      judge_listed(key, listed);
    }
  });
}

void ZookeeperStore::judge(const std::string& key)
{
  Named& n = m_named.at(key);
  if (n.kind.mode == lock::LockKind::Mode::limit) {
    m_client->get_children(queue_dir(n), [this, key](Reply& reply) {
      if (m_named.contains(key)) {
        judge_listed(key, reply);
      }
    });
    return;
  }
  // A waiter woken by the deletion of the node before it is most often the head now: the
  // head's reads (admit's) go in the same round trip as the listing, and are used when it
  // makes this contender the head (else passed over).
  auto ahead = std::make_shared<bool>(false);
  m_client->get_children(queue_dir(n), [this, key, ahead](Reply& reply) {
    if (!m_named.contains(key)) {
      return;
    }
    if (!heads(key, reply)) {
      judge_listed(key, reply);
      return;
    }
    *ahead = step_admit(key);
  });
  head_reads(key, ahead);
}

bool ZookeeperStore::heads(const std::string& key, const Reply& reply) const
{
  const Named& e = m_named.at(key);
  if (reply.rc != ZOK || e.kind.mode == lock::LockKind::Mode::limit
      || std::find(reply.children.begin(), reply.children.end(), leases_node)
           != reply.children.end()) {
    return false;
  }
  std::vector<Contender> queue = sorted_contenders(reply.children);
  std::string ours = basename_of(e.node);
  for (std::size_t i = 0; i < queue.size(); ++i) {
    if (queue[i].name == ours) {
      return queue[i].partner == basename_of(e.partner) && queue[i].latch == basename_of(e.latch)
             && zookeeper::judge(queue, i).holds;
    }
  }
  return false;
}

void ZookeeperStore::judge_listed(const std::string& key, Reply& reply)
{
  {
    Named& e = m_named.at(key);
    if (reply.rc != ZOK && reply.rc != ZNONODE) {
      m_answers.answer(Op::acquire,
                       error_of(reply.rc, "list the contenders of lock '" + key + "'"));
      return;
    }
    std::vector<Contender> queue = sorted_contenders(reply.children);
    bool leases =
      std::find(reply.children.begin(), reply.children.end(), leases_node) != reply.children.end();
    if (e.kind.mode == lock::LockKind::Mode::limit || !leases) {
      judge_queue(key, queue);
      return;
    }
    // A semaphore's leases beside the queue: the key is held as one (our nodes were made
    // before this look, and a semaphore's contender looks for ours after making its lease).
    std::string dir = side_path(e.dir, leases_node);
    m_client->get_children(dir, [this, key, dir, queue](Reply& listed) {
      std::vector<std::string> names = sorted_leases(listed.children);
      if (!m_named.contains(key)) {
        return;
      }
      if (listed.rc != ZOK || names.empty()) {
        judge_queue(key, queue);
        return;
      }
      m_client->get(dir + "/" + names.front(), side_cap, [this, key, names](Reply& first) {
        if (!m_named.contains(key)) {
          return;
        }
        int limit = first.rc == ZOK ? lease_limit(first.value) : 0;
        int count = static_cast<int>(std::min<std::size_t>(names.size(), 1000));
        refuse_kind(key, lock::LockKind::semaphore(limit >= 2 ? limit : std::max(2, count)));
      });
    });
  }
}

void ZookeeperStore::judge_queue(const std::string& key, const std::vector<Contender>& queue)
{
  {
    Named& e = m_named.at(key);
    std::string ours = basename_of(e.node);
    std::optional<std::size_t> index;
    for (std::size_t i = 0; i < queue.size(); ++i) {
      if (queue[i].name == ours) {
        index = i;
      }
    }
    if (!index || queue[*index].partner != basename_of(e.partner)
        || queue[*index].latch != basename_of(e.latch)) {
      // Deleted under us (release --force of a waiter, or the session ended), or part of it:
      // what is left goes, and it queues again.
      std::string node = e.node;
      std::vector<std::string> partner = others_of(e);
      forget_nodes(e);
      if (!index) {
        node.clear();
      }
      remove_contender(node, partner, [this, key](Reply&) {
        if (m_named.contains(key)) {
          place(key);
        }
      });
      return;
    }
    Verdict verdict = zookeeper::judge(queue, *index);
    if (verdict.holds) {
      if (e.kind.mode == lock::LockKind::Mode::limit) {
        take_lease(key);
      } else {
        admit(key);
      }
      return;
    }
    if (e.request.ticket.mode == lock::WaitMode::once) {
      // --no-wait: leave the queue at once, then say who holds it.
      std::string node = e.node;
      std::vector<std::string> partner = others_of(e);
      forget_nodes(e);
      remove_contender(node, partner, [this, key, queue](Reply& seen) {
        if (seen.rc != ZOK && seen.rc != ZNONODE) {
          m_answers.answer(Op::acquire, error_of(seen.rc, "delete the node of lock '" + key + "'"));
          return;
        }
        report_holder(key, queue);
      });
      return;
    }
    // Wait for the node before ours only (no herd): its deletion wakes this waiter.
    e.watching = queue_dir(e) + "/" + queue[verdict.wait_for].name;
    e.woken = false;
    m_client->exists(e.watching, true, [this, key, queue](Reply& seen) {
      auto again = m_named.find(key);
      if (again == m_named.end()) {
        return;
      }
      if (seen.rc == ZNONODE) {
        again->second.watching.clear();
        place(key); // gone already: look again
        return;
      }
      if (seen.rc != ZOK) {
        m_answers.answer(Op::acquire,
                         error_of(seen.rc, "watch the contenders of lock '" + key + "'"));
        return;
      }
      if (!again->second.request.policy.supersede) {
        report_holder(key, queue);
        return;
      }
      announce(key, [this, key, queue] {
        if (m_named.contains(key)) {
          report_holder(key, queue);
        }
      });
    });
  }
}

std::string ZookeeperStore::queue_dir(const Named& n) const
{
  return n.kind.mode == lock::LockKind::Mode::limit ? side_path(n.dir, mutex_node) : n.dir;
}

std::vector<std::string> ZookeeperStore::others_of(const Named& n)
{
  std::vector<std::string> others;
  for (const std::string* node : {&n.partner, &n.latch, &n.lease}) {
    if (!node->empty()) {
      others.push_back(*node);
    }
  }
  return others;
}

void ZookeeperStore::forget_nodes(Named& n)
{
  n.node.clear();
  n.partner.clear();
  n.latch.clear();
  n.lease.clear();
}

void ZookeeperStore::refuse_kind(const std::string& key, lock::LockKind kind)
{
  Named& n = m_named.at(key);
  std::string node = n.node;
  std::vector<std::string> second = others_of(n);
  forget_nodes(n);
  n.held = false;
  remove_contender(node, second, [this, kind](Reply&) {
    Outcome outcome{.op = Op::acquire};
    outcome.acquire.kind_in_use = kind;
    m_answers.answer(std::move(outcome));
  });
}

void ZookeeperStore::take_lease(const std::string& key)
{
  Named& n = m_named.at(key);
  if (!n.lease.empty()) {
    count_leases(key); // made by an earlier attempt, which waited under the mutex
    return;
  }
  std::string leases = side_path(n.dir, leases_node);
  std::string record = lease_record(n.request.holder, token_fingerprint(n.token), n.kind.limit);
  m_client->create(
    leases + "/" + lease_prefix(n.uuid), record, zoo().ZOO_EPHEMERAL_SEQUENTIAL,
    [this, key, leases](Reply& made) {
      auto found = m_named.find(key);
      if (found == m_named.end()) {
        return;
      }
      Named& e = found->second;
      if (made.rc == ZNONODE) {
        if (++e.attempts > max_steps) {
          m_answers.answer(Op::acquire, error_of(made.rc, "create " + leases));
          return;
        }
        make_path(
          leases,
          [this, key](std::optional<Error> error) {
            if (error) {
              m_answers.answer(Op::acquire, error);
            } else if (m_named.contains(key)) {
              take_lease(key);
            }
          },
          2);
        return;
      }
      if (made.rc != ZOK) {
        m_answers.answer(Op::acquire, error_of(made.rc, "create a lease of lock '" + key + "'"));
        return;
      }
      e.lease = made.value;
      // Held as another kind? Its contenders made their nodes before they looked for leases.
      m_client->get_children(e.dir, [this, key](Reply& top) {
        if (!m_named.contains(key)) {
          return;
        }
        std::vector<Contender> queue = sorted_contenders(top.children);
        if (top.rc == ZOK && !queue.empty()) {
          refuse_kind(key, queue.front().role == Role::read ? lock::LockKind::shared()
                                                            : lock::LockKind::exclusive());
          return;
        }
        count_leases(key);
      });
    });
}

void ZookeeperStore::count_leases(const std::string& key)
{
  Named& n = m_named.at(key);
  std::string leases = side_path(n.dir, leases_node);
  // With a watch on leases' children: a lease given back wakes the one waiter (the mutex's).
  // It is watched from now on, not from the answer: a lease given back before the answer is
  // handled would otherwise wake no one.
  if (n.request.ticket.mode != lock::WaitMode::once) {
    n.watching = leases;
    n.woken = false;
  }
  m_client->get_children(
    leases,
    [this, key, leases](Reply& listed) {
      auto found = m_named.find(key);
      if (found == m_named.end()) {
        return;
      }
      Named& e = found->second;
      if (listed.rc != ZOK && listed.rc != ZNONODE) {
        m_answers.answer(Op::acquire, error_of(listed.rc, "list the leases of lock '" + key + "'"));
        return;
      }
      std::vector<std::string> names = sorted_leases(listed.children);
      std::string ours = basename_of(e.lease);
      if (std::find(names.begin(), names.end(), ours) == names.end()) {
        e.lease.clear(); // deleted under us (release --force): make another
        if (++e.attempts > max_steps) {
          m_answers.answer(Op::acquire,
                           Error(ExitCode::unavailable,
                                 "ZooKeeper at {}: the lease of lock '{}' kept disappearing",
                                 m_url.shown, key));
          return;
        }
        take_lease(key);
        return;
      }
      m_client->get(leases + "/" + names.front(), side_cap, [this, key, names, ours](Reply& first) {
        auto again = m_named.find(key);
        if (again == m_named.end()) {
          return;
        }
        Named& h = again->second;
        int limit = first.rc == ZOK ? lease_limit(first.value) : 0;
        if (names.front() != ours && limit != 0 && limit != h.kind.limit) {
          refuse_kind(key, lock::LockKind::semaphore(limit));
          return;
        }
        if (names.size() <= static_cast<std::size_t>(h.kind.limit)) {
          // Ours: the lease is the hold, and the mutex goes back.
          std::string mutex = h.node;
          h.node = h.lease;
          h.lease.clear();
          h.partner.clear();
          h.watching.clear();
          h.fence = 0;
          m_client->remove(mutex, [](Reply&) {});
          watch_held(key);
          return;
        }
        if (h.request.ticket.mode != lock::WaitMode::once) {
          report_leases(key); // the children's watch, set above, wakes it
          return;
        }
        std::string node = h.node;
        std::string lease = h.lease;
        h.node.clear();
        h.lease.clear();
        remove_contender(node, {lease}, [this, key](Reply&) {
          if (m_named.contains(key)) {
            report_leases(key);
          }
        });
      });
    },
    true);
}

void ZookeeperStore::report_leases(const std::string& key)
{
  Named& n = m_named.at(key);
  std::string leases = side_path(n.dir, leases_node);
  std::string ours = basename_of(n.lease);
  m_client->get_children(leases, [this, key, leases, ours](Reply& listed) {
    std::vector<std::string> names = sorted_leases(listed.children);
    std::erase(names, ours);
    auto answer = [this, key, count = names.size()](const lock::HolderInfo& holder) {
      auto found = m_named.find(key);
      Outcome outcome{.op = Op::acquire};
      outcome.acquire.lease = lock::AcquireResult::Lease::no_expiry; // sessions, not TTLs
      outcome.acquire.block =
        found != m_named.end() ? found->second.request.ticket.max_block : Millis(1000);
      outcome.acquire.holder = holder;
      outcome.acquire.holders = static_cast<std::int64_t>(count);
      m_answers.answer(std::move(outcome));
    };
    if (names.empty()) {
      answer(lock::HolderInfo{});
      return;
    }
    m_client->get(leases + "/" + names.front(), lock::max_holder_record_bytes + 1,
                  [answer](Reply& got) {
                    lock::HolderInfo holder;
                    if (got.rc == ZOK) {
                      holder = parse_holder_record(got.value);
                      if (got.stat) {
                        holder.fence = got.stat->czxid;
                        holder.acquired_ms = got.stat->ctime;
                      }
                    }
                    answer(holder);
                  });
  });
}

void ZookeeperStore::report_holder(const std::string& key, const std::vector<Contender>& queue)
{
  std::vector<std::size_t> holders = holding(queue);
  Named& n = m_named.at(key);
  if (n.kind.mode == lock::LockKind::Mode::limit) {
    report_leases(key); // the mutex's holder is no holder of the semaphore
    return;
  }
  auto not_acquired = [this, key, holders](std::optional<lock::HolderInfo> holder, bool asked) {
    auto found = m_named.find(key);
    Outcome outcome{.op = Op::acquire};
    outcome.acquire.lease = lock::AcquireResult::Lease::no_expiry; // a session, not a TTL
    outcome.acquire.block =
      found != m_named.end() ? found->second.request.ticket.max_block : Millis(1000);
    if (holder) {
      outcome.acquire.holder = *holder;
    }
    outcome.acquire.holders = static_cast<std::int64_t>(holders.size());
    outcome.acquire.replace_asked = asked;
    m_answers.answer(std::move(outcome));
  };
  if (holders.empty()) {
    not_acquired(std::nullopt, false);
    return;
  }
  std::string head = queue[holders.front()].name;
  bool replace = n.request.policy.replace && holders.size() == 1;
  std::string ours = token_fingerprint(n.token);
  m_client->get(
    n.dir + "/" + record_of(queue[holders.front()]), lock::max_holder_record_bytes + 1,
    [this, key, head, replace, ours, not_acquired](Reply& reply) {
      if (reply.rc != ZOK) {
        not_acquired(std::nullopt, false); // released meanwhile
        return;
      }
      std::string fingerprint;
      lock::HolderInfo holder = parse_holder_record(reply.value, &fingerprint);
      if (reply.stat) {
        holder.fence = reply.stat->czxid;
        holder.acquired_ms = reply.stat->ctime;
      }
      if (!replace || fingerprint.empty() || fingerprint == ours || !m_named.contains(key)) {
        not_acquired(holder, false); // nothing to ask of a holder not dlock's
        return;
      }
      ask_replace(key, head, [holder, not_acquired](bool asked) { not_acquired(holder, asked); });
    });
}

// --- the policies' side nodes ----------------------------------------------------------------

void ZookeeperStore::server_now(const std::string& dir, std::function<void(std::int64_t)> then)
{
  std::string path = side_path(dir, clock_node) + random_uuid();
  m_client->create(path, "", zoo().ZOO_EPHEMERAL, [this, path, then](Reply& made) {
    if (made.rc != ZOK || !made.stat) {
      util::log_verbose("ZooKeeper at {} did not tell its time ({}): using this host's clock",
                        m_url.shown, describe(made.rc));
      then(util::unix_ms());
      return;
    }
    std::int64_t now = made.stat->ctime;
    m_client->remove(path, [](Reply&) {}); // ephemeral: it goes with the session at the latest
    then(now);
  });
}

void ZookeeperStore::admit(const std::string& key)
{
  if (!step_admit(key)) {
    return;
  }
  head_reads(key, nullptr);
}

bool ZookeeperStore::step_admit(const std::string& key)
{
  Named& n = m_named.at(key);
  if (++n.attempts > max_steps) {
    m_answers.answer(Op::acquire,
                     Error(ExitCode::unavailable,
                           "ZooKeeper at {}: the policy node of lock '{}' kept changing",
                           m_url.shown, key));
    return false;
  }
  return true;
}

void ZookeeperStore::head_reads(const std::string& key, std::shared_ptr<bool> ahead)
{
  Named& n = m_named.at(key);
  std::string path = side_path(n.dir, policy_node);
  // The holder's look at its nodes (their watches, the fence) and at a --replace request goes
  // in the same round trip, answered after the policy node's (ZooKeeper answers a session's
  // requests in order): the usual head, which finds no policy node and writes none, holds
  // from them.
  auto policy = std::make_shared<Reply>();
  m_client->get(path, side_cap, [policy](Reply& reply) { *policy = std::move(reply); });
  const lock::LockPolicy& own = n.request.policy;
  bool writes = own.min_hold > Millis(0) || own.lock_delay > Millis(0);
  watch_held(key, [this, key, path, policy, writes, ahead] {
    if (ahead && !*ahead) {
      return false; // sent ahead of a listing that did not make it the head
    }
    if (policy->rc == ZNONODE && !writes) {
      return true;
    }
    honour_policy(key, path, *policy);
    return false;
  });
}

void ZookeeperStore::honour_policy(const std::string& key, const std::string& path, Reply& reply)
{
  {
    auto found = m_named.find(key);
    if (found == m_named.end()) {
      return;
    }
    Named& e = found->second;
    if (reply.rc == ZNONODE) {
      settle_in(key);
      return;
    }
    if (reply.rc != ZOK && reply.rc != ZNOAUTH) {
      m_answers.answer(Op::acquire, error_of(reply.rc, "read the policy of lock '" + key + "'"));
      return;
    }
    int version = reply.stat ? reply.stat->version : -1;
    // Over, not dlock's (unreadable included), or ours from an attempt whose answer was lost: it
    // goes. One that cannot go (another tenant's, with children or an ACL) is passed over: this
    // holder keeps no policy of its own rather than never taking the lock.
    auto forget = [this, key, path, version] {
      m_client->remove(
        path,
        [this, key](Reply& gone) {
          if (!m_named.contains(key)) {
            return;
          }
          if (gone.rc == ZOK || gone.rc == ZNONODE) {
            settle_in(key);
            return;
          }
          if (gone.rc == ZBADVERSION) {
            admit(key); // changed meanwhile: look again
            return;
          }
          util::log_warning(
            "lock '{}': cannot remove {} ({}), which is not dlock's: its --min-hold "
            "and --lock-delay are not kept",
            key, std::string(policy_node), describe(gone.rc));
          watch_held(key);
        },
        version);
    };
    if (reply.rc != ZOK || !reply.stat) {
      forget();
      return;
    }
    Stat stat = *reply.stat;
    std::optional<SideRecord> record = parse_side_record(reply.value);
    if (!record || record->token == token_fingerprint(e.token)) {
      forget();
      return;
    }
    server_now(e.dir, [this, key, path, record = *record, stat, forget](std::int64_t now) {
      if (!m_named.contains(key)) {
        return;
      }
      Closure closure = closure_of(record, stat.ctime, now);
      if (closure.until() <= now) {
        forget();
        return;
      }
      auto lease = closure.hold_until >= closure.delay_end ? lock::AcquireResult::Lease::min_hold
                                                           : lock::AcquireResult::Lease::lock_delay;
      Millis left(closure.until() - now);
      if (!closure.stamp) {
        refuse(key, lease, left, record.holder);
        return;
      }
      // Its holder's lease ended without a release: the delay runs from now.
      SideRecord stamped = record;
      stamped.ended_at = now;
      m_client->set(path, side_record(stamped), stat.version,
                    [this, key, lease, left, holder = record.holder](Reply& done) {
                      if (!m_named.contains(key)) {
                        return;
                      }
                      if (done.rc == ZBADVERSION || done.rc == ZNONODE) {
                        admit(key); // changed meanwhile: look again
                        return;
                      }
                      refuse(key, lease, left, holder);
                    });
    });
  }
}

void ZookeeperStore::refuse(const std::string& key, lock::AcquireResult::Lease lease, Millis left,
                            const lock::HolderInfo& holder)
{
  Named& n = m_named.at(key);
  std::string node = n.node;
  std::vector<std::string> partner = others_of(n);
  forget_nodes(n); // given back: the next attempt queues again
  n.held = false;
  remove_contender(node, partner, [this, key, lease, left, holder](Reply& gone) {
    auto found = m_named.find(key);
    if (found == m_named.end()) {
      return;
    }
    Named& e = found->second;
    if (gone.rc != ZOK && gone.rc != ZNONODE) {
      m_answers.answer(Op::acquire, error_of(gone.rc, "delete the node of lock '" + key + "'"));
      return;
    }
    Outcome outcome{.op = Op::acquire};
    outcome.acquire.lease = lease;
    outcome.acquire.holder_ttl = left;
    outcome.acquire.holder = holder;
    outcome.acquire.block = std::min(left, e.request.ticket.max_block);
    if (e.request.ticket.mode == lock::WaitMode::once) {
      m_answers.answer(std::move(outcome));
      return;
    }
    // Woken when the policy node changes or goes (release --force), else at its end; a
    // --supersede waiter announces itself as it would in the queue.
    std::string policy = side_path(e.dir, policy_node);
    e.side_watches.push_back(policy);
    e.woken = false;
    m_client->exists(policy, true, [this, key, outcome](Reply&) mutable {
      auto again = m_named.find(key);
      if (again == m_named.end() || !again->second.request.policy.supersede) {
        m_answers.answer(std::move(outcome));
        return;
      }
      announce(key, [this, outcome]() mutable { m_answers.answer(std::move(outcome)); });
    });
  });
}

void ZookeeperStore::settle_in(const std::string& key)
{
  Named& n = m_named.at(key);
  const lock::LockPolicy& policy = n.request.policy;
  if (policy.min_hold <= Millis(0) && policy.lock_delay <= Millis(0)) {
    watch_held(key);
    return;
  }
  SideRecord record;
  record.holder = n.request.holder;
  record.holder.fence = n.fence;
  record.token = token_fingerprint(n.token);
  record.node = basename_of(n.node);
  record.min_hold_ms = policy.min_hold.count();
  record.lock_delay_ms = policy.lock_delay.count();
  m_client->create(side_path(n.dir, policy_node), side_record(record), zoo().ZOO_PERSISTENT,
                   [this, key](Reply& made) {
                     auto found = m_named.find(key);
                     if (found == m_named.end()) {
                       return;
                     }
                     if (made.rc == ZNODEEXISTS) {
                       admit(key); // another wrote one meanwhile: honour it
                       return;
                     }
                     if (made.rc != ZOK) {
                       m_answers.answer(
                         Op::acquire, error_of(made.rc, "write the policy of lock '" + key + "'"));
                       return;
                     }
                     watch_held(key);
                   });
}

void ZookeeperStore::watch_held(const std::string& key, std::function<bool()> first)
{
  Named& n = m_named.at(key);
  // All in one round trip; the answers come in this order.
  auto going = std::make_shared<bool>(true); // our node's answer made it the holder
  // Watch our own node: its deletion (release --force, the session's end) is the lock's loss.
  m_client->exists(n.node, true, [this, key, first, going](Reply& seen) {
    *going = false;
    auto again = m_named.find(key);
    if (again == m_named.end()) {
      return;
    }
    Named& h = again->second;
    if (seen.rc == ZOK && seen.stat) {
      h.fence = seen.stat->czxid;
    }
    if (first && !first()) {
      return;
    }
    if (seen.rc == ZNONODE) {
      if (h.kind.mode == lock::LockKind::Mode::limit) {
        h.node.clear(); // our lease went: queue again
      }
      place(key); // judge finds it gone, and its partner goes
      return;
    }
    if (seen.rc != ZOK || !seen.stat) {
      m_answers.answer(Op::acquire, error_of(seen.rc, "watch the node of lock '" + key + "'"));
      return;
    }
    h.held = true;
    h.watching.clear();
    *going = true;
  });
  for (const std::string* other : {&n.partner, &n.latch}) {
    if (!other->empty()) {
      // Its other nodes too: without them, Curator's readers or LeaderLatch would not wait.
      m_client->exists(*other, true, [](Reply&) {});
    }
  }
  // A --replace's request comes to the watch on its node sooner than to the next renewal; one
  // left against another holder's node goes.
  std::string request = side_path(n.dir, replace_node);
  m_client->exists(request, true, [this, key, request, going](Reply& asked) {
    if (!*going) {
      return; // not the holder (yet): it looks again
    }
    auto found = m_named.find(key);
    if (found != m_named.end()) {
      found->second.replace_clear = asked.rc == ZNONODE;
    }
    if (asked.rc == ZOK) {
      std::string ours = found != m_named.end() ? basename_of(found->second.node) : "";
      m_client->get(request, side_cap, [this, request, ours](Reply& got) {
        std::optional<SideRecord> record;
        if (got.rc == ZOK) {
          record = parse_side_record(got.value);
        }
        if (got.rc == ZOK && got.stat && (!record || record->node != ours)) {
          m_client->remove(
            request, [](Reply&) {}, got.stat->version);
        }
      });
    }
    Outcome outcome{.op = Op::acquire};
    outcome.acquire.acquired = true;
    outcome.acquire.fence = found != m_named.end() ? found->second.fence : 0;
    if (found != m_named.end() && m_client->session_timeout() != found->second.request.ttl) {
      outcome.acquire.validity = m_client->session_timeout(); // the session the server granted
    }
    m_answers.answer(std::move(outcome));
  });
}

void ZookeeperStore::ask_replace(const std::string& key, const std::string& head,
                                 std::function<void(bool)> then, int tries)
{
  Named& n = m_named.at(key);
  SideRecord record;
  record.holder = n.request.holder;
  record.token = token_fingerprint(n.token);
  record.node = head;
  std::string path = side_path(n.dir, replace_node);
  m_client->create(path, side_record(record), zoo().ZOO_PERSISTENT,
                   [this, key, head, then, tries, path](Reply& made) {
                     if (made.rc == ZOK) {
                       then(true);
                       return;
                     }
                     if (made.rc != ZNODEEXISTS || tries >= 3) {
                       then(false);
                       return;
                     }
                     m_client->get(path, side_cap,
                                   [this, key, head, then, tries, path](Reply& got) {
                                     std::optional<SideRecord> asked;
                                     if (got.rc == ZOK) {
                                       asked = parse_side_record(got.value);
                                     }
                                     if (asked && asked->node == head) {
                                       then(true); // asked already
                                       return;
                                     }
                                     if (got.rc != ZOK && got.rc != ZNONODE) {
                                       then(false);
                                       return;
                                     }
                                     // A request against a holder gone, or not dlock's: replaced by
                                     // ours.
                                     m_client->remove(
                                       path,
                                       [this, key, head, then, tries](Reply&) {
                                         if (m_named.contains(key)) {
                                           ask_replace(key, head, then, tries + 1);
                                         } else {
                                           then(false);
                                         }
                                       },
                                       got.stat ? got.stat->version : -1);
                                   });
                   });
}

void ZookeeperStore::announce(const std::string& key, std::function<void()> then)
{
  Named& n = m_named.at(key);
  std::string path = side_path(n.dir, supersede_node);
  auto watch = [this, key, path, then] {
    auto found = m_named.find(key);
    if (found == m_named.end()) {
      return;
    }
    found->second.side_watches.push_back(path);
    m_client->exists(path, true, [this, key, path, then](Reply& seen) {
      if (seen.rc != ZOK) {
        then();
        return;
      }
      // The watch is set: a record written after this read wakes it; one written before (a
      // newer waiter's, between the look that placed this one and now) is seen here.
      m_client->get(path, side_cap, [this, key, then](Reply& got) {
        auto waiting = m_named.find(key);
        if (waiting != m_named.end() && got.rc == ZOK) {
          std::optional<SideRecord> newest = parse_side_record(got.value);
          if (newest && newest->waiter != waiting->second.request.ticket.waiter_id) {
            waiting->second.woken = true; // superseded meanwhile: look at once
          }
        }
        then();
      });
    });
  };
  if (n.request.ticket.registered) {
    watch();
    return;
  }
  // The newest: its record replaces the last one (the older waiters watching it wake), an
  // ephemeral node of its session, which goes when it gives up or ends.
  SideRecord record;
  record.holder = n.request.holder;
  record.token = token_fingerprint(n.token);
  record.waiter = n.request.ticket.waiter_id;
  m_client->remove(path, [this, key, path, record, watch](Reply&) {
    m_client->create(path, side_record(record), zoo().ZOO_EPHEMERAL,
                     [this, key, watch](Reply& made) {
                       auto found = m_named.find(key);
                       if (found == m_named.end()) {
                         return;
                       }
                       if (made.rc != ZOK) {
                         found->second.woken = true; // a newer one meanwhile: look at once
                       }
                       watch();
                     });
  });
}

void ZookeeperStore::settle_release(const std::string& dir, const std::string& fingerprint,
                                    const std::string& node, std::function<void(Millis, bool)> then,
                                    int tries, bool policy_too)
{
  bool forced = fingerprint.empty();
  std::string request = side_path(dir, replace_node);
  std::string policy = side_path(dir, policy_node);
  m_client->get(request, side_cap, [=, this](Reply& asked) {
    std::optional<SideRecord> ask;
    if (asked.rc == ZOK) {
      ask = parse_side_record(asked.value);
    }
    bool replaced = !forced && ask && ask->node == node;
    if (asked.rc == ZOK && asked.stat) {
      // Against this holder, or left against one gone (none can be asked of the next holder
      // before this one releases): over either way.
      m_client->remove(
        request, [](Reply&) {}, asked.stat->version);
    }
    if (forced) {
      // Another tenant's record in place of the newest --supersede waiter's goes too.
      m_client->get(side_path(dir, supersede_node), side_cap, [this, dir](Reply& got) {
        if (got.rc == ZOK && got.stat && !parse_side_record(got.value)) {
          m_client->remove(
            side_path(dir, supersede_node), [](Reply&) {}, got.stat->version);
        }
      });
    }
    if (!policy_too && !forced) {
      then(Millis(0), false); // this holder wrote none
      return;
    }
    m_client->get(policy, side_cap, [=, this](Reply& got) {
      if (got.rc != ZOK || !got.stat) {
        then(Millis(0), false);
        return;
      }
      Stat stat = *got.stat;
      std::optional<SideRecord> record = parse_side_record(got.value);
      auto again = [=, this](Reply& done) {
        if (done.rc == ZBADVERSION && tries < 3) {
          settle_release(dir, fingerprint, node, then, tries + 1, policy_too);
          return true;
        }
        return false;
      };
      if (!record) {
        if (forced) {
          m_client->remove(
            policy, [](Reply&) {}, stat.version);
        }
        then(Millis(0), false);
        return;
      }
      if (forced) {
        // Frees a --min-hold at once; a --lock-delay armed runs from now.
        server_now(dir, [=, this, record = *record](std::int64_t now) {
          Closure closure = closure_of(record, stat.ctime, now);
          bool freed = closure.hold_until > now;
          auto done = [=, this](Reply& reply) {
            if (!again(reply)) {
              then(Millis(0), freed);
            }
          };
          if (record.lock_delay_ms > 0 && !record.released) {
            SideRecord ended = record;
            ended.min_hold_ms = 0;
            ended.ended_at = record.ended_at != 0 ? record.ended_at : now;
            m_client->set(policy, side_record(ended), stat.version, done);
          } else {
            m_client->remove(policy, done, stat.version);
          }
        });
        return;
      }
      if (record->token != fingerprint || record->ended_at != 0) {
        then(Millis(0), false); // not this holder's, or its lease ended (forced) before
        return;
      }
      if (replaced || record->min_hold_ms == 0) {
        // No lock-delay after a release, no --min-hold kept for a holder that was replaced.
        m_client->remove(
          policy,
          [=](Reply& reply) {
            if (!again(reply)) {
              then(Millis(0), false);
            }
          },
          stat.version);
        return;
      }
      // Its command ended: the lock stays taken until hold_until, the delay disarmed.
      SideRecord released = *record;
      released.released = true;
      m_client->set(policy, side_record(released), stat.version, [=, this](Reply& reply) {
        if (again(reply)) {
          return;
        }
        if (reply.rc != ZOK || !reply.stat) {
          then(Millis(0), false);
          return;
        }
        std::int64_t left = stat.ctime + record->min_hold_ms - reply.stat->mtime;
        if (left > 0) {
          then(Millis(left), false);
          return;
        }
        m_client->remove(
          policy, [](Reply&) {}, reply.stat->version);
        then(Millis(0), false);
      });
    });
  });
}

void ZookeeperStore::make_path(const std::string& path,
                               std::function<void(std::optional<Error>)> then,
                               std::size_t containers)
{
  // Every ancestor from the top, then path itself.
  std::vector<std::string> paths;
  for (std::size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    paths.push_back(path.substr(0, slash));
  }
  paths.push_back(path);
  create_paths(std::make_shared<std::vector<std::string>>(std::move(paths)), 0, containers,
               std::move(then));
}

void ZookeeperStore::create_paths(std::shared_ptr<std::vector<std::string>> paths, std::size_t i,
                                  std::size_t containers,
                                  std::function<void(std::optional<Error>)> then)
{
  if (i == paths->size()) {
    then(std::nullopt);
    return;
  }
  int flags = i + containers >= paths->size() ? zoo().ZOO_CONTAINER : zoo().ZOO_PERSISTENT;
  std::string path = (*paths)[i];
  m_client->create(path, "", flags, [this, paths, i, containers, then, path](Reply& reply) {
    if (reply.rc != ZOK && reply.rc != ZNODEEXISTS) {
      then(error_of(reply.rc, "create " + path));
      return;
    }
    create_paths(paths, i + 1, containers, then);
  });
}

void ZookeeperStore::start_wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                                         Millis block)
{
  if (ticket.mode == lock::WaitMode::watch || ticket.mode == lock::WaitMode::barrier
      || ticket.mode == lock::WaitMode::latch || ticket.mode == lock::WaitMode::leader) {
    auto found = m_gates.find(name.str());
    if (found == m_gates.end() || found->second.woken || found->second.watched.empty()) {
      if (found != m_gates.end()) {
        found->second.woken = false;
      }
      m_answers.answer(Op::wait_for_wake);
      return;
    }
    found->second.wake_by = util::monotonic_now() + block;
    return;
  }
  Named* n = find(name);
  if (n == nullptr || n->woken || (n->watching.empty() && n->side_watches.empty())) {
    if (n != nullptr) {
      n->woken = false;
    }
    m_answers.answer(Op::wait_for_wake);
    return;
  }
  n->wake_by = util::monotonic_now() + block;
}

// --- holding -----------------------------------------------------------------------------

void ZookeeperStore::start_renew(const lock::LockName& name, const lock::RenewRequest& request)
{
  Named* n = find(name);
  if (n != nullptr && n->held && n->token == request.token) {
    Outcome outcome{.op = Op::renew};
    outcome.slot = n->kind.has_slots();
    if (!m_client || !m_client->owned() || m_dead || m_client->session_id() != n->session) {
      n->held = false;
      m_answers.answer(outcome); // the session that held it ended: its node went with it
      return;
    }
    Millis granted = m_client->session_timeout();
    if (m_cut_off_since && granted < n->request.ttl) {
      // A session shorter than the holder's TTL (the server's bound took the default's place):
      // cut off, the server may expire it (2/3 of it passed unheard before the client said so)
      // long before the holder's own deadline: lost.
      n->held = false;
      m_answers.answer(outcome);
      return;
    }
    std::string key = name.str();
    // An exclusive pair's other half first (its answer comes before the node's): without it,
    // Curator's readers would not wait.
    auto half = std::make_shared<bool>(true);
    for (const std::string* other : {&n->partner, &n->latch}) {
      if (other->empty()) {
        continue;
      }
      std::int64_t session = n->session;
      m_client->exists(*other, false, [half, session](Reply& reply) {
        bool ours = reply.rc != ZOK || (reply.stat && reply.stat->ephemeralOwner == session);
        *half = *half && ours && reply.rc != ZNONODE;
      });
    }
    m_client->exists(n->node, false, [this, key, outcome, half](Reply& reply) mutable {
      auto found = m_named.find(key);
      if (found == m_named.end()) {
        m_answers.answer(outcome);
        return;
      }
      Named& e = found->second;
      if (reply.rc == ZOK && reply.stat) {
        outcome.held = reply.stat->ephemeralOwner == e.session && *half;
      } else if (reply.rc == ZNONODE || reply.rc == ZSESSIONEXPIRED || reply.rc == ZINVALIDSTATE
                 || reply.rc == ZAUTHFAILED) {
        outcome.held = false;
      } else {
        outcome.error = error_of(reply.rc, "confirm lock '" + key + "'");
        m_answers.answer(std::move(outcome));
        return;
      }
      e.held = outcome.held;
      if (!outcome.held) {
        m_answers.answer(std::move(outcome));
        return;
      }
      // A --replace's request against our node: not confirmed (the lock stays ours until we
      // release it); the watch on the request's node is set again.
      std::string asking = side_path(e.dir, replace_node);
      std::string ours = basename_of(e.node);
      m_client->exists(asking, true, [this, key, asking, ours, outcome](Reply& asked) mutable {
        if (auto still = m_named.find(key); still != m_named.end()) {
          still->second.replace_clear = asked.rc == ZNONODE;
        }
        if (asked.rc != ZOK) {
          m_answers.answer(std::move(outcome));
          return;
        }
        m_client->get(asking, side_cap, [this, key, ours, outcome](Reply& got) mutable {
          std::optional<SideRecord> record;
          if (got.rc == ZOK) {
            record = parse_side_record(got.value);
          }
          if (record && record->node == ours && m_named.contains(key)) {
            outcome.held = false;
            outcome.replaced_by = record->holder;
          }
          m_answers.answer(std::move(outcome));
        });
      });
    });
    return;
  }
  // Held by another process (a nested run checks its parent's token): its node's record
  // carries the token's fingerprint.
  try {
    client(inspect_session);
  } catch (const Error& error) {
    m_answers.answer(Op::renew, error);
    return;
  }
  std::string fingerprint = token_fingerprint(request.token);
  bool slot = request.slot;
  inspect(dir_of(name), [this, fingerprint, slot](Inspection& found) {
    Outcome outcome{.op = Op::renew, .error = found.error};
    outcome.slot = slot;
    for (const std::string& f : found.fingerprints) {
      outcome.held = outcome.held || f == fingerprint;
    }
    m_answers.answer(std::move(outcome));
  });
}

void ZookeeperStore::start_release(const lock::LockName& name, const std::string& token)
{
  Named* n = find(name);
  std::string key = name.str();
  if (!token.empty() && n != nullptr && n->token == token && !n->node.empty()) {
    bool held = n->held;
    std::string node = n->node;
    std::vector<std::string> partner = others_of(*n);
    std::string dir = n->dir;
    bool semaphore = n->kind.mode == lock::LockKind::Mode::limit;
    // Whether it may have left side nodes to settle: a policy node (only a holder with
    // --min-hold or --lock-delay writes one with its token), a --replace request (one made
    // since the watch on its node was set would have fired it).
    bool policy =
      n->request.policy.min_hold > Millis(0) || n->request.policy.lock_delay > Millis(0);
    bool asked = !n->replace_clear;
    bool alive = m_client && m_client->owned() && !m_dead && m_client->session_id() == n->session;
    m_named.erase(key);
    if (!alive) {
      m_answers.answer(Op::release); // the session ended: the server deleted the node
      return;
    }
    auto remove_node = [this, held, key, node, partner](Millis kept) {
      remove_contender(node, partner, [this, held, key, kept](Reply& reply) {
        Outcome outcome{.op = Op::release};
        if (reply.rc == ZOK) {
          outcome.held = held;
          outcome.kept_for = held ? kept : Millis(0);
        } else if (reply.rc != ZNONODE && reply.rc != ZSESSIONEXPIRED
                   && reply.rc != ZINVALIDSTATE) {
          outcome.error = error_of(reply.rc, "delete the node of lock '" + key + "'");
        }
        m_answers.answer(std::move(outcome));
      });
    };
    if (!held || semaphore || (!policy && !asked)) {
      remove_node(Millis(0));
      return;
    }
    // The policy node first: a waiter woken by our node's deletion finds it settled.
    settle_release(
      dir, token_fingerprint(token), basename_of(node),
      [remove_node](Millis kept, bool) { remove_node(kept); }, 0, policy);
    return;
  }
  // --force (no token), or a token another process holds: delete the holders' nodes; each
  // holder's watch on its own node tells it at once.
  try {
    client(inspect_session);
  } catch (const Error& error) {
    m_answers.answer(Op::release, error);
    return;
  }
  std::string fingerprint = token.empty() ? "" : token_fingerprint(token);
  std::string dir = dir_of(name);
  inspect(dir, [this, fingerprint, dir](Inspection& found) {
    if (found.error) {
      m_answers.answer(Op::release, found.error);
      return;
    }
    std::vector<std::string> paths;
    std::string node;
    for (std::size_t i = 0; found.leases && i < found.paths.size(); ++i) {
      if (fingerprint.empty() || found.fingerprints[i] == fingerprint) {
        paths.push_back(dir + "/" + found.paths[i]);
      }
    }
    if (found.leases) {
      remove_all(paths, [this](int removed, std::optional<Error> error) {
        Outcome outcome{.op = Op::release, .error = std::move(error)};
        outcome.held = removed > 0;
        m_answers.answer(std::move(outcome));
      });
      return;
    }
    for (std::size_t i = 0; i < found.holding.size(); ++i) {
      if (fingerprint.empty() || found.fingerprints[i] == fingerprint) {
        const Contender& holder = found.queue[found.holding[i]];
        for (const std::string* other : {&holder.partner, &holder.latch}) {
          if (!other->empty()) {
            paths.push_back(dir + "/" + *other);
          }
        }
        paths.push_back(dir + "/" + holder.name); // deleted first (remove_all goes backwards)
        node = holder.name;
      }
    }
    auto drop = [this, paths](Millis kept, bool freed) {
      remove_all(paths, [this, kept, freed](int removed, std::optional<Error> error) {
        Outcome outcome{.op = Op::release, .error = std::move(error)};
        outcome.held = removed > 0 || freed;
        outcome.kept_for = removed > 0 ? kept : Millis(0);
        m_answers.answer(std::move(outcome));
      });
    };
    if (!fingerprint.empty() && paths.empty()) {
      drop(Millis(0), false);
      return;
    }
    // The policy node before the holders' nodes: a holder that sees its node deleted and
    // releases finds its lock-delay already running (forced), a waiter finds it settled.
    settle_release(dir, fingerprint, node, drop);
  });
}

void ZookeeperStore::remove_contender(const std::string& node, std::vector<std::string> others,
                                      Client::Done then)
{
  if (!others.empty() && !node.empty()) {
    // All in one transaction: no reader sees part of a contender (a candidate's "lock-" node
    // alone reads as another client's holder). One of them gone already fails it: each alone.
    std::vector<Client::Op> ops;
    for (const std::string& path : others) {
      Client::Op op;
      op.create = false;
      op.path = path;
      ops.push_back(std::move(op));
    }
    ops.push_back(ops.front());
    ops.back().path = node;
    m_client->multi(std::move(ops), [this, node, others, then](Reply& all) mutable {
      if (all.rc != ZNONODE) {
        then(all);
        return;
      }
      for (const std::string& path : others) {
        m_client->remove(path, [](Reply&) {});
      }
      m_client->remove(node, std::move(then));
    });
    return;
  }
  for (const std::string& path : others) {
    m_client->remove(path, [](Reply&) {});
  }
  if (node.empty()) {
    Reply none{ZNONODE, {}, {}, {}};
    then(none);
    return;
  }
  m_client->remove(node, std::move(then));
}

void ZookeeperStore::remove_all(std::vector<std::string> paths,
                                std::function<void(int, std::optional<Error>)> then, int removed)
{
  if (paths.empty()) {
    then(removed, std::nullopt);
    return;
  }
  std::string path = paths.back();
  paths.pop_back();
  m_client->remove(path, [this, paths, then, removed, path](Reply& reply) {
    if (reply.rc != ZOK && reply.rc != ZNONODE) {
      then(removed, error_of(reply.rc, "delete " + path));
      return;
    }
    remove_all(paths, then, removed + (reply.rc == ZOK ? 1 : 0));
  });
}

void ZookeeperStore::start_withdraw(const lock::LockName& name, const lock::WaitTicket& ticket)
{
  if (ticket.mode == lock::WaitMode::watch || ticket.mode == lock::WaitMode::barrier
      || ticket.mode == lock::WaitMode::latch || ticket.mode == lock::WaitMode::leader) {
    auto found = m_gates.find(name.str());
    std::string member = found != m_gates.end() ? found->second.member : "";
    if (found != m_gates.end()) {
      m_gates.erase(found);
    }
    if (member.empty() || !m_client || !m_client->owned() || m_dead) {
      m_answers.answer(Op::withdraw);
      return;
    }
    // A barrier party's arrival goes, unless its generation tripped (its node deleted).
    m_client->remove(member, [this](Reply& gone) {
      Outcome outcome{.op = Op::withdraw};
      outcome.gate.open = gone.rc == ZNONODE;
      m_answers.answer(std::move(outcome));
    });
    return;
  }
  Named* n = find(name);
  if (n == nullptr || n->held || n->node.empty() || !m_client || m_dead
      || m_client->session_id() != n->session) {
    if (n != nullptr && !n->held) {
      m_named.erase(name.str());
    }
    m_answers.answer(Op::withdraw);
    return;
  }
  std::string node = n->node;
  std::vector<std::string> partner = others_of(*n);
  m_named.erase(name.str());
  remove_contender(node, partner, [this](Reply&) { m_answers.answer(Op::withdraw); });
}

// --- the loop ------------------------------------------------------------------------------

void ZookeeperStore::watch(util::EventLoop& loop)
{
  m_answers.watch(loop);
  if (m_client && m_client->owned()) {
    m_client->watch(loop);
  }
  for (const auto& [key, n] : m_named) {
    if (n.wake_by) {
      loop.wake_at(*n.wake_by);
    }
  }
  for (const auto& [key, g] : m_gates) {
    if (g.wake_by) {
      loop.wake_at(*g.wake_by);
    }
  }
}

std::optional<Outcome> ZookeeperStore::next_outcome()
{
  if (m_client && m_client->owned()) {
    m_client->drain();
  }
  util::TimePoint now = util::monotonic_now();
  for (auto& [key, n] : m_named) {
    if (n.wake_by && *n.wake_by <= now) {
      n.wake_by.reset();
      m_answers.answer(Op::wait_for_wake); // the block ended: the waiter asks again
    }
  }
  for (auto& [key, g] : m_gates) {
    if (g.wake_by && *g.wake_by <= now) {
      g.wake_by.reset();
      m_answers.answer(Op::wait_for_wake);
    }
  }
  return m_answers.next();
}

void ZookeeperStore::abandon() noexcept
{
  m_on_ready.clear();
  m_answers.clear();
  m_records.clear();
  m_recording = false;
  bool holds = false;
  for (auto& [key, n] : m_named) {
    holds = holds || n.held;
  }
  if (!holds) {
    // Nothing to keep: close the session, so that the server deletes the nodes it queued at
    // once (a waiter that gives up or is interrupted leaves no one waiting for it), and the
    // next operation starts afresh.
    if (m_client && !m_client->owned()) {
      (void)m_client.release(); // the parent's: its destructor must not run here
    }
    m_client.reset();
    m_named.clear();
    m_gates.clear(); // a barrier party's node goes with the session
    return;
  }
  if (m_client && m_client->owned()) {
    m_client->forget();
  }
  for (auto& [key, n] : m_named) {
    if (n.creating) {
      n.maybe_created = true; // its answer is dropped: look for it by its uuid next time
      n.creating = false;
    }
    n.wake_by.reset();
  }
  for (auto& [key, g] : m_gates) {
    g.wake_by.reset();
  }
}

Error ZookeeperStore::timed_out() noexcept
{
  bool connecting = !m_client || !m_client->owned() || !m_client->connected();
  std::string what = connecting && !m_was_connected ? "did not accept a connection in time"
                     : connecting ? "lost the connection and did not come back in time"
                                  : "did not answer in time";
  abandon();
  return Error(ExitCode::unavailable, "ZooKeeper at {} {}", m_url.shown, what);
}

const lock::StoreTraits& ZookeeperStore::traits() const noexcept
{
  static const lock::StoreTraits traits{
    .name = "ZooKeeper (zk://)",
    .features = lock::features_of(lock::StoreKind::zookeeper),
    .left_behind = "ZooKeeper deletes its node when dlock's session ends: at once when dlock "
                   "closes it, else once the session times out ({ttl})",
    .loss_cause = "its ZooKeeper session expired or its node was deleted (release --force)",
  };
  return traits;
}

// --- status and list ---------------------------------------------------------------------

void ZookeeperStore::inspect(const std::string& dir, std::function<void(Inspection&)> then)
{
  m_client->get_children(dir, [this, dir, then](Reply& reply) {
    auto found = std::make_shared<Inspection>();
    if (reply.rc == ZNONODE) {
      then(*found);
      return;
    }
    if (reply.rc != ZOK) {
      found->error = error_of(reply.rc, "list the contenders under " + dir);
      then(*found);
      return;
    }
    found->queue = sorted_contenders(reply.children);
    found->holding = holding(found->queue);
    for (std::size_t i : found->holding) {
      found->paths.push_back(found->queue[i].name);
      found->records.push_back(record_of(found->queue[i]));
    }
    bool leases =
      std::find(reply.children.begin(), reply.children.end(), leases_node) != reply.children.end();
    if (!found->holding.empty() || !leases) {
      read_holders(dir, found, then);
      return;
    }
    std::string under = side_path(dir, leases_node);
    m_client->get_children(under, [this, dir, found, then](Reply& listed) {
      if (listed.rc != ZOK && listed.rc != ZNONODE) {
        found->error = error_of(listed.rc, "list the leases under " + dir);
        then(*found);
        return;
      }
      for (const std::string& lease : sorted_leases(listed.children)) {
        found->leases = true;
        found->paths.push_back(std::string(leases_node) + "/" + lease);
        found->records.push_back(found->paths.back());
      }
      read_holders(dir, found, then);
    });
  });
}

void ZookeeperStore::read_holders(const std::string& dir, std::shared_ptr<Inspection> found,
                                  std::function<void(Inspection&)> then)
{
  std::size_t i = found->holders.size();
  if (i == found->paths.size() || i >= 1000) {
    found->paths.resize(i); // at most 1000 holders read (another tenant's thousands of nodes)
    found->records.resize(i);
    then(*found);
    return;
  }
  m_client->get(dir + "/" + found->records[i], lock::max_holder_record_bytes + 1,
                [this, dir, then, found](Reply& reply) {
                  std::string fingerprint;
                  lock::HolderInfo holder;
                  if (reply.rc == ZOK) {
                    holder = parse_holder_record(reply.value, &fingerprint);
                    found->limit = std::max(found->limit, lease_limit(reply.value));
                    if (reply.stat) {
                      holder.fence = reply.stat->czxid;
                      holder.acquired_ms = reply.stat->ctime;
                    }
                  } else if (reply.rc != ZNONODE) {
                    found->error = error_of(reply.rc, "read a holder under " + dir);
                    then(*found);
                    return;
                  }
                  found->holders.push_back(holder);
                  found->fingerprints.push_back(fingerprint);
                  read_holders(dir, found, then);
                });
}

void ZookeeperStore::block_until(const bool& done, util::TimePoint deadline)
{
  if (!util::run_until(
        deadline, [&done] { return done; },
        [this](util::EventLoop& loop) { m_client->watch(loop); })) {
    throw timed_out();
  }
}

lock::LockStatus ZookeeperStore::status(const lock::LockName& name, util::TimePoint deadline)
{
  client(inspect_session);
  bool done = false;
  Inspection found;
  inspect(dir_of(name), [&](Inspection& got) {
    found = got;
    done = true;
  });
  block_until(done, deadline);
  if (found.error) {
    throw *found.error;
  }
  lock::LockStatus status;
  status.name = name.str();
  status.ttl_ms = -1;
  status.server_time_ms = util::unix_ms(); // ZooKeeper has no clock to ask: this host's
  status.waiters = static_cast<std::int64_t>(found.queue.size() - found.holding.size());
  if (found.leases) {
    // A semaphore: every lease, but for a waiter's beyond N (made under the mutex, the last).
    std::size_t count = found.holders.size();
    if (found.limit >= 2 && count > static_cast<std::size_t>(found.limit)) {
      count = static_cast<std::size_t>(found.limit);
      status.waiters = static_cast<std::int64_t>(found.holders.size() - count);
    }
    status.held = count > 0;
    status.kind = lock::LockKind::semaphore(
      found.limit >= 2 ? found.limit : std::max(2, static_cast<int>(count)));
    for (std::size_t i = 0; i < count; ++i) {
      status.slots.push_back(lock::SlotHolder{found.holders[i], -1});
    }
    if (count > 0) {
      status.holder = found.holders.front();
      status.last_fence = status.holder.fence;
    }
    return status;
  }
  if (found.holding.empty()) {
    policy_status(name, found.queue, status, deadline);
  }
  if (found.holding.empty()) {
    return status;
  }
  status.held = true;
  status.holder = found.holders.front();
  status.last_fence = status.holder.fence;
  if (found.queue[found.holding.front()].role == Role::read) {
    status.kind = lock::LockKind::shared();
    for (const lock::HolderInfo& holder : found.holders) {
      status.slots.push_back(lock::SlotHolder{holder, -1});
    }
  }
  return status;
}

void ZookeeperStore::policy_status(const lock::LockName& name, const std::vector<Contender>& queue,
                                   lock::LockStatus& status, util::TimePoint deadline)
{
  std::string dir = dir_of(name);
  std::string path = side_path(dir, policy_node);
  bool done = false;
  Reply got;
  m_client->get(path, side_cap, [&](Reply& reply) {
    got = std::move(reply);
    done = true;
  });
  block_until(done, deadline);
  std::optional<SideRecord> record;
  if (got.rc == ZOK && got.stat) {
    record = parse_side_record(got.value);
  }
  if (!record) {
    return; // none, or not dlock's: ignored
  }
  for (const Contender& contender : queue) {
    if (contender.name == record->node) {
      return; // its holder is still queued: it holds the lock or is about to
    }
  }
  Stat stat = *got.stat;
  std::int64_t now = 0;
  done = false;
  server_now(dir, [&](std::int64_t at) {
    now = at;
    done = true;
  });
  block_until(done, deadline);
  status.server_time_ms = now;
  Closure closure = closure_of(*record, stat.ctime, now);
  // Written as an acquirer would: the first to find the holder gone starts its lock-delay; a
  // record that is over goes (neither is needed for the answer: a failure is ignored).
  done = false;
  if (closure.until() <= now) {
    m_client->remove(
      path, [&](Reply&) { done = true; }, stat.version);
  } else if (closure.stamp) {
    SideRecord stamped = *record;
    stamped.ended_at = now;
    m_client->set(path, side_record(stamped), stat.version, [&](Reply&) { done = true; });
  } else {
    done = true;
  }
  block_until(done, deadline);
  lock::HolderInfo holder = record->holder;
  holder.acquired_ms = stat.ctime;
  if (closure.hold_until > now) {
    status.held = true;
    status.command_ended = true;
    status.ttl_ms = closure.hold_until - now;
    status.holder = holder;
    status.last_fence = holder.fence;
  }
  if (closure.delay_end > now) {
    status.delay_ms = closure.delay_end - now;
    status.holder = holder;
  }
}

std::vector<lock::LockStatus> ZookeeperStore::list(std::string_view pattern, Millis timeout)
{
  util::TimePoint deadline = util::deadline_after(timeout);
  client(inspect_session);
  bool done = false;
  Reply children;
  std::string top = m_url.chroot.empty() ? "/" : m_url.chroot;
  m_client->get_children(top, [&](Reply& reply) {
    children = std::move(reply);
    done = true;
  });
  block_until(done, deadline);
  if (children.rc == ZNONODE) {
    return {};
  }
  if (children.rc != ZOK) {
    throw error_of(children.rc, "list " + top);
  }
  std::vector<std::string> names;
  std::string glob(pattern);
  for (const std::string& child : children.children) {
    std::optional<std::string> decoded = decode_name(child);
    if (!decoded || !decoded->starts_with(m_prefix) || decoded->size() == m_prefix.size()) {
      continue;
    }
    std::string name = decoded->substr(m_prefix.size());
    if (::fnmatch(glob.c_str(), name.c_str(), 0) == 0) {
      names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  std::vector<lock::LockStatus> found;
  for (const std::string& name : names) {
    try {
      lock::LockStatus status = this->status(lock::LockName::parse(name), deadline);
      if (status.held) {
        found.push_back(std::move(status));
      }
    } catch (const Error& error) {
      if (error.code() == ExitCode::usage) {
        continue; // a node whose name is no lock name (not dlock's)
      }
      throw;
    }
  }
  return found;
}

} // namespace dlock::zookeeper

namespace dlock::zookeeper {

// --- wait, barrier, latch ------------------------------------------------------------------

ZookeeperStore::Gate& ZookeeperStore::gate(const lock::LockName& name)
{
  auto found = m_gates.find(name.str());
  if (found != m_gates.end()) {
    return found->second;
  }
  Gate g;
  g.dir = dir_of(name);
  return m_gates.emplace(name.str(), std::move(g)).first->second;
}

void ZookeeperStore::start_gate(const lock::LockName& name, const lock::GateRequest& request)
{
  Gate& g = gate(name);
  g.woken = false;
  g.wake_by.reset();
  g.watched.clear();
  try {
    client(inspect_session);
  } catch (const Error& error) {
    m_answers.answer(Op::gate, error);
    return;
  }
  std::string key = name.str();
  when_ready([this, key, request](std::optional<Error> error) {
    if (error) {
      m_answers.answer(Op::gate, error);
    } else if (!m_gates.contains(key)) {
      return;
    } else if (request.ticket.mode == lock::WaitMode::watch) {
      watch_gate(key, request);
    } else if (request.ticket.mode == lock::WaitMode::barrier) {
      barrier_gate(key, request);
    } else if (request.ticket.mode == lock::WaitMode::latch) {
      latch_gate(key, request.ticket.max_block);
    } else if (request.ticket.mode == lock::WaitMode::leader) {
      leader_gate(key, request);
    } else {
      m_answers.answer(Op::gate, Error(ExitCode::internal, "a lock waiter at a gate"));
    }
  });
}

void ZookeeperStore::close_gate(const std::string& key, std::vector<std::string> paths,
                                lock::GateResult result)
{
  Gate& g = m_gates.at(key);
  g.watched = paths;
  if (paths.empty()) {
    m_answers.answer(Outcome{.op = Op::gate, .gate = result});
    return;
  }
  // Every watch set before the answer: a change after it wakes the waiter.
  for (std::size_t i = 0; i < paths.size(); ++i) {
    bool last = i + 1 == paths.size();
    m_client->exists(paths[i], true, [this, last, result](Reply&) {
      if (last) {
        m_answers.answer(Outcome{.op = Op::gate, .gate = result});
      }
    });
  }
}

void ZookeeperStore::watch_gate(const std::string& key, const lock::GateRequest& request)
{
  Gate& g = m_gates.at(key);
  std::string dir = g.dir;
  std::int64_t since = request.ticket.since;
  Millis block = request.ticket.max_block;
  inspect(dir, [this, key, dir, since, block](Inspection& found) {
    if (found.error) {
      m_answers.answer(Op::gate, found.error);
      return;
    }
    if (!m_gates.contains(key)) {
      return;
    }
    // Free, or freed since the watcher first found it held: every holder seen then (a node's
    // czxid at most since) is gone, whoever holds it now.
    std::int64_t newest = 0;
    bool older = false;
    for (const lock::HolderInfo& holder : found.holders) {
      newest = std::max(newest, holder.fence);
      older = older || holder.fence <= since;
    }
    lock::GateResult result;
    if (found.holders.empty() || (since > 0 && !older)) {
      result.open = true;
      m_answers.answer(Outcome{.op = Op::gate, .gate = result});
      return;
    }
    result.block = block;
    result.since = since > 0 ? since : newest;
    result.lock.lease = lock::AcquireResult::Lease::no_expiry;
    result.lock.holder = found.holders.front();
    result.lock.holders = static_cast<std::int64_t>(found.holders.size());
    // Woken when a holder's node goes (at most 64 watched: the first to go wakes it to look).
    std::vector<std::string> paths;
    for (std::size_t i = 0; i < found.paths.size() && i < 64; ++i) {
      paths.push_back(dir + "/" + found.paths[i]);
    }
    close_gate(key, std::move(paths), result);
  });
}

void ZookeeperStore::barrier_gate(const std::string& key, const lock::GateRequest& request)
{
  Gate& g = m_gates.at(key);
  if (!g.member.empty()) {
    barrier_judge(key, request); // arrived before: did its generation trip?
    return;
  }
  if (request.ticket.generation > 0) {
    // Arrived with a session that ended (its node went with it): arrive again.
    util::log_verbose("barrier '{}': the session of this party's arrival ended; arriving again",
                      key);
  }
  std::string dir = g.dir;
  m_client->get_children(dir, [this, key, request, dir](Reply& listed) {
    if (!m_gates.contains(key)) {
      return;
    }
    if (listed.rc == ZNONODE) {
      make_path(dir, [this, key, request](std::optional<Error> error) {
        if (error) {
          m_answers.answer(Op::gate, error);
        } else if (m_gates.contains(key)) {
          barrier_gate(key, request);
        }
      });
      return;
    }
    if (listed.rc != ZOK) {
      m_answers.answer(Op::gate, error_of(listed.rc, "list the parties of barrier '" + key + "'"));
      return;
    }
    // Another barrier of other parties in progress: nothing registered (the first dlock
    // party's record says how many).
    std::vector<std::string> parties = sorted_parties(listed.children);
    auto arrive = [this, key, request, dir] {
      Gate& e = m_gates.at(key);
      std::string data = fmt::format("dlock=1\nparties={}\n", request.parties);
      std::string uuid = random_uuid();
      m_client->create(dir + "/" + party_prefix(uuid), data, zoo().ZOO_EPHEMERAL_SEQUENTIAL,
                       [this, key, request](Reply& made) {
                         auto found = m_gates.find(key);
                         if (found == m_gates.end()) {
                           return;
                         }
                         if (made.rc == ZNONODE) {
                           barrier_gate(key, request); // the container went meanwhile
                           return;
                         }
                         if (made.rc != ZOK) {
                           m_answers.answer(Op::gate,
                                            error_of(made.rc, "arrive at barrier '" + key + "'"));
                           return;
                         }
                         found->second.member = made.value;
                         found->second.joined = made.stat ? made.stat->czxid : 1;
                         barrier_judge(key, request);
                       });
      (void)e;
    };
    std::string first;
    for (const std::string& p : parties) {
      if (p.starts_with("_c_") && first.empty()) {
        first = p;
      }
    }
    if (first.empty()) {
      arrive();
      return;
    }
    m_client->get(dir + "/" + first, side_cap, [this, key, request, arrive](Reply& got) {
      if (!m_gates.contains(key)) {
        return;
      }
      std::optional<std::int64_t> other =
        got.rc == ZOK ? record_number(got.value, "parties") : std::nullopt;
      if (other && *other != request.parties && *other >= 1 && *other <= 1'000'000) {
        lock::GateResult result;
        result.parties = *other;
        m_answers.answer(Outcome{.op = Op::gate, .gate = result});
        return;
      }
      arrive();
    });
  });
}

void ZookeeperStore::barrier_judge(const std::string& key, const lock::GateRequest& request,
                                   int tries)
{
  Gate& g = m_gates.at(key);
  std::string dir = g.dir;
  m_client->get_children(dir, [this, key, request, dir, tries](Reply& listed) {
    auto found = m_gates.find(key);
    if (found == m_gates.end()) {
      return;
    }
    Gate& e = found->second;
    lock::GateResult result;
    result.parties = request.parties;
    result.generation = e.joined;
    std::vector<std::string> parties = sorted_parties(listed.children);
    std::string ours = basename_of(e.member);
    auto at = std::find(parties.begin(), parties.end(), ours);
    if (listed.rc == ZNONODE || (listed.rc == ZOK && at == parties.end())) {
      // Our node was deleted by the party that tripped our generation.
      e.member.clear();
      result.open = true;
      result.arrived = request.parties;
      m_answers.answer(Outcome{.op = Op::gate, .gate = result});
      return;
    }
    if (listed.rc != ZOK) {
      m_answers.answer(Op::gate, error_of(listed.rc, "list the parties of barrier '" + key + "'"));
      return;
    }
    bool ready = std::find(listed.children.begin(), listed.children.end(), ready_node)
                 != listed.children.end();
    auto index = static_cast<std::int64_t>(at - parties.begin());
    result.arrived =
      std::min<std::int64_t>(static_cast<std::int64_t>(parties.size()), request.parties);
    auto wait = [this, key, dir, request, result]() mutable {
      auto again = m_gates.find(key);
      if (again == m_gates.end()) {
        return;
      }
      result.block = request.ticket.max_block;
      close_gate(key, {again->second.member, dir + "/" + std::string(ready_node)}, result);
    };
    auto check_ready = [this, key, dir, result, wait]() mutable {
      // A Curator party's "ready" (persistent) made after our arrival lets every party in.
      m_client->exists(dir + "/" + std::string(ready_node), false,
                       [this, key, result, wait](Reply& seen) mutable {
                         auto again = m_gates.find(key);
                         if (again == m_gates.end()) {
                           return;
                         }
                         Gate& h = again->second;
                         if (seen.rc == ZOK && seen.stat && seen.stat->ephemeralOwner == 0
                             && seen.stat->czxid > h.joined) {
                           std::string member = h.member;
                           h.member.clear();
                           result.open = true;
                           m_client->remove(member, [this, result](Reply&) {
                             m_answers.answer(Outcome{.op = Op::gate, .gate = result});
                           });
                           return;
                         }
                         wait();
                       });
    };
    if (static_cast<std::int64_t>(parties.size()) < request.parties || index >= request.parties) {
      if (ready) {
        check_ready();
      } else {
        wait();
      }
      return;
    }
    // The last of the first N to arrive: this generation trips. Its dlock parties go (each
    // one's watch on its node wakes it) and "ready" is made (Curator's parties' watch), in one
    // transaction; arrivals after them form the next generation.
    std::vector<Client::Op> ops;
    for (std::int64_t i = 0; i < request.parties; ++i) {
      if (parties[static_cast<std::size_t>(i)].starts_with("_c_")) {
        ops.push_back({.create = false,
                       .path = dir + "/" + parties[static_cast<std::size_t>(i)],
                       .data = {},
                       .flags = 0,
                       .version = -1});
      }
    }
    if (!ready) {
      ops.push_back({.create = true,
                     .path = dir + "/" + std::string(ready_node),
                     .data = {},
                     .flags = zoo().ZOO_EPHEMERAL,
                     .version = -1});
    }
    m_client->multi(std::move(ops), [this, key, request, result, tries](Reply& done) mutable {
      auto again = m_gates.find(key);
      if (again == m_gates.end()) {
        return;
      }
      if (done.rc == ZOK) {
        again->second.member.clear();
        result.open = true;
        result.arrived = request.parties;
        m_answers.answer(Outcome{.op = Op::gate, .gate = result});
        return;
      }
      if (tries >= max_steps) {
        m_answers.answer(Op::gate, error_of(done.rc, "trip barrier '" + key + "'"));
        return;
      }
      barrier_judge(key, request, tries + 1); // another tripped it, or "ready" came: look again
    });
  });
}

void ZookeeperStore::latch_gate(const std::string& key, Millis block)
{
  std::string path = side_path(m_gates.at(key).dir, latch_node);
  m_client->get(path, side_cap, [this, key, path, block](Reply& got) {
    if (!m_gates.contains(key)) {
      return;
    }
    if (got.rc != ZOK && got.rc != ZNONODE) {
      m_answers.answer(Op::gate, error_of(got.rc, "read latch '" + key + "'"));
      return;
    }
    std::optional<LatchRecord> record =
      got.rc == ZOK ? parse_latch_record(got.value) : std::nullopt;
    lock::GateResult result;
    result.count = record ? std::max<std::int64_t>(record->count, 0) : -1;
    if (record && record->count <= 0) {
      result.open = true;
      m_answers.answer(Outcome{.op = Op::gate, .gate = result});
      return;
    }
    // Woken when it is set, counted down or deleted.
    result.block = block;
    close_gate(key, {path}, result);
  });
}

void ZookeeperStore::leader_gate(const std::string& key, const lock::GateRequest& request,
                                 int tries)
{
  Gate& g = m_gates.at(key);
  std::string dir = g.dir;
  // What the request below reads is up to date until the watch it sets fires.
  g.watched = {dir};
  g.woken = false;
  auto again = [this, key, request, tries] {
    if (tries < max_steps) {
      leader_gate(key, request, tries + 1);
    } else {
      answer_leader(request, request.ticket.since, std::nullopt, 0); // the watch wakes it
    }
  };
  m_client->get_children(
    dir,
    [this, key, dir, request, again](Reply& listed) {
      if (!m_gates.contains(key)) {
        return;
      }
      if (listed.rc == ZNONODE) {
        // No lock node (its container was deleted once empty): woken when it is made.
        m_client->exists(dir, true, [this, key, request, again](Reply& seen) {
          if (!m_gates.contains(key)) {
            return;
          }
          if (seen.rc == ZOK) {
            again(); // made meanwhile
          } else if (seen.rc != ZNONODE) {
            m_answers.answer(Op::gate, error_of(seen.rc, "watch lock '" + key + "'"));
          } else {
            answer_leader(request, 0, std::nullopt, 0);
          }
        });
        return;
      }
      if (listed.rc != ZOK) {
        m_answers.answer(Op::gate,
                         error_of(listed.rc, "list the contenders of lock '" + key + "'"));
        return;
      }
      std::vector<Contender> queue = sorted_contenders(listed.children);
      std::vector<std::size_t> holders = holding(queue);
      if (holders.empty()) {
        answer_leader(request, 0, std::nullopt, 0);
        return;
      }
      auto count = static_cast<std::int64_t>(holders.size());
      m_client->get(
        dir + "/" + record_of(queue[holders.front()]), lock::max_holder_record_bytes + 1,
        [this, key, request, again, count](Reply& got) {
          if (!m_gates.contains(key)) {
            return;
          }
          if (got.rc == ZNONODE || (got.rc == ZOK && !got.stat)) {
            again(); // gone meanwhile
            return;
          }
          if (got.rc != ZOK) {
            m_answers.answer(Op::gate, error_of(got.rc, "read the leader of lock '" + key + "'"));
            return;
          }
          lock::HolderInfo holder = parse_holder_record(got.value);
          holder.fence = got.stat->czxid; // a pair's nodes share their transaction's
          holder.acquired_ms = got.stat->ctime;
          answer_leader(request, holder.fence, holder, count);
        });
    },
    true);
}

void ZookeeperStore::answer_leader(const lock::GateRequest& request, std::int64_t term,
                                   std::optional<lock::HolderInfo> holder, std::int64_t holders)
{
  lock::GateResult result;
  result.since = term;
  result.open = term != request.ticket.since;
  if (!result.open) {
    // No lease ends unannounced here (a session's end deletes its nodes, which the watch sees):
    // the caller's longest block, after which it looks again (a safety net).
    result.block = request.ticket.max_block;
  }
  if (holder) {
    result.lock.lease = lock::AcquireResult::Lease::no_expiry;
    result.lock.holder = std::move(*holder);
    result.lock.holders = holders;
  }
  m_answers.answer(Outcome{.op = Op::gate, .gate = result});
}

void ZookeeperStore::start_set_latch(const lock::LockName& name, std::int64_t count, Millis expire)
{
  try {
    client(inspect_session);
  } catch (const Error& error) {
    m_answers.answer(Op::set_latch, error);
    return;
  }
  std::string key = name.str();
  std::string dir = dir_of(name);
  std::string path = side_path(dir, latch_node);
  when_ready([this, key, dir, path, count, expire](std::optional<Error> error) {
    if (error) {
      m_answers.answer(Op::set_latch, error);
      return;
    }
    make_path(dir, [this, key, dir, path, count, expire](std::optional<Error> made) {
      if (made) {
        m_answers.answer(Op::set_latch, made);
        return;
      }
      server_now(dir, [this, key, path, count, expire](std::int64_t now) {
        std::string data = latch_record({count, now + expire.count()});
        // Set again (a latch set before starts over), else made.
        m_client->set(path, data, -1, [this, key, path, data](Reply& set) {
          if (set.rc == ZOK) {
            m_answers.answer(Op::set_latch);
            return;
          }
          if (set.rc != ZNONODE) {
            m_answers.answer(Op::set_latch, error_of(set.rc, "set latch '" + key + "'"));
            return;
          }
          m_client->create(path, data, zoo().ZOO_PERSISTENT, [this, key](Reply& created) {
            if (created.rc == ZOK || created.rc == ZNODEEXISTS) {
              m_answers.answer(Op::set_latch); // made by another setter meanwhile: as good
              return;
            }
            m_answers.answer(Op::set_latch, error_of(created.rc, "set latch '" + key + "'"));
          });
        });
      });
    });
  });
}

void ZookeeperStore::start_count_down(const lock::LockName& name)
{
  try {
    client(inspect_session);
  } catch (const Error& error) {
    m_answers.answer(Op::count_down, error);
    return;
  }
  gate(name);
  std::string key = name.str();
  when_ready([this, key](std::optional<Error> error) {
    if (error) {
      m_answers.answer(Op::count_down, error);
    } else if (m_gates.contains(key)) {
      count_down(key, 0);
    }
  });
}

void ZookeeperStore::count_down(const std::string& key, int tries)
{
  std::string dir = m_gates.at(key).dir;
  std::string path = side_path(dir, latch_node);
  auto answer = [this](std::int64_t count) {
    Outcome outcome{.op = Op::count_down};
    outcome.gate.count = count;
    m_answers.answer(std::move(outcome));
  };
  m_client->get(path, side_cap, [this, key, dir, path, tries, answer](Reply& got) {
    if (got.rc == ZNONODE) {
      answer(-1);
      return;
    }
    if (got.rc != ZOK || !got.stat) {
      m_answers.answer(Op::count_down, error_of(got.rc, "read latch '" + key + "'"));
      return;
    }
    std::optional<LatchRecord> record = parse_latch_record(got.value);
    if (!record) {
      answer(-1); // not dlock's
      return;
    }
    int version = got.stat->version;
    server_now(dir, [this, key, path, tries, answer, record = *record, version](std::int64_t now) {
      if (record.expires_at <= now) {
        m_client->remove(
          path, [answer](Reply&) { answer(-1); }, version); // expired: cleaned
        return;
      }
      if (record.count <= 0) {
        answer(0); // stays at zero
        return;
      }
      LatchRecord next = record;
      --next.count;
      m_client->set(
        path, latch_record(next), version, [this, key, tries, answer, next](Reply& set) {
          if (set.rc == ZOK) {
            answer(next.count); // every waiter's watch on it wakes it to look
            return;
          }
          if ((set.rc == ZBADVERSION || set.rc == ZNONODE) && tries < 100
              && m_gates.contains(key)) {
            count_down(key, tries + 1); // another counted meanwhile: again
            return;
          }
          m_answers.answer(Op::count_down, error_of(set.rc, "count latch '" + key + "' down"));
        });
    });
  });
}

// --- history -------------------------------------------------------------------------------

void ZookeeperStore::start_record(const lock::LockName& name, const std::string& text)
{
  m_records.push_back(Record{.name = history_of(name), .text = text});
  next_record();
}

void ZookeeperStore::next_record()
{
  if (m_recording || m_records.empty()) {
    return;
  }
  m_recording = true;
  if (!m_client || !m_client->owned() || m_dead) {
    try {
      client(inspect_session); // none (release --force), or none to use
    } catch (const Error& error) {
      recorded(error);
      return;
    }
  }
  when_ready([this](std::optional<Error> error) {
    if (error) {
      recorded(error);
      return;
    }
    append(m_records.front().name, m_records.front().text, false);
  });
}

void ZookeeperStore::recorded(std::optional<Error> error)
{
  if (!m_recording) {
    return; // abandoned meanwhile
  }
  m_recording = false;
  m_records.pop_front();
  m_answers.answer(Op::record, std::move(error));
  next_record();
}

void ZookeeperStore::append(const std::string& log, const std::string& text, bool made)
{
  auto created = std::make_shared<int>(ZOK);
  m_client->create(log + "/" + history_event_prefix(util::unix_ms()), text,
                   zoo().ZOO_PERSISTENT_SEQUENTIAL,
                   [created](Reply& reply) { *created = reply.rc; });
  // Sent behind the create, answered after it: the listing has the new event.
  m_client->get_children(log, [this, created, log, text, made](Reply& listing) {
    if (*created == ZNONODE && !made) { // the log's first event (or its node was emptied)
      make_path(log, [this, log, text](std::optional<Error> error) {
        if (error) {
          recorded(error);
          return;
        }
        append(log, text, true);
      });
      return;
    }
    if (*created != ZOK) {
      recorded(error_of(*created, "add to " + log));
      return;
    }
    trim(log, listing);
  });
}

void ZookeeperStore::trim(const std::string& log, const Reply& listing)
{
  // At most this many deletions a write: a log another tenant filled is not emptied at once.
  constexpr std::size_t most = 16;
  std::vector<HistoryNode> nodes =
    listing.rc == ZOK ? sorted_history(listing.children) : std::vector<HistoryNode>{};
  std::int64_t expired_before = util::unix_ms() - lock::history_keep.count();
  std::vector<std::string> doomed;
  for (std::size_t i = 0; i < nodes.size() && doomed.size() < most; ++i) {
    bool surplus = nodes.size() - i > lock::max_history_events;
    if (surplus || nodes[i].at_ms < expired_before) {
      doomed.push_back(log + "/" + nodes[i].name);
    }
  }
  if (doomed.empty()) {
    recorded(std::nullopt);
    return;
  }
  // Answered in order: the last deletion's answer comes after the others'.
  for (std::size_t i = 0; i < doomed.size(); ++i) {
    bool last = i + 1 == doomed.size();
    m_client->remove(doomed[i], [this, last](Reply&) {
      if (last) {
        recorded(std::nullopt); // one already gone is as good
      }
    });
  }
}

std::vector<std::string> ZookeeperStore::events(const lock::LockName& name, std::size_t limit,
                                                util::TimePoint deadline)
{
  client(inspect_session);
  std::string log = history_of(name);
  bool done = false;
  Reply listing;
  m_client->get_children(log, [&](Reply& reply) {
    listing = std::move(reply);
    done = true;
  });
  block_until(done, deadline);
  if (listing.rc == ZNONODE) {
    return {};
  }
  if (listing.rc != ZOK) {
    throw error_of(listing.rc, "list " + log);
  }
  std::vector<HistoryNode> nodes = sorted_history(listing.children);
  std::reverse(nodes.begin(), nodes.end()); // newest first
  nodes.resize(std::min(nodes.size(), std::min(limit, lock::max_history_events)));
  // Every event's data at once (answered in order); a larger one than max_event_bytes, or one
  // gone meanwhile, is left out.
  std::vector<std::optional<std::string>> texts(nodes.size());
  std::size_t answered = 0;
  bool all = nodes.empty();
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    m_client->get(
      log + "/" + nodes[i].name, lock::max_event_bytes, [&texts, &answered, &all, i](Reply& reply) {
        all = ++answered == texts.size();
        if (reply.rc == ZOK && reply.stat && reply.stat->dataLength >= 0
            && static_cast<std::size_t>(reply.stat->dataLength) <= lock::max_event_bytes) {
          texts[i] = std::move(reply.value);
        }
      });
  }
  block_until(all, deadline);
  std::vector<std::string> out;
  for (std::optional<std::string>& text : texts) {
    if (text) {
      out.push_back(std::move(*text));
    }
  }
  return out;
}

} // namespace dlock::zookeeper

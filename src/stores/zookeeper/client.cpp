#include "stores/zookeeper/client.hpp"

#include "util/error.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <variant>

namespace dlock::zookeeper {

// Filled by the C client's threads, emptied by dlock's.
struct Client::Inbox {
  struct Answer {
    std::uint64_t id = 0;
    Reply reply;
  };
  std::mutex mutex;
  std::deque<std::variant<Answer, WatchEvent>> items;
  int event_fd = -1;

  void push(std::variant<Answer, WatchEvent> item)
  {
    {
      std::lock_guard<std::mutex> lock(mutex);
      items.push_back(std::move(item));
    }
    std::uint64_t one = 1;
    ssize_t written = ::write(event_fd, &one, sizeof one);
    (void)written; // a full counter already says that there is something to read
  }
};

namespace {

// What a completion needs to find its way back: the inbox and the request's number.
struct Ticket {
  std::shared_ptr<Client::Inbox> inbox;
  std::uint64_t id;
  std::size_t max_bytes = 0; // get: the most of the data kept
};

void deliver(const void* data, Reply reply)
{
  std::unique_ptr<const Ticket> ticket(static_cast<const Ticket*>(data));
  ticket->inbox->push(Client::Inbox::Answer{ticket->id, std::move(reply)});
}

void on_string_stat(int rc, const char* value, const struct Stat* stat, const void* data)
{
  Reply reply{rc, {}, {}, value != nullptr ? value : ""};
  if (stat != nullptr) {
    reply.stat = *stat;
  }
  deliver(data, std::move(reply));
}

void on_void(int rc, const void* data) { deliver(data, Reply{rc, {}, {}, {}}); }

void on_stat(int rc, const struct Stat* stat, const void* data)
{
  Reply reply{rc, {}, {}, {}};
  if (stat != nullptr) {
    reply.stat = *stat;
  }
  deliver(data, std::move(reply));
}

void on_data(int rc, const char* value, int length, const struct Stat* stat, const void* data)
{
  Reply reply{rc, {}, {}, {}};
  if (value != nullptr && length > 0) {
    std::size_t max_bytes = static_cast<const Ticket*>(data)->max_bytes;
    reply.value.assign(value, std::min(static_cast<std::size_t>(length), max_bytes));
  }
  if (stat != nullptr) {
    reply.stat = *stat;
  }
  deliver(data, std::move(reply));
}

void on_strings(int rc, const struct String_vector* strings, const void* data)
{
  Reply reply{rc, {}, {}, {}};
  if (strings != nullptr) {
    for (int i = 0; i < strings->count; ++i) {
      reply.children.emplace_back(strings->data[i]);
    }
  }
  deliver(data, std::move(reply));
}

// The session's watcher: every watch dlock sets comes here too (watch flag 1).
void on_watch(zhandle_t*, int type, int state, const char* path, void* context)
{
  static_cast<Client::Inbox*>(context)->push(WatchEvent{type, state, path != nullptr ? path : ""});
}

} // namespace

Client::Client(const std::string& hosts, util::Millis session_timeout, OnEvent on_event,
               bool private_nodes)
  : m_inbox(std::make_shared<Inbox>()), m_owner(::getpid()), m_on_event(std::move(on_event)),
    m_private_nodes(private_nodes)
{
  m_inbox->event_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (m_inbox->event_fd < 0) {
    throw Error(ExitCode::internal, "eventfd failed: {}", std::strerror(errno));
  }
  const LibZookeeper& lib = zoo();
  errno = 0;
  m_handle = lib.zookeeper_init(hosts.c_str(), on_watch, static_cast<int>(session_timeout.count()),
                                nullptr, m_inbox.get(), 0);
  if (m_handle == nullptr) {
    int saved = errno;
    ::close(m_inbox->event_fd);
    throw Error(ExitCode::unavailable, "ZooKeeper at {}: cannot start its client: {}", hosts,
                saved == EINVAL ? "a host name does not resolve" : std::strerror(saved));
  }
  // The hosts were resolved just now; by default the client resolves them again before each
  // wait of its IO thread (a netlink query and a read of /dev/urandom ahead of every request it
  // sends). Only a lost connection resolves them again.
  lib.zoo_set_servers_resolution_delay(m_handle, -1);
}

Client::~Client()
{
  if (!owned()) {
    return; // the C client's threads are not in this process: leave its memory alone
  }
  zoo().zookeeper_close(m_handle); // joins its threads; no completion runs after this
  ::close(m_inbox->event_fd);
}

bool Client::owned() const noexcept { return m_owner == ::getpid(); }

std::uint64_t Client::submit(Done done)
{
  std::uint64_t id = m_next_id++;
  m_pending.emplace(id, std::move(done));
  return id;
}

void Client::refused(std::uint64_t id, int rc)
{
  // The C client did not take the request (its completion will not run): answer it from the
  // queue all the same, so that callbacks never run inside the call that made the request.
  m_inbox->push(Inbox::Answer{id, Reply{rc, {}, {}, {}}});
}

void Client::create(const std::string& path, const std::string& data, int flags, Done done)
{
  std::uint64_t id = submit(std::move(done));
  auto* ticket = new Ticket{m_inbox, id};
  int rc = zoo().zoo_acreate2(m_handle, path.c_str(), data.data(), static_cast<int>(data.size()),
                              m_private_nodes ? zoo().creator_acl : zoo().open_acl, flags,
                              on_string_stat, ticket);
  if (rc != ZOK) {
    delete ticket;
    refused(id, rc);
  }
}

void Client::remove(const std::string& path, Done done, int version)
{
  std::uint64_t id = submit(std::move(done));
  auto* ticket = new Ticket{m_inbox, id};
  int rc = zoo().zoo_adelete(m_handle, path.c_str(), version, on_void, ticket);
  if (rc != ZOK) {
    delete ticket;
    refused(id, rc);
  }
}

void Client::set(const std::string& path, const std::string& data, int version, Done done)
{
  std::uint64_t id = submit(std::move(done));
  auto* ticket = new Ticket{m_inbox, id};
  int rc = zoo().zoo_aset(m_handle, path.c_str(), data.data(), static_cast<int>(data.size()),
                          version, on_stat, ticket);
  if (rc != ZOK) {
    delete ticket;
    refused(id, rc);
  }
}

void Client::exists(const std::string& path, bool watch, Done done)
{
  std::uint64_t id = submit(std::move(done));
  auto* ticket = new Ticket{m_inbox, id};
  int rc = zoo().zoo_aexists(m_handle, path.c_str(), watch ? 1 : 0, on_stat, ticket);
  if (rc != ZOK) {
    delete ticket;
    refused(id, rc);
  }
}

void Client::get(const std::string& path, std::size_t max_bytes, Done done)
{
  std::uint64_t id = submit(std::move(done));
  auto* ticket = new Ticket{m_inbox, id, max_bytes};
  int rc = zoo().zoo_aget(m_handle, path.c_str(), 0, on_data, ticket);
  if (rc != ZOK) {
    delete ticket;
    refused(id, rc);
  }
}

void Client::get_children(const std::string& path, Done done, bool watch)
{
  std::uint64_t id = submit(std::move(done));
  auto* ticket = new Ticket{m_inbox, id};
  int rc = zoo().zoo_aget_children(m_handle, path.c_str(), watch ? 1 : 0, on_strings, ticket);
  if (rc != ZOK) {
    delete ticket;
    refused(id, rc);
  }
}

namespace {

// A transaction in flight: the C client reads the ops and writes the results and the created
// paths until its completion runs, so they live here until then.
struct MultiTicket {
  std::shared_ptr<Client::Inbox> inbox;
  std::uint64_t id;
  std::vector<Client::Op> ops;
  std::vector<zoo_op_t> zops;
  std::vector<zoo_op_result_t> results;
  std::vector<std::vector<char>> paths;
};

void on_multi(int rc, const void* data)
{
  std::unique_ptr<const MultiTicket> ticket(static_cast<const MultiTicket*>(data));
  Reply reply{rc, {}, {}, {}};
  for (std::size_t i = 0; i < ticket->ops.size(); ++i) {
    bool made = rc == ZOK && ticket->ops[i].create;
    reply.children.emplace_back(made ? ticket->paths[i].data() : "");
  }
  ticket->inbox->push(Client::Inbox::Answer{ticket->id, std::move(reply)});
}

} // namespace

void Client::multi(std::vector<Op> ops, Done done)
{
  std::uint64_t id = submit(std::move(done));
  if (ops.size() > 1 && state() < 0) {
    // zoo_amulti (3.8), unlike each single request, does not refuse a session that is over
    // (expired, authentication failed: a negative state) before it builds the request: each op
    // after the first refused one frees a path it never set, and the process dies of a double
    // free. Refused here, as zoo_amulti would (it could still expire in between: a window of
    // microseconds, where a session ends in seconds).
    refused(id, ZINVALIDSTATE);
    return;
  }
  auto* ticket = new MultiTicket{m_inbox, id, std::move(ops), {}, {}, {}};
  std::size_t count = ticket->ops.size();
  ticket->zops.resize(count);
  ticket->results.resize(count);
  ticket->paths.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    const Op& op = ticket->ops[i];
    if (op.create) {
      ticket->paths[i].assign(op.path.size() + 16, '\0'); // the sequence's 10 digits fit
      zoo().zoo_create_op_init(&ticket->zops[i], op.path.c_str(), op.data.data(),
                               static_cast<int>(op.data.size()),
                               m_private_nodes ? zoo().creator_acl : zoo().open_acl, op.flags,
                               ticket->paths[i].data(), static_cast<int>(ticket->paths[i].size()));
    } else {
      zoo().zoo_delete_op_init(&ticket->zops[i], op.path.c_str(), op.version);
    }
  }
  int rc = zoo().zoo_amulti(m_handle, static_cast<int>(count), ticket->zops.data(),
                            ticket->results.data(), on_multi, ticket);
  if (rc != ZOK) {
    delete ticket;
    refused(id, rc);
  }
}

void Client::add_auth(const std::string& scheme, const std::string& credentials, Done done)
{
  std::uint64_t id = submit(std::move(done));
  auto* ticket = new Ticket{m_inbox, id};
  int rc = zoo().zoo_add_auth(m_handle, scheme.c_str(), credentials.data(),
                              static_cast<int>(credentials.size()), on_void, ticket);
  if (rc != ZOK) {
    delete ticket;
    refused(id, rc);
  }
}

void Client::watch(util::EventLoop& loop)
{
  loop.watch(m_inbox->event_fd, POLLIN, [this](short) { drain(); });
}

void Client::drain()
{
  std::uint64_t count = 0;
  ssize_t got = ::read(m_inbox->event_fd, &count, sizeof count);
  (void)got;
  while (true) {
    std::variant<Inbox::Answer, WatchEvent> item;
    {
      std::lock_guard<std::mutex> lock(m_inbox->mutex);
      if (m_inbox->items.empty()) {
        return;
      }
      item = std::move(m_inbox->items.front());
      m_inbox->items.pop_front();
    }
    if (auto* answer = std::get_if<Inbox::Answer>(&item)) {
      auto found = m_pending.find(answer->id);
      if (found == m_pending.end()) {
        continue; // forgotten
      }
      Done done = std::move(found->second);
      m_pending.erase(found);
      if (done) {
        done(answer->reply);
      }
    } else {
      m_on_event(std::get<WatchEvent>(item));
    }
  }
}

int Client::state() const { return zoo().zoo_state(m_handle); }

std::int64_t Client::session_id() const
{
  const clientid_t* id = zoo().zoo_client_id(m_handle);
  return id != nullptr ? id->client_id : 0;
}

util::Millis Client::session_timeout() const
{
  return util::Millis(zoo().zoo_recv_timeout(m_handle));
}

std::string describe(int rc)
{
  const char* words = zoo().zerror(rc);
  return words != nullptr ? std::string(words) : "error " + std::to_string(rc);
}

} // namespace dlock::zookeeper

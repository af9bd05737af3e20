#pragma once

#include "stores/zookeeper/libzookeeper.hpp"
#include "util/duration.hpp"
#include "util/event_loop.hpp"

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dlock::zookeeper {

// What one request came to (rc: ZOK or a ZooKeeper error code).
struct Reply {
  int rc = 0;
  std::optional<Stat> stat;
  std::vector<std::string> children; // get_children
  std::string value;                 // create: the path made; get: the data (at most max_bytes)
};

// A watch that fired or a change of the session's state (type ZOO_SESSION_EVENT).
struct WatchEvent {
  int type = 0;
  int state = 0;
  std::string path;
};

// One ZooKeeper session through libzookeeper_mt, brought to dlock's event loop.
//
// Why the multi-threaded client: it is the one Debian ships (libzookeeper-mt2), and its own
// thread answers the server's pings whatever dlock does, so the session does not depend on how
// often the caller drives it. Its completions and watches run on its completion thread; they
// only queue what they got and write to an eventfd, which the EventLoop watches: every
// callback below runs on dlock's thread, in the order the server answered, from drain().
// (The single-threaded libzookeeper-st, driven by zookeeper_interest/zookeeper_process, would
// fit the loop as well, but is not packaged by Debian.)
class Client {
public:
  using Done = std::function<void(Reply&)>;
  using OnEvent = std::function<void(const WatchEvent&)>;

  // Starts connecting to hosts ("h1:2181,h2:2181"), asking for session_timeout; nothing blocks.
  // Throws Error(unavailable) if the client cannot even start (a host name that does not resolve).
  // private_nodes: the nodes it creates get ZOO_CREATOR_ALL_ACL (only the session's
  // authenticated identities may use them) rather than world:anyone.
  Client(const std::string& hosts, util::Millis session_timeout, OnEvent on_event,
         bool private_nodes = false);
  // Closes the session (the server deletes its ephemeral nodes at once); in a process forked
  // after it was opened, does nothing (the session and threads are the parent's).
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The C client's asynchronous calls; done runs from drain(). Requests made before the
  // session is up are sent once it is.
  void create(const std::string& path, const std::string& data, int flags, Done done);
  // version: the node's version it must still have (-1: any).
  void remove(const std::string& path, Done done, int version = -1);
  // Replaces the node's data if it still has version (-1: any); stat: the node after (mtime:
  // the server's time of the write).
  void set(const std::string& path, const std::string& data, int version, Done done);
  // watch: a watch on path, whose firing comes to on_event.
  void exists(const std::string& path, bool watch, Done done);
  // Keeps at most max_bytes of the node's data (stat's dataLength says how long it is): the
  // C client reads it whole (up to the server's jute.maxbuffer), dlock copies no more.
  void get(const std::string& path, std::size_t max_bytes, Done done);
  // watch: a watch on path's children, whose firing (a child made or deleted) comes to on_event.
  void get_children(const std::string& path, Done done, bool watch = false);
  // One operation of a transaction (multi).
  struct Op {
    bool create = true; // else a delete
    std::string path;
    std::string data; // create
    int flags = 0;    // create
    int version = -1; // delete: the version the node must still have (-1: any)
  };
  // Runs ops as one transaction, all or none: rc is ZOK or the first failure; children has,
  // for each op, the path a create made ("" for the others).
  void multi(std::vector<Op> ops, Done done);
  void add_auth(const std::string& scheme, const std::string& credentials, Done done);

  // Has loop watch the queue's eventfd for this round.
  void watch(util::EventLoop& loop);
  // Runs the callbacks and events that arrived, in order.
  void drain();
  // Forgets the callbacks of the requests in flight (their replies are dropped).
  void forget() noexcept { m_pending.clear(); }
  // Whether a request awaits its reply.
  bool busy() const noexcept { return !m_pending.empty(); }

  int state() const;
  bool connected() const { return state() == zoo().ZOO_CONNECTED_STATE; }
  // The session's id (ephemeralOwner of its nodes); 0 before it is established.
  std::int64_t session_id() const;
  // The session timeout the server granted (the one asked for until connected).
  util::Millis session_timeout() const;
  bool owned() const noexcept;

  struct Inbox; // what the C client's threads hand over

private:
  std::uint64_t submit(Done done);
  void refused(std::uint64_t id, int rc);

  std::shared_ptr<Inbox> m_inbox;
  zhandle_t* m_handle = nullptr;
  pid_t m_owner = 0;
  OnEvent m_on_event;
  bool m_private_nodes = false;
  std::uint64_t m_next_id = 1;
  std::map<std::uint64_t, Done> m_pending;
};

// A ZooKeeper return code as words: "ZNONODE (no node)".
std::string describe(int rc);

} // namespace dlock::zookeeper

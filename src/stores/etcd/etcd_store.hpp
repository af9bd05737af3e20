#pragma once

#include "lock/outcome_queue.hpp"
#include "lock/store.hpp"
#include "stores/config.hpp"
#include "stores/etcd/api.hpp"
#include "stores/etcd/client.hpp"

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>

namespace dlock::etcd {

// The store of an etcd:// URL, with the URL's password unless --password-file gave one.
std::unique_ptr<lock::Store> open(const std::string& url, const stores::StoreConfig& config);

// Locks in etcd v3, the same recipe as `etcdctl lock` (clientv3/concurrency.Mutex), so that
// the two contend on one name: a lease of the TTL, a key PFX/<lease in hex> put under it, the
// owner is the key of PFX with the lowest create revision, and a waiter watches the deletion
// of the key just before its own (a FIFO queue: no herd, fair by construction). The fencing
// token is the key's create revision. A renewal is a lease keepalive and a check of the key; a
// watch of the holder's own key reports its deletion (lease revoked) at once.
class EtcdStore final : public lock::Store {
public:
  EtcdStore(EtcdUrl url, std::optional<std::string> password, stores::TlsFiles tls,
            util::Millis request_timeout, std::string prefix);
  // Revokes the leases this process still has (a waiter's, or a holder whose release did not
  // run), so that nothing waits for them to expire.
  ~EtcdStore() override;

  void start_acquire(const lock::LockName& name, const lock::AcquireRequest& request) override;
  void start_wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                           util::Millis block) override;
  void start_renew(const lock::LockName& name, const lock::RenewRequest& request) override;
  void start_release(const lock::LockName& name, const std::string& token) override;
  void start_withdraw(const lock::LockName& name, const lock::WaitTicket& ticket) override;

  void watch(util::EventLoop& loop) override;
  std::optional<lock::Outcome> next_outcome() override;
  // Drops the requests in flight; the keys and leases this process has stay (and the watch
  // of a held key), as a database store keeps its sessions.
  void abandon() noexcept override;
  Error timed_out() noexcept override;

  // Exclusive locks in one FIFO queue (--fair is what it always does). Not done: --shared and
  // --limit (etcdctl has no such recipe to share), wait/barrier/latch, and a lock outliving
  // dlock (acquire: nothing would keep the lease alive).
  const lock::StoreTraits& traits() const noexcept override;

  lock::LockStatus status(const lock::LockName& name, util::TimePoint deadline) override;
  std::vector<lock::LockStatus> list(std::string_view pattern, util::Millis timeout) override;

private:
  using Op = lock::Outcome::Op;
  // This process's key for one lock name, held or queued.
  struct Mine {
    std::string token;
    std::string prefix; // PFX/ of the name
    std::int64_t lease = 0;
    std::int64_t ttl_s = 0;
    std::string key;           // PFX/<lease hex>
    std::int64_t revision = 0; // its create revision: the fencing token when it owns
    bool owner = false;
    std::string predecessor;                // queued: the key just before ours
    std::int64_t watch_from = 0;            // queued: the revision after the one that read it
    std::uint64_t own_watch = 0;            // owner: the watch of our key's deletion
    std::uint64_t wake_watch = 0;           // queued: the watch of the predecessor's deletion
    std::optional<util::TimePoint> wake_by; // queued: the end of the current wait_for_wake
    std::int64_t watched_to = 0;            // owner: the last revision the own watch saw
  };

  void fail(Op op, const Error& error) { m_answers.answer(op, error); }
  // The steps of an acquisition, each run from the previous one's answer.
  void grant(const std::string& name, const lock::AcquireRequest& request);
  void put_key(const std::string& name, const lock::AcquireRequest& request);
  void decide(const std::string& name, const lock::AcquireRequest& request,
              std::vector<KeyValue> keys, std::int64_t revision);
  void watch_own_key(const std::string& name);
  void end_wait(const std::string& name);
  // Revokes lease; then calls done (whatever came of it).
  void revoke(std::int64_t lease, std::function<void(Answer&)> done);
  // The key (of this lock name) whose value has token's fingerprint, for another process's
  // renew or release; calls found with it or nullopt.
  void find_token(const std::string& name, const std::string& token,
                  std::function<void(std::optional<Error>, std::optional<KeyValue>)> found);

  Client m_client;
  std::string m_prefix;
  util::Millis m_timeout;
  pid_t m_pid;
  std::map<std::string, Mine> m_mine; // by lock name
  lock::OutcomeQueue m_answers;
};

} // namespace dlock::etcd

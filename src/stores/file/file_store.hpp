#pragma once

#include "lock/outcome_queue.hpp"
#include "lock/store.hpp"
#include "stores/file/layout.hpp"
#include "util/clock.hpp"
#include "util/fd.hpp"

#include <sys/types.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace dlock::file {

// Locks on this host only, with no server: flock(2) on one file per lock name in a directory
// (man dlock, FILE STORE). The lease is the holding process: the kernel frees the lock when
// dlock and its command (which inherits the descriptor, as under flock(1)) have exited, on any
// path, SIGKILL included. A renewal confirms that the lock file's path still names the inode
// dlock locked (release --force unlinks it); between renewals the holder checks it every 50 ms
// (stat calls) for its first 0.5 s, then inotify reports a removal at once. (Closing an
// inotify descriptor that had watches waits for the kernel's SRCU grace period, 6-16 ms, at
// exit too: a short command makes none, nor does a plain waiter.) Waiting blocks in flock(2)
// in a helper process that shares the descriptor, so the kernel wakes it on release; giving up
// kills the helper and unlocks the descriptor, so nothing is taken late.
// The cron and CI policies, which must outlive the descriptor, are side files in DIR/.dlock
// that every dlock honours (flock(1) cannot), one per holder or waiter (in a sticky .dlock each
// user replaces only its own): --min-hold and --lock-delay in ENC+policy+FP (the end of a lease
// stamped there, or in ENC+ended+FP by another user), checked right after the flock is taken
// and given back while it closes the lock (the waiter then blocks until its end, or until
// inotify reports a change); --replace in ENC+replace+FP, read by the holder FP as a removal is
// found (its checks, then inotify) or at its renewal; --supersede in ENC+waiter+ID, flocked by
// each waiter while it lives, whose appearance wakes the older ones (inotify). --fair: a queue
// of tickets, ENC+ticket+ID, each flocked by its waiter (a waiter gone leaves it free), in the
// order of their ctime, which no user can set back; every dlock lets earlier tickets go first,
// a waiter behind one waits on inotify (a ticket removed, or closed by its dying waiter) and
// only the first blocks in flock(2). Times are this host's CLOCK_REALTIME: file:// is one host.
class FileStore final : public lock::Store, public lock::Coordination, public lock::History {
public:
  explicit FileStore(std::string directory);
  ~FileStore() override;
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  void start_acquire(const lock::LockName& name, const lock::AcquireRequest& request) override;
  void start_wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                           util::Millis block) override;
  void start_renew(const lock::LockName& name, const lock::RenewRequest& request) override;
  void start_release(const lock::LockName& name, const std::string& token) override;
  // A lock waiter's helper and --fair ticket go (the helper is its registration); a barrier
  // party's arrival goes unless its generation tripped (Outcome::gate.open). Done at once.
  void start_withdraw(const lock::LockName& name, const lock::WaitTicket& ticket) override;
  // dlock wait, barrier and latch within this host: a watcher looks at /proc/locks (taking
  // nothing) and is woken by the lock file's close (inotify on DIR); barrier parties and the
  // latch are files of .dlock (man dlock, FILE STORE), woken by inotify on .dlock. A leader
  // watcher's term is the holder record's fencing token, woken by the record's arrival and
  // removal (inotify on .dlock) and by the lock file's close (inotify on DIR).
  lock::Coordination* coordination() noexcept override { return this; }
  void start_gate(const lock::LockName& name, const lock::GateRequest& request) override;
  void start_set_latch(const lock::LockName& name, std::int64_t count,
                       util::Millis expire) override;
  void start_count_down(const lock::LockName& name) override;

  // One file per lock and user in .dlock, merged when read (stores/file/history.hpp); a
  // record is written at once, its outcome queued.
  lock::History* history() noexcept override { return this; }
  void start_record(const lock::LockName& name, const std::string& text) override;
  // Files planted by another user give nothing, with a warning each, never an error.
  std::vector<std::string> events(const lock::LockName& name, std::size_t limit,
                                  util::TimePoint deadline) override;

  void watch(util::EventLoop& loop) override;
  std::optional<lock::Outcome> next_outcome() override;
  // Keeps every lock held (dropping it would free it under a running command); stops the
  // waiting helpers and unlocks what they may have taken.
  void abandon() noexcept override;
  Error timed_out() noexcept override;
  void limit_blocking(util::Millis) noexcept override {}

  // Exclusive, --shared (LOCK_SH) and --limit (slot files), --fair (tickets), wait, barrier and
  // latch (side files), and the four policies (side files); no lock without its process (a
  // --min-hold outlives it in a side file only).
  const lock::StoreTraits& traits() const noexcept override;
  std::vector<int> inherited_descriptors() const override;

  lock::LockStatus status(const lock::LockName& name, util::TimePoint deadline) override;
  std::vector<lock::LockStatus> list(std::string_view pattern, util::Millis timeout) override;

private:
  // One lock name: what this process holds of it, or waits on.
  struct Named {
    explicit Named(Layout l) : layout(std::move(l)) {}
    Layout layout;
    std::string name;
    lock::LockKind kind{};
    std::string token;
    // Held: the locked description (of the lock file, or of one slot file) and its record.
    bool held = false;
    int slot = -1;
    std::string file; // the name in the directory of the file locked
    std::string path; // its path, for messages
    util::UniqueFd lock;
    util::UniqueFd record;
    std::string record_file; // the name in .dlock of the record
    std::int64_t fence = 0;
    // Checked by stat calls every hold_check_every (next_check) until watched by inotify,
    // watch_held_after from taken_at (a short command makes no inotify instance).
    util::TimePoint taken_at{};
    util::TimePoint next_check{};
    bool watched = false;
    int watch_lock = -1, watch_record = -1;
    bool loss_reported = false;
    // Waiting: the descriptions waited on (the lock file, or every slot), and the helper
    // process blocked in flock(2) on them.
    std::vector<util::UniqueFd> candidates;
    util::UniqueFd turnstile;    // exclusive and --shared: DIR/ENC+queue
    bool writer_waiting = false; // --shared: the turnstile is kept by a waiting exclusive one
    std::vector<std::string> candidate_names;
    pid_t helper = -1;
    util::UniqueFd helper_pipe;
    int granted = -1; // candidate the helper locked
    bool wait_pending = false;
    util::TimePoint block_until{};
    // Refused by the side record of a holder gone (--min-hold, --lock-delay): free at this
    // CLOCK_REALTIME ms (0: not refused so); the waiter blocks until then, or until the record
    // changes (inotify on .dlock), never in flock(2), which would grant at once.
    std::int64_t closed_until_ms = 0;
    lock::AcquireResult::Lease closed_lease{};
    lock::HolderInfo closed_holder;
    // A side file this waiter looks at (policy, newest) changed while no wait was pending: the
    // next wait answers at once (nothing is missed between an attempt and its wait).
    bool side_changed = false;
    bool replace_told = false; // held: a request to stand down was seen (renewal asked at once)
    // --supersede: this waiter's announcement (.dlock/ENC+waiter+ID), flocked while it lives.
    bool supersede = false;
    util::UniqueFd newest;
    std::string newest_file;
    // --fair: this waiter's ticket (.dlock/ENC+ticket+ID), flocked while it waits; queued: a
    // live ticket is ahead of this acquirer, which waits for the queue to change (inotify on
    // .dlock), never in flock(2), which would not keep the order.
    util::UniqueFd ticket;
    std::string ticket_file;
    bool queued = false;
    bool close_seen = false; // queued: a ticket's close woke it (see after_close)
  };
  using Op = lock::Outcome::Op;
  // One name a waiter that takes nothing waits on (wait, barrier, latch).
  struct Gate {
    explicit Gate(Layout l) : layout(std::move(l)) {}
    Layout layout;
    std::string name;
    lock::WaitMode mode = lock::WaitMode::watch;
    bool wait_pending = false;
    util::TimePoint block_until{};
    bool side_changed = false; // a file it looks at changed while no wait was pending
    bool close_seen = false;   // watch: a lock file's close woke it (see after_close)
    // watch: who held the lock at the last look (a flock's inode and pid, a --min-hold's
    // holder): a look that finds none of them holding it counts as freed.
    std::set<std::string> holders;
    // leader: the term of the last look that found a holder record, and the flocks its holder
    // kept then: a holder's record goes just before its flock, so the term lasts until both did.
    std::int64_t term = 0;
    std::set<std::string> term_flocks;
    // leader: a holder without a record (flock(1), or a dlock between its flock and its record)
    // first seen then, with this term; counted as the leader once it lasted unrecorded_grace.
    std::int64_t unrecorded = 0;
    util::TimePoint unrecorded_at{};
    // barrier: this party's arrival, flocked while it waits.
    util::UniqueFd party;
    std::string party_file;
    std::string id; // the waiter id's fingerprint
    std::int64_t generation = 0;
    std::int64_t parties = 0;
  };

  Named* find(const lock::LockName& name);
  // Opens the directory and .dlock once (creating them if missing with create) and checks
  // that other users cannot replace what is in them; false if the directory does not exist
  // (and create is not set). Error naming what is wrong.
  bool open_directories(bool create);
  void prepare_directory() { open_directories(true); }
  // open_directories for a renewal or release of another process's lock: false once it has
  // answered outcome (no directory: not held) or the error.
  bool reach_directories(lock::Outcome& outcome);
  // Opens (or creates) a lock, slot or turnstile file of DIR: a regular file with one link.
  util::UniqueFd open_lock_file(const Layout& layout, const std::string& name);
  // One NB attempt over the candidates; true when one was locked and is still the file its
  // path names.
  bool try_candidates(Named& n, const lock::AcquireRequest& request);
  void open_candidates(Named& n);
  // DIR/ENC+queue, for --shared holders and exclusive waiters (none: no writer preference).
  void open_turnstile(Named& n);
  // Makes candidate i the held lock: the fence, the record; false (and nothing held) if its
  // file was removed or replaced meanwhile.
  bool take(Named& n, int i, const lock::AcquireRequest& request);
  // inotify on the held lock file, its record and .dlock (a --replace request); false if one
  // of them could not be watched (the checks go on).
  bool watch_hold(Named& n);
  // Reports (Op::disconnected) a held lock whose file or record was removed or replaced, and,
  // if replace_changed, a --replace request for it; each once.
  void check_hold(Named& n, bool replace_changed);
  std::int64_t next_fence(const Layout& layout);
  void write_record(Named& n, const lock::AcquireRequest& request, std::uint64_t inode);
  void start_helper(Named& n);
  void on_helper(const std::string& name);
  void stop_helper(Named& n) noexcept;
  void drop_candidates(Named& n) noexcept;
  // Unlocks and closes what n holds; unlinks its record if still its own.
  void drop_hold(Named& n) noexcept;
  // Whether the paths still name the inodes n holds (nothing removed or replaced them).
  bool still_ours(const Named& n) const;
  void on_inotify();
  // The side record of the last holder with a --min-hold or --lock-delay, if the lock file just
  // locked is closed by it: sets n.closed_* (and stamps ended_at when its lease is first seen
  // ended); removes it when it is over or is not dlock's.
  bool closed_by_policy(Named& n, const lock::AcquireRequest& request);
  // closed_by_policy's one look at the side records.
  bool closed_by_policies(Named& n, const lock::AcquireRequest& request);
  // Once taken: the side record of this holder's --min-hold and --lock-delay, and no request
  // to stand down left from an earlier holder. Error if the side record cannot be written.
  void arm_policy(Named& n, const lock::AcquireRequest& request);
  // A release by token of a held lock: keeps the side record for the min-hold left (what is
  // left, 0 if none), or removes it; a holder asked to stand down keeps nothing.
  util::Millis settle_policy(const Layout& layout, const std::string& token);
  // The answer of an attempt not granted, for --replace and --supersede; false when the
  // waiter was superseded (outcome is then complete).
  bool ask_others(Named& n, const lock::AcquireRequest& request, const std::vector<Record>& records,
                  lock::AcquireResult& result);
  // Writes .dlock/ENC+waiter+ID for this waiter, flocked by n.newest while it lives.
  void announce_newest(Named& n, const lock::AcquireRequest& request);
  void drop_newest(Named& n) noexcept;
  // Writes .dlock/ENC+ticket+ID for this --fair waiter, flocked by n.ticket while it waits.
  void make_ticket(Named& n, const lock::AcquireRequest& request);
  void drop_ticket(Named& n) noexcept;
  // Whether a live --fair ticket is ahead of n's (of any, when n has none); dead ones are
  // removed on the way.
  bool queue_ahead(const Named& n);
  // inotify on .dlock, for waiters woken by a side file's change.
  void watch_meta();
  // inotify on DIR, for watchers woken by a lock file's close.
  void watch_dir();
  Gate& gate_of(const lock::LockName& name);
  // The four gates: one look, open or not (result), registered for inotify either way.
  void look_watch(Gate& g, const lock::GateRequest& request, lock::GateResult& result);
  void look_leader(Gate& g, const lock::GateRequest& request, lock::GateResult& result);
  // Opens DIR and .dlock for a leader watcher (again if .dlock was missing); when one is
  // missing, watches the nearest directory above that exists for its creation. Makes nothing:
  // a watcher may be a user who must not own the lock directory. False without DIR.
  bool reach_for_leader();
  void look_barrier(Gate& g, const lock::GateRequest& request, lock::GateResult& result);
  void look_latch(Gate& g, const lock::GateRequest& request, lock::GateResult& result);
  // Makes (or moves) this party's arrival into generation.
  void arrive(Gate& g, std::int64_t generation, std::int64_t parties);
  void drop_party(Gate& g) noexcept;
  // Whether the marker of this party's generation lists it (it passed the barrier).
  bool passed(const Gate& g, std::int64_t parties);

  std::string m_dir;
  pid_t m_pid; // the process that opened the store: a forked child never unlocks its locks
  std::map<std::string, Named> m_named;
  std::map<std::string, Gate> m_gates;
  lock::OutcomeQueue m_answers;
  util::UniqueFd m_inotify;
  util::UniqueFd m_dirfd;  // DIR
  util::UniqueFd m_metafd; // DIR/.dlock; none: no records, no fencing tokens
  int m_watch_meta = -1;   // the inotify watch on .dlock (-1: none yet)
  int m_watch_dir = -1;    // the inotify watch on DIR (-1: none yet)
  int m_watch_made = -1;   // leader: the watch on the directory where DIR or .dlock will be made
  bool m_fencing = true;   // false once the counter turned out not writable
  bool m_records = true;   // false once .dlock turned out not writable
};

} // namespace dlock::file

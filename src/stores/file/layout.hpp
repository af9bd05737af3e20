#pragma once

#include "lock/holder.hpp"
#include "lock/kind.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlock::file {

// Whether a URL names the file store (file:///dir).
bool is_file_url(std::string_view url);

// The directory of a file:///dir URL (file://localhost/dir too), %XX decoded, without a
// trailing '/'. Error(usage) for a relative path, another host, a query or a fragment.
std::string directory_of(std::string_view url);

// The file name of a lock name inside the directory: bytes A-Z a-z 0-9 _ - kept, '.' kept
// except first, everything else %XX, so that short names stay readable and every name maps
// to one name without '/'; an encoding longer than 200 bytes keeps its first 100 bytes and
// adds '~' and the SHA-256 of the name (file names end at 255 bytes). '+' and '~' are never
// part of an encoding: dlock's own files use them (man dlock, FILE STORE).
std::string file_name_of(std::string_view lock_name);
// The lock name of a file name, nullopt for a hashed name, a slot or anything else.
std::optional<std::string> lock_name_of(std::string_view file_name);

// The files of one lock name inside a directory.
struct Layout {
  std::string dir;     // the store's directory
  std::string encoded; // file_name_of(name)

  Layout(std::string directory, std::string_view lock_name);

  // The names inside DIR and DIR/.dlock, for openat() from the directories' descriptors (other
  // users may write a shared directory: no path is resolved twice); the paths, for messages.
  static constexpr const char* meta_name = ".dlock";
  // ENC: flock(1) takes the same lock (exclusive or --shared).
  const std::string& lock_name() const { return encoded; }
  // ENC+slot.K: slot K of a --limit N semaphore (K from 0 to N-1).
  std::string slot_name(int slot) const { return encoded + "+slot." + std::to_string(slot); }
  // ENC+queue: the turnstile a waiting exclusive holder keeps, which --shared ones pass.
  std::string turnstile_name() const { return encoded + "+queue"; }
  // .dlock/ENC+fence: the fencing counter.
  std::string fence_name() const { return encoded + "+fence"; }
  // .dlock/ENC+by+FP: the holder record of the token whose fingerprint is FP.
  std::string record_name(std::string_view fingerprint) const
  {
    return encoded + "+by+" + std::string(fingerprint);
  }
  // .dlock/ENC+new+FP: a record being written (renamed to ENC+by+FP once locked).
  std::string new_record_name(std::string_view fingerprint) const
  {
    return encoded + "+new+" + std::string(fingerprint);
  }

  // .dlock/ENC+policy+FP: the --min-hold and --lock-delay state of the holder FP (PolicyRecord),
  // which outlives its process; every dlock that takes the lock honours it. One file per holder:
  // in a sticky .dlock each user can replace only its own.
  std::string policy_prefix() const { return encoded + "+policy+"; }
  std::string policy_name(std::string_view fingerprint) const
  {
    return policy_prefix() + std::string(fingerprint);
  }
  // .dlock/ENC+ended+FP: when the lease of holder FP was first seen ended without a release, by
  // a dlock that may not replace ENC+policy+FP (another user's); created once (O_EXCL).
  std::string ended_prefix() const { return encoded + "+ended+"; }
  std::string ended_name(std::string_view fingerprint) const
  {
    return ended_prefix() + std::string(fingerprint);
  }
  // .dlock/ENC+replace+FP: a --replace acquirer's request that the holder FP stands down.
  std::string replace_name(std::string_view fingerprint) const
  {
    return encoded + "+replace+" + std::string(fingerprint);
  }
  // .dlock/ENC+waiter+ID: a --supersede waiter's announcement (flocked by it while it waits or
  // holds); the newest live one wins. One file per waiter: in a sticky .dlock each user can
  // replace only its own.
  std::string waiter_prefix() const { return encoded + "+waiter+"; }
  std::string waiter_name(std::string_view id) const { return waiter_prefix() + std::string(id); }
  // .dlock/ENC+newtmp+R: an announcement being written (renamed to ENC+waiter+ID once locked).
  std::string new_newest_name(std::string_view random) const
  {
    return encoded + "+newtmp+" + std::string(random);
  }

  // .dlock/ENC+ticket+ID: a --fair waiter's place in the queue, flocked by it while it waits
  // (a waiter gone, even by SIGKILL, leaves it unlocked: seen free, removed by the next one);
  // the queue's order is the tickets' ctime, which no user can set back (the name breaks a tie).
  std::string ticket_prefix() const { return encoded + "+ticket+"; }
  std::string ticket_name(std::string_view id) const { return ticket_prefix() + std::string(id); }
  // .dlock/ENC+newticket+R: a ticket being made (locked, then renamed to ENC+ticket+ID).
  std::string new_ticket_prefix() const { return encoded + "+newticket+"; }

  // .dlock/ENC+party+GEN+ID: a barrier party's arrival in generation GEN (dlockparty1, its
  // --parties), flocked by it while it waits; a party gone leaves it unlocked (ignored, removed).
  std::string party_prefix() const { return encoded + "+party+"; }
  std::string party_name(std::int64_t generation, std::string_view id) const
  {
    return party_prefix() + std::to_string(generation) + "+" + std::string(id);
  }
  // .dlock/ENC+newparty+R: an arrival being made (locked, then renamed to ENC+party+GEN+ID).
  std::string new_party_prefix() const { return encoded + "+newparty+"; }
  // .dlock/ENC+tripped+GEN: generation GEN tripped, with the parties that passed it (made once,
  // whole, by the first party that saw them all); removed once none of them waits any more.
  std::string tripped_prefix() const { return encoded + "+tripped+"; }
  std::string tripped_name(std::int64_t generation) const
  {
    return tripped_prefix() + std::to_string(generation);
  }
  // .dlock/ENC+newtrip+R: a marker being written (linked to ENC+tripped+GEN if none is there).
  std::string new_tripped_prefix() const { return encoded + "+newtrip+"; }
  // .dlock/ENC+latch: the count-down latch (dlocklatch1, its count and when it expires),
  // replaced whole on each change by a dlock holding the flock of the one it replaces.
  std::string latch_name() const { return encoded + "+latch"; }
  // .dlock/ENC+history+UID: the lock's history as user UID recorded it (stores/file/history.hpp).
  std::string history_prefix() const { return encoded + "+history+"; }
  std::string history_name(std::uint64_t uid) const
  {
    return history_prefix() + std::to_string(uid);
  }

  std::string lock_path() const { return dir + "/" + lock_name(); }
  std::string slot_path(int slot) const { return dir + "/" + slot_name(slot); }
  std::string turnstile_path() const { return dir + "/" + turnstile_name(); }
  // DIR/.dlock: the bookkeeping, out of the way of the lock files.
  std::string meta_dir() const { return dir + "/" + meta_name; }
  std::string fence_path() const { return meta_dir() + "/" + fence_name(); }
  std::string record_path(std::string_view fingerprint) const
  {
    return meta_dir() + "/" + record_name(fingerprint);
  }
  // DIR/NAME and DIR/.dlock/NAME, for messages.
  std::string path_of(const std::string& name) const { return dir + "/" + name; }
  std::string meta_path_of(const std::string& name) const { return meta_dir() + "/" + name; }
};

// Who holds a lock, as its holder wrote it in DIR/.dlock/ENC+by+FP (one line, tab-separated).
struct Record {
  std::string name;
  lock::LockKind kind{};
  int slot = -1;           // --limit: the slot held
  std::uint64_t inode = 0; // of the lock or slot file held, to tell a replaced one
  std::string user, host;
  std::int64_t pid = 0;
  std::int64_t acquired_ms = 0;
  std::int64_t fence = 0;
  std::int64_t ttl_ms = 0;
  std::string command;
  std::string note;        // --note (a 13th field, absent when empty and no value follows)
  std::string value;       // dlock elect --value (a 14th field, absent when empty)
  std::string fingerprint; // not written: the token's, from the record's file name

  std::string serialize() const;
  // nullopt for anything dlock did not write: malformed, larger than
  // lock::max_holder_record_bytes, or a field over its cap (a note over lock::max_note_bytes, a
  // text field or the value over lock::max_holder_field_bytes).
  static std::optional<Record> parse(std::string_view text);
};

// The largest side file (policy, replace request, newest waiter) read back: one bigger is not
// dlock's and is ignored.
inline constexpr std::size_t max_side_file_bytes = 2 * lock::max_holder_record_bytes;

// .dlock/ENC+policy: the --min-hold and --lock-delay of the holder of token fingerprint, with
// its record. Times are the host's CLOCK_REALTIME in ms (file:// is one host).
struct PolicyRecord {
  std::string fingerprint;        // the holder's token's
  std::int64_t hold_until_ms = 0; // --min-hold: taken until then however the holder ends (0: none)
  bool command_ended = false;     // released by its token, kept for the min-hold only
  std::int64_t delay_ms = 0;      // --lock-delay armed (0: none, or disarmed by a clean release)
  std::int64_t ended_at_ms = 0;   // when its lease was seen ended without a release (0: not yet)
  Record holder;

  std::string serialize() const;
  static std::optional<PolicyRecord> parse(std::string_view text);
  // When the lock may be taken again, now being the time its holder's lease is known to have
  // ended if not stamped yet (0: no longer closed by anything).
  std::int64_t free_at(std::int64_t now_ms) const;
};

// .dlock/ENC+replace+FP or ENC+waiter+ID: who asked (a --replace acquirer, a --supersede
// waiter): its token's or waiter id's fingerprint, and when (CLOCK_REALTIME µs: the newest wins).
struct Announcement {
  std::string id;
  Record who;
  std::int64_t at_us = 0;

  std::string serialize() const;
  static std::optional<Announcement> parse(std::string_view text);
};

// A record is named by its token's fingerprint, 16 hex digits (the token never reaches a file).
using lock::token_fingerprint;

// One line of /proc/locks about a flock(2) lock.
struct ProcLock {
  bool blocked = false; // a waiter ("->"), not a holder
  bool write = false;   // LOCK_EX (else LOCK_SH)
  std::int64_t pid = 0;
  unsigned dev_major = 0, dev_minor = 0;
  std::uint64_t inode = 0;
};

// The FLOCK lines of /proc/locks' text (POSIX and OFD locks are not dlock's).
std::vector<ProcLock> parse_proc_locks(std::string_view text);

} // namespace dlock::file

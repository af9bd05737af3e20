#include "commands/leader.hpp"

#include "commands/gate.hpp"
#include "commands/status.hpp"
#include "hold/waiter.hpp"
#include "lock/features.hpp"
#include "util/json.hpp"
#include "util/log.hpp"
#include "util/text.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <optional>

namespace dlock::commands {

namespace {

using namespace std::chrono_literals;

// One state of an election, as leader prints it, and what tells two states apart.
struct Leadership {
  lock::LockStatus status;

  bool leads() const { return status.held; }
  // The same leader in the same term: nothing to print again.
  bool same_as(const Leadership& other) const
  {
    const lock::HolderInfo& a = status.holder;
    const lock::HolderInfo& b = other.status.holder;
    return leads() == other.leads()
           && (!leads()
               || (a.fence == b.fence && a.value == b.value && a.acquired_ms == b.acquired_ms
                   && a.same_holder(b)));
  }

  // "VALUE (user@host pid N, since TIME, term F)", or "no leader".
  std::string line() const
  {
    if (!leads()) {
      return "no leader";
    }
    const lock::HolderInfo& h = status.holder;
    // Another client's leader: what the store could say of it (etcd: "etcdctl lock (lease …)").
    const bool foreign = h.host.empty() && h.user.empty();
    const bool unnamed = h.command.empty() || h.command == lock::HolderInfo::not_dlock().command;
    const bool says_so = h.command.starts_with("not dlock"); // etcd: "not dlock (lease …)"
    std::string who = !foreign  ? fmt::format("{} pid {}", holder_name(h), h.pid)
                      : unnamed ? std::string("not dlock")
                      : says_so ? util::printable(h.command)
                                : "not dlock: " + util::printable(h.command);
    std::string text = fmt::format("{} ({}", h.value.empty() ? "-" : util::printable(h.value), who);
    if (h.acquired_ms > 0) {
      text += ", since " + util::format_rfc3339(h.acquired_ms);
    }
    if (h.fence != 0) {
      text += fmt::format(", term {}", h.fence);
    }
    return text + ")";
  }

  std::string json() const
  {
    util::JsonObject document;
    document.add("version", std::int64_t{1}).add("key", status.name).add("leader", leads());
    if (!leads()) {
      document.add_null("value").add_null("holder").add_null("since").add_null("term");
      return document.str();
    }
    const lock::HolderInfo& h = status.holder;
    document.add("value", h.value)
      .add("holder", util::JsonObject()
                       .add("host", h.host)
                       .add("pid", h.pid)
                       .add("user", h.user)
                       .add("command", h.command)
                       .add("note", h.note));
    if (h.acquired_ms > 0) {
      document.add("since", util::format_rfc3339(h.acquired_ms));
    } else {
      document.add_null("since");
    }
    if (h.fence != 0) {
      document.add("term", h.fence);
    } else {
      document.add_null("term");
    }
    return document.str();
  }
};

Leadership read(Context& context, const LeaderOptions& options)
{
  return Leadership{
    context.store.status(options.key, util::deadline_after(context.request_timeout))};
}

void show(const Leadership& state, const LeaderOptions& options)
{
  print((options.json ? state.json() : state.line()) + "\n");
  std::fflush(stdout); // a watcher's reader sees each change as it comes
}

// --watch: the leader now, then each change, woken by the store through the leader gate.
int watch(Context& context, const LeaderOptions& options)
{
  lock::require(context.store, lock::Feature::elect);
  hold::Gate gate;
  gate.coordination = &require_coordination(context);
  gate.request.ticket.mode = lock::WaitMode::leader;
  // No term seen yet: the first look opens at once with the term it found. Starting from 0
  // ("nobody") missed a leader that left between the first read and that look: the line
  // printed named it, the gate saw nobody, as it had been told, and waited for a change.
  gate.request.ticket.since = -1;
  gate.block_cap = 30s;
  gate.subject = fmt::format("the leader of '{}' to change", options.key.str());
  process::SignalFd signals({SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2});
  hold::WaitPolicy policy =
    hold::make_wait_policy(false, false, std::nullopt, context.request_timeout);
  policy.report_holder = false; // the changes are the output; nothing more on stderr
  policy.live_progress = false;

  std::optional<Leadership> shown;
  while (true) {
    try {
      Leadership now = read(context, options);
      if (!shown || !now.same_as(*shown)) {
        show(now, options);
        shown = std::move(now);
      }
    } catch (const Error& error) {
      if (!shown || error.code() != ExitCode::unavailable) {
        throw; // the first read says whether the store is there at all
      }
      util::log_warning("{}", error.what()); // the gate rides the outage out
    }
    hold::Passed end =
      hold::Waiter(hold::system_clock(), context.store, signals, policy).pass(options.key, gate);
    if (end.signal != 0) {
      if (process::stops_calling_script(end.signal)) {
        process::die_of_signal(end.signal, false); // nothing is held; the script stops too
      }
      return 128 + end.signal;
    }
    gate.request.ticket.since = end.since; // the term it opened on: wait for the next
  }
}

} // namespace

int leader(Context& context, const LeaderOptions& options)
{
  if (options.watch) {
    return watch(context, options);
  }
  Leadership now = read(context, options);
  show(now, options);
  return now.leads() ? 0 : static_cast<int>(ExitCode::not_held);
}

} // namespace dlock::commands

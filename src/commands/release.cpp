#include "commands/release.hpp"

#include "commands/history.hpp"
#include "commands/keep_record.hpp"
#include "util/log.hpp"
#include "util/syslog.hpp"

#include <csignal>

namespace dlock::commands {

namespace {

// release --force of one key: whoever holds it (every holder of a --shared or --limit key).
void release_by_force(Context& context, const lock::LockName& name)
{
  lock::LockStatus before =
    context.store.status(name, util::deadline_after(context.request_timeout));
  context.store.start_release(name, "");
  bool held = lock::await_outcome(context.store, lock::Outcome::Op::release,
                                  util::deadline_after(context.request_timeout))
                .held;
  if (held) {
    lock::HistoryEvent event =
      lock::HistoryEvent::now(lock::HistoryEvent::Kind::forced, lock::HolderInfo::current(""));
    event.holder.fence = before.holder.fence;
    event.detail = "evicted "
                   + (before.slots.size() > 1 ? fmt::format("{} holders ({})", before.slots.size(),
                                                            before.kind.describe())
                                              : before.holder.identity());
    record_event(context.store, {name}, event, util::deadline_after(context.request_timeout));
    util::syslog_event(
      util::EventLevel::warning, "released_by_force",
      {{"key", name.str()},
       {"evicted", before.slots.size() > 1
                     ? fmt::format("{} holders ({})", before.slots.size(), before.kind.describe())
                     : before.holder.identity()},
       {"fencing_token", std::to_string(before.holder.fence)}});
  }
  if (!held) {
    util::log_warning("lock '{}' was not held", name.str());
  } else if (before.slots.size() > 1) {
    util::log_warning("released lock '{}' by force; evicted its {} holders ({})", name.str(),
                      before.slots.size(), before.kind.describe());
  } else {
    util::log_warning("released lock '{}' by force; evicted {} (fencing token {})", name.str(),
                      before.holder.describe(), before.holder.fence);
  }
}

} // namespace

int release(Context& context, const ReleaseOptions& options)
{
  if (options.force) {
    for (const lock::LockName& name : options.keys) {
      release_by_force(context, name);
    }
    return 0;
  }
  KeepRecord record(options.token);
  if (record.report_loss(options.keys)) {
    return static_cast<int>(ExitCode::lost);
  }
  // An acquire --keep process of this token stops renewing, and does not take this release
  // for a loss.
  record.mark_released();
  int status = 0;
  try {
    for (const lock::LockName& name : options.keys) {
      context.store.start_release(name, options.token);
      lock::Outcome released = lock::await_outcome(context.store, lock::Outcome::Op::release,
                                                   util::deadline_after(context.request_timeout));
      if (released.kept_for > util::Millis(0)) {
        util::log_verbose("lock '{}' stays taken for {} more (--min-hold)", name.str(),
                          util::format_duration(released.kept_for));
      }
      if (!released.held) {
        util::log_error("lock '{}' is not held by this token (it expired or was taken over)",
                        name.str());
        util::syslog_event(
          util::EventLevel::warning, "lost",
          {{"key", name.str()}, {"reason", "not held by the token at release"}, {"by", "release"}});
        status = static_cast<int>(ExitCode::lost);
      } else {
        util::syslog_event(util::EventLevel::info, "released",
                           {{"key", name.str()}, {"by", "release"}});
        lock::HistoryEvent event = lock::HistoryEvent::now(lock::HistoryEvent::Kind::released,
                                                           lock::HolderInfo::current(""));
        event.detail = "dlock release --token";
        record_event(context.store, {name}, event, util::deadline_after(context.request_timeout));
      }
    }
  } catch (const Error&) {
    record.unmark_released(); // still held: the keep process goes on, and a loss is still a loss
    throw;
  }
  if (!record.signal_keep_process(SIGTERM)) {
    record.forget();
  }
  return status;
}

} // namespace dlock::commands

#include "commands/latch.hpp"

#include "commands/gate.hpp"
#include "util/json.hpp"
#include "util/log.hpp"

#include <cstdio>

namespace dlock::commands {

using namespace std::chrono_literals;

namespace {

// Prints one JSON document on stdout: the latch's name and count.
void print_count(const lock::LockName& name, std::int64_t count)
{
  std::string out = util::JsonObject()
                      .add("version", std::int64_t{1})
                      .add("key", name.str())
                      .add("count", count)
                      .str()
                    + "\n";
  if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0) {
    throw Error(ExitCode::internal, "could not write to stdout");
  }
}

// --count: sets the latch.
int set_latch(Context& context, lock::Coordination& gates, const LatchOptions& options)
{
  gates.start_set_latch(options.key, options.count, options.expire);
  lock::await_outcome(context.store, lock::Outcome::Op::set_latch,
                      util::deadline_after(context.request_timeout));
  util::log_verbose("latch '{}' set to {} (expires in {})", options.key.str(), options.count,
                    util::format_duration(options.expire));
  if (options.json) {
    print_count(options.key, options.count);
  }
  return 0;
}

// --down: counts it down.
int count_down(Context& context, lock::Coordination& gates, const LatchOptions& options)
{
  const lock::LockName& name = options.key;
  gates.start_count_down(name);
  std::int64_t left = lock::await_outcome(context.store, lock::Outcome::Op::count_down,
                                          util::deadline_after(context.request_timeout))
                        .gate.count;
  if (left < 0) {
    throw Error(ExitCode::not_held,
                "latch '{}' is not set (never set with --count, or expired): nothing to count "
                "down",
                name.str());
  }
  if (left == 0) {
    util::log_verbose("latch '{}' is at zero; its waiters go on", name.str());
  } else {
    util::log_verbose("latch '{}': count {}", name.str(), left);
  }
  if (options.json) {
    print_count(name, left);
  }
  return 0;
}

} // namespace

int latch(Context& context, const LatchOptions& options)
{
  lock::Coordination& gates = require_coordination(context);
  switch (options.action) {
  case LatchOptions::Action::count:
    return set_latch(context, gates, options);
  case LatchOptions::Action::down:
    return count_down(context, gates, options);
  case LatchOptions::Action::wait:
    break;
  }
  hold::Gate gate;
  gate.coordination = &gates;
  gate.request.ticket.mode = lock::WaitMode::latch;
  gate.block_cap = 30s;
  gate.subject = fmt::format("latch '{}'", options.key.str());
  return wait_at_gate(context, options.key, gate, options.wait, options.conflict_exit_code,
                      fmt::format("latch '{}' is at zero", options.key.str()));
}

} // namespace dlock::commands

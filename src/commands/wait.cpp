#include "commands/wait.hpp"

#include "commands/gate.hpp"

namespace dlock::commands {

using namespace std::chrono_literals;

int wait_until_free(Context& context, const WaitFreeOptions& options)
{
  hold::Gate gate;
  gate.coordination = &require_coordination(context);
  gate.request.ticket.mode = lock::WaitMode::watch;
  // A watcher blocks for the holder's remaining lease, within this.
  gate.block_cap = 30s;
  gate.subject = fmt::format("lock '{}' to be free", options.key.str());
  return wait_at_gate(context, options.key, gate, options.wait, options.conflict_exit_code,
                      fmt::format("lock '{}' is free", options.key.str()));
}

} // namespace dlock::commands

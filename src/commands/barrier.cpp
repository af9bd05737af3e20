#include "commands/barrier.hpp"

#include "commands/gate.hpp"

namespace dlock::commands {

using namespace std::chrono_literals;

int barrier(Context& context, const BarrierOptions& options)
{
  hold::Gate gate;
  gate.coordination = &require_coordination(context);
  gate.request.ticket.mode = lock::WaitMode::barrier;
  gate.request.parties = options.parties;
  // A party refreshes its arrival at least this often (a registration lapses 2 s after its
  // block ends), so that the arrival of one that died lapses within 7 s.
  gate.block_cap = 5s;
  gate.subject = fmt::format("barrier '{}'", options.key.str());
  return wait_at_gate(
    context, options.key, gate, options.wait, options.conflict_exit_code,
    fmt::format("barrier '{}': all {} parties arrived", options.key.str(), options.parties));
}

} // namespace dlock::commands

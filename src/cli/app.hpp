#pragma once

namespace dlock {

// The whole program: parses the command line, runs a subcommand, prints "dlock: ..." for any
// failure and returns the contract's exit status. Nothing below it calls exit().
int run_main(int argc, char** argv);

} // namespace dlock

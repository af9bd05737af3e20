#pragma once

#include <string>

namespace dlock::cli {

// "dlock 0.1.0 (git abc1234; hiredis 0.14.1; TLS: no)" for --version and bug reports.
std::string version_text();

} // namespace dlock::cli

#pragma once

#include <string>

namespace dlock::cli {

// "dlock 0.1.0 (git abc1234; hiredis 1.3.1; TLS: OpenSSL 3.0.x)" for --version and bug reports.
std::string version_text();

} // namespace dlock::cli

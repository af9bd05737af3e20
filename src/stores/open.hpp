#pragma once

#include "lock/store.hpp"
#include "stores/config.hpp"

#include <memory>
#include <string>

namespace dlock::stores {

// The one place a store is chosen, from the URL's scheme. Parses and checks the URLs
// (Error(usage) naming the bad one) without connecting: stores connect on first use.
std::unique_ptr<lock::Store> open_store(const StoreConfig& config);

// The client libraries behind the stores, for --version: "hiredis 1.2.0; TLS: OpenSSL 3.0.x".
std::string library_versions();

} // namespace dlock::stores

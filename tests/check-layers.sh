#!/usr/bin/env bash
# Checks that the layers of src/ point one way (see README, "Layout"):
#   cli -> commands -> hold -> lock <- stores;  commands/hold -> process;  everything -> util.
# Nothing above stores/ includes a store's header (cli/ may include the factory, stores/open.hpp);
# a store never includes commands/, hold/ or cli/; lock/, process/ and util/ include no C client
# library. Prints each violation as FILE: #include LINE and exits 1 if there is any.
set -euo pipefail
cd "$(dirname "$0")/../src"

status=0
# forbid DIR REGEX WHY: no file under DIR may have an #include line matching REGEX.
forbid() {
  local dir=$1 regex=$2 why=$3 hits
  hits=$(grep -rnE "^#include ${regex}" "$dir" || true)
  if [ -n "$hits" ]; then
    printf '%s\n' "$hits" | sed "s|^|src/|; s|\$|   <- ${why}|"
    status=1
  fi
}

forbid commands '"(cli|stores)/' "commands/ drives lock::Store, never a store or the CLI"
forbid hold '"(cli|commands|stores)/' "hold/ (the waiter, the lease keeper) is below commands/, above lock/"
forbid lock '"(cli|commands|hold|stores|process)/' "lock/ is store-neutral and below hold/"
forbid stores '"(cli|commands|hold)/' "a store never includes commands/, hold/ or cli/"
forbid process '"(cli|commands|hold|lock|stores)/' "process/ knows nothing of locks"
forbid util '"(cli|commands|hold|lock|stores|process)/' "util/ is the bottom layer"
forbid cli '"stores/[a-z]+/' "cli/ chooses a store through stores/open.hpp only"
forbid commands '<(hiredis|openssl)/' "no client library above stores/"
forbid hold '<(hiredis|openssl)/' "no client library above stores/"
forbid lock '<(hiredis|openssl)/' "no client library above stores/"
forbid cli '<(hiredis|openssl)/' "no client library above stores/"
exit $status

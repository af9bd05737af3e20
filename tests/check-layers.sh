#!/usr/bin/env bash
# Checks that the layers of src/ point one way (see README, "Layout"):
#   cli -> commands -> lock <- stores;  commands -> process;  everything -> util.
# Nothing above stores/ includes a store's header (cli/ may include the factory, stores/open.hpp);
# a store never includes commands/ or cli/; lock/, process/ and util/ include no C client
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
forbid lock '"(cli|commands|stores|process)/' "lock/ is store-neutral and below commands/"
forbid stores '"(cli|commands)/' "a store never includes commands/ or cli/"
forbid process '"(cli|commands|lock|stores)/' "process/ knows nothing of locks"
forbid util '"(cli|commands|lock|stores|process)/' "util/ is the bottom layer"
forbid cli '"stores/[a-z]+/' "cli/ chooses a store through stores/open.hpp only"
forbid commands '<(hiredis|openssl)/' "no client library above stores/"
forbid lock '<(hiredis|openssl)/' "no client library above stores/"
forbid cli '<(hiredis|openssl)/' "no client library above stores/"
exit $status

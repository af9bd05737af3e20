#!/usr/bin/env bash
# Checks that the layers of src/ point one way (README, "Layout"; ../shared/ARCHITECTURE.md):
#   cli -> commands -> hold -> lock <- stores;  commands/hold -> process;  everything -> util.
# Nothing above stores/ includes a store's header (cli/ may include the factory, stores/open.hpp
# and stores/config.hpp) or a client library's header; a store never includes commands/, cli/,
# hold/ or process/, nor another store (postgres/ and mysql/ share stores/sql/). Prints each
# violation as FILE:LINE:#include ...   <- WHY and exits 1 if there is any.
set -euo pipefail
cd "$(dirname "$0")/../src"

status=0
# forbid DIR REGEX WHY [EXCEPT]: no file under DIR (if it exists) may have an #include line
# matching REGEX, unless it also matches the regex EXCEPT.
include='[[:space:]]*#[[:space:]]*include[[:space:]]*'
forbid() {
  local dir=$1 regex=$2 why=$3 except=${4:-} hits
  [ -e "$dir" ] || return 0
  hits=$(grep -rnHE "^${include}${regex}" "$dir" || true)
  if [ -n "$except" ] && [ -n "$hits" ]; then
    hits=$(printf '%s\n' "$hits" | grep -vE "^[^:]*:[0-9]+:${include}${except}" || true)
  fi
  if [ -n "$hits" ]; then
    printf '%s\n' "$hits" | sed "s|^|src/|; s|\$|   <- ${why}|"
    status=1
  fi
}

forbid cli '"stores/[a-z_]+/' "cli/ chooses a store through stores/open.hpp only"
forbid commands '"(cli|stores)/' "commands/ drives lock::Store, never a store or the CLI"
forbid hold '"(cli|commands|stores)/' "hold/ drives lock::Store for commands/, below them"
forbid lock '"(cli|commands|hold|stores|process)/' "lock/ is store-neutral and below hold/"
forbid stores '"(cli|commands|hold|process)/' "a store sees lock/ and util/ only"
forbid process '"(cli|commands|hold|lock|stores)/' "process/ knows nothing of locks"
forbid util '"(cli|commands|hold|lock|stores|process)/' "util/ is the bottom layer"

# The client libraries' headers (hiredis/hiredict with OpenSSL, libpq, MariaDB/MySQL, libcurl,
# ZooKeeper, nlohmann-json): only a store includes them.
client='<((hiredis|hiredict|openssl|postgresql|mariadb|mysql|curl|zookeeper|nlohmann)/|(libpq-fe|libpq-events|pg_config[a-z_]*|postgres_ext|mysql|mysqld_error|errmsg|mariadb_[a-z_]*|ma_[a-z_]*)\.h>)'
for dir in cli commands hold lock process util main.cpp; do
  forbid "$dir" "$client" "no client library above stores/"
done

# No store includes another, nor the factory that includes them all; postgres/ and mysql/ may
# include what they share, stores/sql/.
for dir in stores/*/; do
  store=$(basename "$dir")
  allowed=$store
  case $store in postgres | mysql) allowed="$store|sql" ;; esac
  forbid "stores/$store" '"stores/(open\.|[a-z_]+/)' "a store includes no other store" \
    "\"stores/(${allowed})/"
done
exit $status

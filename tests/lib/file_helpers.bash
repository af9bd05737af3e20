# The file:// store for store.bats: no server, a lock directory of this file's own.
#
# store_start makes a fresh directory (under /dev/shm when it can, as /run/lock is tmpfs: the
# fencing counter's fdatasync then costs nothing) and exports DLOCK_URL=file://DIR;
# store_end_sessions does what release --force does to every lock of it: removes the lock and
# slot files and the holder records (the holders find their files replaced and stop).

load "${BASH_SOURCE[0]%/*}/store_helpers"

# The hooks of store.bats (store_helpers.bash).
STORE_FEATURES="shared limit fair coordinate session loss_notice min_hold lock_delay replace supersede keep elect history"
STORE_LOSS="its lock file was removed or replaced"

store_start() {
  local base=/dev/shm
  [ -d "$base" ] && [ -w "$base" ] || base=${TMPDIR:-/tmp}
  FILE_DIR=$(mktemp -d "$base/dlock-file-store.XXXXXX")
  export FILE_DIR DLOCK_URL=file://$FILE_DIR/locks
}

store_stop() { [ -z "${FILE_DIR:-}" ] || rm -rf "$FILE_DIR"; }

# Removes every lock file, slot file and holder record; prints how many locks were held.
store_end_sessions() {
  local dir=$FILE_DIR/locks held
  held=$("$DLOCK" list --json | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["locks"]))')
  find "$dir" -maxdepth 1 -type f -delete
  find "$dir/.dlock" -maxdepth 1 -type f -name '*+by+*' -delete 2>/dev/null || true
  echo "$held"
}

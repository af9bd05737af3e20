# The redis:// store for store.bats and tests/stores/redis: the private redis-server of
# helpers.bash (start_redis, stop_redis, rcli), reached by dlock over TCP on loopback.
#
# store_start starts it and exports DLOCK_URL=redis://127.0.0.1:PORT (the tests themselves use
# its unix socket: rcli); store_end_sessions does what the end of every lease does on the
# server.

load "${BASH_SOURCE[0]%/*}/store_helpers"

# The hooks of store.bats (store_helpers.bash).
STORE_FEATURES="shared limit fair coordinate detached replicas min_hold lock_delay replace supersede keep elect history"
STORE_LOSS="it expired or was released by someone else"

# store_start [redis-server args...]
store_start() {
  start_redis "$@" || return 1
  export DLOCK_URL=redis://127.0.0.1:$REDIS_PORT
}

store_stop() { stop_redis; }

# What an expiry does to every lease dlock holds (Redis has no session to end): deletes each
# exclusive holder's lock key and holder record (which, with a --lock-delay, lives that much
# longer, as after a real expiry), and each --shared/--limit lock's holders with their records;
# the holders find out at their next renewal. Prints how many leases it ended.
store_end_sessions() {
  local key n=0 delay
  for key in $(rcli --scan --pattern 'dlock:{*'); do
    case $key in
      *'}')
        delay=$(rcli hget "$key:holder" delay_ms 2>/dev/null)
        if [[ $delay =~ ^[0-9]+$ ]] && [ "$(rcli hexists "$key:holder" ended)" = 0 ]; then
          rcli del "$key" >/dev/null
          rcli pexpire "$key:holder" "$delay" >/dev/null
        else
          rcli del "$key" "$key:holder" >/dev/null
        fi
        n=$((n + 1))
        ;;
      *'}:holders')
        n=$((n + $(rcli zcard "$key")))
        rcli del "$key" "${key%:holders}:slots" "${key%:holders}:kind" >/dev/null
        ;;
    esac
  done
  echo "$n"
}

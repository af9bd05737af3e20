# What every store's test files share (tests/stores): skipping a whole file, and the hooks
# through which store.bats (the black-box scenarios, run once per store) drives a store.
#
# Each store has tests/lib/STORE_helpers.bash (STORE: the name of its directory
# tests/stores/STORE, whose store.bats is a symbolic link to tests/stores/store.bats) that loads
# this file and defines:
#   store_start         starts the store's server(s) of this file, exports DLOCK_URL (and what
#                       else dlock needs to reach them), or skip_file REASON
#   store_stop          stops them by pid, removes their files
#   store_end_sessions  the server side ends every lease or session that dlock holds; prints
#                       how many it ended
#   STORE_FEATURES      the words of what the store does, which scenarios check with store_has:
#                       shared, limit, fair, coordinate (wait, barrier, latch), detached
#                       (acquire), replicas (--wait-replicas), session (a lock is freed as
#                       soon as its holder dies),
#                       loss_notice (the server tells the holder at once that its lock is
#                       gone, a session's end or a watch, not its next renewal), sql
#                       (the database stores' own scenarios: URLs, roles, server settings)
#   STORE_LOSS          how dlock says a lock of this store was lost ("its database session
#                       ended"), after "lost lock 'KEY': "

# skip_file REASON: every test of this file skips itself with REASON (setup calls
# skip_if_file_skipped): bats 1.8 counts a skip in setup_file as a failure of setup_file.
skip_file() { export STORE_SKIP=$1; }
skip_if_file_skipped() { [ -z "${STORE_SKIP:-}" ] || skip "$STORE_SKIP"; }

# store_has WORD: whether STORE_FEATURES names it.
store_has() { [[ " ${STORE_FEATURES:-} " == *" $1 "* ]]; }

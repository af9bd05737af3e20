#!/usr/bin/env bash
# The README's test command: installs what is missing, builds with warnings as errors, runs
# the unit tests, the bats end-to-end tests (tests/e2e: dlock against a redis-server each file
# starts), the high-availability tests (tests/ha: a Sentinel group, a Redis Cluster and Redlock's
# independent nodes, each file starting its own; run once, not under the sanitizers) and the
# store tests (tests/stores/STORE: the scenarios every store passes, store.bats, and each
# store's faults, such as a Redis restart, a failover and a network partition, the partitions
# needing root and skipping themselves otherwise; each file with servers of its own; run once,
# not under the sanitizers); their helpers are in tests/lib. When valkey-server is installed,
# the core suites run against Valkey too (CTest entries valkey.FILE, in the same parallel run).
# Then an AddressSanitizer + UndefinedBehaviorSanitizer build (compiled in the background, at
# the lowest priority, while the release build's tests run) runs the unit tests and the core suites (CTest label core: dlock run, its lease, its
# processes, the terminal, waiting, lock kinds, wait/barrier/latch).
# At the end the release build is packed as a .deb, checked with lintian, installed, exercised
# and removed (packaging/test-deb.sh).
# The bats files run through CTest, one entry per file (tests/CMakeLists.txt), in parallel (one
# more than cores in the release pass, one per core under the sanitizers), each with its own
# servers on their own sockets and ports; a failing file's whole
# TAP output is printed, and every bats test is counted in the closing line.
# Usage: tests/run-all.sh [--no-sanitize]
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=1
[ "${1:-}" = --no-sanitize ] && sanitize=0

packaging/install-deps.sh test

passed=0
failed=0
skipped=0
start=$SECONDS

# phase TITLE: the heading of a step, with the seconds since the start (where the time goes).
phase() { echo "=== $* [at $((SECONDS - start)) s]"; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# configure NAME BUILD_DIR CMAKE_ARGS...: configures afresh, against the libraries installed
# now. The release build is configured as the Debian package's (build-deb.sh --configure:
# -O2, hardening flags), so that the tests run the binary that is packed and the package needs
# no build of its own.
configure() {
  local name=$1 dir=$2
  shift 2
  phase "$name: build ($dir)"
  rm -f "$dir/CMakeCache.txt"
  if [ "$dir" = build ]; then
    packaging/build-deb.sh --configure "$dir" -DDLOCK_WERROR=ON -DDLOCK_BUILD_TESTS=ON "$@" |
      grep '^-- dlock:' || true
  else
    cmake -S . -B "$dir" -DDLOCK_WERROR=ON "$@" | grep '^-- dlock:' || true
  fi
}

# compiled NAME BUILD_LOG STATUS: counts a build that ended with STATUS; 1 if it failed.
compiled() {
  if [ "$3" -ne 0 ]; then
    cat "$2"
    echo "not ok: $1 build failed"
    failed=$((failed + 1))
    return 1
  fi
}

# build NAME BUILD_DIR CMAKE_ARGS...: configures and builds; 1 if the build failed.
build() {
  local st=0
  configure "$@"
  cmake --build "$2" -j"$(nproc)" >"$log" 2>&1 || st=$?
  compiled "$1" "$log" "$st"
}

# unit_tests NAME BUILD_DIR: runs the GoogleTest binary, counted.
unit_tests() {
  phase "$1: unit tests"
  "$2/tests/dlock_unit_tests" --gtest_brief=1 >"$log" 2>&1 || true
  cat "$log"
  passed=$((passed + $(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\{0,1\}\..*/\1/p' "$log" | head -1 | grep . || echo 0)))
  failed=$((failed + $(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\{0,1\}, listed below.*/\1/p' "$log" | head -1 | grep . || echo 0)))
  grep -q '^\[  PASSED  \]' "$log" || grep -q '^\[  FAILED  \]' "$log" || failed=$((failed + 1))
}

# run_bats NAME BUILD_DIR CTEST_ARGS...: the bats files of that build (CTest entries, chosen by
# label), counted per bats test from the TAP output that CTest keeps in LastTest.log; JOBS files
# at a time (default: one per core).
run_bats() {
  local name=$1 dir=$2 rc=0 jobs=${JOBS:-$(nproc)}
  shift 2
  local servers
  servers=$(redis-server --version | cut -d' ' -f1-3)
  if [[ $* == *valkey* ]] && command -v valkey-server >/dev/null; then
    servers+=", $(valkey-server --version | cut -d' ' -f1-3)"
  fi
  phase "$name: end-to-end tests (bats through ctest $*, $servers)"
  local tap=$dir/Testing/Temporary/LastTest.log ok not_ok skips
  rm -f "$tap"
  ctest --test-dir "$dir" -j"$jobs" --output-on-failure --no-tests=error "$@" || rc=$?
  touch "$tap"
  ok=$(grep -c '^ok ' "$tap" || true)
  skips=$(grep -c '^ok .* # skip' "$tap" || true)
  not_ok=$(grep -c '^not ok ' "$tap" || true)
  # each skipped and failed bats test, after the name of its CTest entry (its file)
  awk '/^[0-9]+\/[0-9]+ Testing: / { file = $3 } /^ok .* # skip/ { print "skipped: " file ": " $0 }
    /^not ok / { print "FAILED: " file ": " $0 }' "$tap"
  passed=$((passed + ok - skips))
  skipped=$((skipped + skips))
  failed=$((failed + not_ok))
  if [ "$rc" -ne 0 ] && [ "$not_ok" -eq 0 ]; then
    echo "not ok: ctest failed (exit $rc) with no failing bats test: a file that crashed or timed out"
    failed=$((failed + 1))
  fi
}

phase "layers of src/ (tests/check-layers.sh)"
if tests/check-layers.sh; then
  passed=$((passed + 1))
else
  echo "not ok: tests/check-layers.sh"
  failed=$((failed + 1))
fi
if build "release build" build; then
  # before the tests start, so that clang-tidy's two minutes do not slow the timed ones
  phase "style of src/ (tests/check-style.sh: clang-format, clang-tidy)"
  if tests/check-style.sh build; then
    passed=$((passed + 1))
  else
    echo "not ok: tests/check-style.sh"
    failed=$((failed + 1))
  fi
  # The sanitizer build compiles meanwhile, at the lowest priority: the bats files mostly wait
  # (on servers, leases, sleeps), and their timing bounds allow for a loaded machine.
  if [ "$sanitize" = 1 ]; then
    configure "ASan+UBSan build" build-sanitize -DDLOCK_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
    echo "(compiling in the background, at nice 19, during the release build's tests)"
    sanitize_log=$(mktemp)
    trap 'rm -f "$log" "$sanitize_log"' EXIT
    (st=0; nice -n 19 cmake --build build-sanitize -j"$(nproc)" >"$sanitize_log" 2>&1 || st=$?
      echo "$st" >"$sanitize_log.status") &
    sanitize_build=$!
  fi
  unit_tests "release build" build
  # one file more than cores: see above; the core suites against Valkey (label valkey, when
  # valkey-server is installed) in the same run, so that they fill its gaps
  JOBS=$(($(nproc) + 1)) run_bats "release build" build -L 'e2e|ha|stores|valkey'
fi
if [ -n "${sanitize_build:-}" ]; then
  phase "ASan+UBSan build: waiting for its compilation"
  wait "$sanitize_build" || true
  status=$(cat "$sanitize_log.status" 2>/dev/null || echo 1)
  rm -f "$sanitize_log.status"
  if compiled "ASan+UBSan build" "$sanitize_log" "$status"; then
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
    unit_tests "ASan+UBSan build" build-sanitize
    run_bats "ASan+UBSan build" build-sanitize -L core
    unset ASAN_OPTIONS UBSAN_OPTIONS
  fi
fi
phase "Debian package: build, lintian, install, run, remove"
deb_args=()
[ ! -f build/CMakeCache.txt ] || deb_args=(--reuse build)
if packaging/test-deb.sh "${deb_args[@]}"; then
  passed=$((passed + 1))
else
  echo "not ok: packaging/test-deb.sh"
  failed=$((failed + 1))
fi
echo "=== finished in $((SECONDS - start)) s"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]

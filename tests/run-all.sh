#!/usr/bin/env bash
# The README's test command: installs what is missing, builds with warnings as errors, runs
# the unit tests and the bats end-to-end tests (which start their own redis-server), then
# builds again with AddressSanitizer and UndefinedBehaviorSanitizer and runs everything again.
# When valkey-server is installed, the end-to-end tests run against Valkey too; at the end
# the .deb is built, installed, exercised and removed (packaging/test-deb.sh). tests/faults
# (servers restarted under a running dlock) runs beside tests/e2e.
# Usage: tests/run-all.sh [--no-sanitize]
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=1
[ "${1:-}" = --no-sanitize ] && sanitize=0

packaging/install-deps.sh test

passed=0
failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# run_suite NAME BUILD_DIR CMAKE_ARGS...: builds, then runs unit and end-to-end tests.
run_suite() {
  local name=$1 dir=$2
  shift 2
  echo "=== $name: build ($dir)"
  rm -f "$dir/CMakeCache.txt" # configure afresh against the libraries installed now
  cmake -S . -B "$dir" -DDLOCK_WERROR=ON "$@" | grep '^-- dlock:' || true
  if ! cmake --build "$dir" -j"$(nproc)" >"$log" 2>&1; then
    cat "$log"
    echo "not ok: $name build failed"
    failed=$((failed + 1))
    return
  fi

  echo "=== $name: unit tests"
  "$dir/tests/dlock_unit_tests" --gtest_brief=1 >"$log" 2>&1 || true
  cat "$log"
  passed=$((passed + $(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\{0,1\}\..*/\1/p' "$log" | head -1 | grep . || echo 0)))
  failed=$((failed + $(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\{0,1\}, listed below.*/\1/p' "$log" | head -1 | grep . || echo 0)))
  grep -q '^\[  PASSED  \]' "$log" || grep -q '^\[  FAILED  \]' "$log" || failed=$((failed + 1))

  echo "=== $name: end-to-end tests (bats, $(redis-server --version | cut -d' ' -f1-3))"
  run_bats "$dir" tests/e2e tests/faults
}

# run_bats BUILD_DIR FILES...: the bats files against that build's dlock, counted.
run_bats() {
  local dir=$1
  shift
  DLOCK_BIN=$PWD/$dir/src/dlock bats --formatter tap "$@" | tee "$log" || true
  passed=$((passed + $(grep -c '^ok ' "$log" || true)))
  failed=$((failed + $(grep -c '^not ok ' "$log" || true)))
  grep -q '^1\.\.' "$log" || failed=$((failed + 1))
}

start=$SECONDS
run_suite "release build" build
if command -v valkey-server >/dev/null; then
  echo "=== end-to-end tests against $(valkey-server --version | cut -d' ' -f1-3)"
  REDIS_SERVER=valkey-server run_bats build tests/e2e tests/faults
fi
if [ "$sanitize" = 1 ]; then
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    run_suite "ASan+UBSan build" build-sanitize -DDLOCK_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
fi
echo "=== Debian package: build, install, run, remove"
if packaging/test-deb.sh; then
  passed=$((passed + 1))
else
  echo "not ok: packaging/test-deb.sh"
  failed=$((failed + 1))
fi
echo "=== finished in $((SECONDS - start)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]

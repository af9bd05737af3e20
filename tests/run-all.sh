#!/usr/bin/env bash
# The README's test command: installs what is missing, builds with warnings as errors, runs
# the unit tests and the bats end-to-end tests (which start their own redis-server), then
# builds again with AddressSanitizer and UndefinedBehaviorSanitizer and runs everything again.
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
  cmake -S . -B "$dir" -DDLOCK_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j"$(nproc)" 2>&1 | grep -Ev '^\[|^-- ' || true
  [ -x "$dir/src/dlock" ] || { echo "build failed"; failed=$((failed + 1)); return; }

  echo "=== $name: unit tests"
  "$dir/tests/dlock_unit_tests" --gtest_brief=1 >"$log" 2>&1 || true
  cat "$log"
  passed=$((passed + $(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\{0,1\}\..*/\1/p' "$log" | head -1 | grep . || echo 0)))
  failed=$((failed + $(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\{0,1\}, listed below.*/\1/p' "$log" | head -1 | grep . || echo 0)))
  grep -q '^\[  PASSED  \]' "$log" || grep -q '^\[  FAILED  \]' "$log" || failed=$((failed + 1))

  echo "=== $name: end-to-end tests (bats)"
  DLOCK_BIN=$PWD/$dir/src/dlock bats --formatter tap tests/e2e | tee "$log" || true
  passed=$((passed + $(grep -c '^ok ' "$log" || true)))
  failed=$((failed + $(grep -c '^not ok ' "$log" || true)))
}

run_suite "release build" build
if [ "$sanitize" = 1 ]; then
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    run_suite "ASan+UBSan build" build-sanitize -DDLOCK_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]

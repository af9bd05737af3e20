#!/usr/bin/env bash
# Checks the style of the tracked sources: clang-format (.clang-format) on src/ and tests/unit/,
# clang-tidy (.clang-tidy) on src/'s .cpp files and the headers they include, with the compile
# commands of BUILD_DIR (default: build; CMake writes compile_commands.json there). Prints one
# line per finding (FILE:LINE:COL: ...) and exits 1 if there is any, or if clang-format or
# clang-tidy is missing (packaging/install-deps.sh test installs them). The .clang-format was
# written with clang-format 14 (Debian 12); another version may break a few lines differently.
# To reformat: git ls-files 'src/*.cpp' 'src/*.hpp' 'tests/unit/*.cpp' 'tests/unit/*.hpp' |
#   xargs clang-format -i
# Usage: tests/check-style.sh [BUILD_DIR]   (JOBS=N: clang-tidy runs, default one per core)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
jobs=${JOBS:-$(nproc)}

for tool in clang-format clang-tidy; do
  if ! command -v "$tool" >/dev/null; then
    echo "not ok: $tool is not installed (packaging/install-deps.sh test installs it)"
    exit 1
  fi
done
if [ ! -f "$build/compile_commands.json" ]; then
  echo "not ok: no $build/compile_commands.json for clang-tidy (configure $build with CMake first)"
  exit 1
fi
echo "$(clang-format --version | sed 's/ (.*//'); $(clang-tidy --version | grep -m1 -o 'LLVM version.*')"

findings=$(mktemp)
trap 'rm -f "$findings"' EXIT

# clang-format: one line per place that is not formatted as .clang-format says.
git ls-files -z 'src/*.cpp' 'src/*.hpp' 'tests/unit/*.cpp' 'tests/unit/*.hpp' |
  xargs -0 clang-format --dry-run -Werror 2>&1 |
  sed -n 's/: error: code should be clang-formatted \[-Wclang-format-violations\]$/: not formatted as .clang-format says (clang-format -i)/p' \
    >>"$findings" || true
formatted=$(wc -l <"$findings")

# clang-tidy: each source of src/ that the build compiles; a header's finding, reported once
# per file that includes it, is printed once. The build's own warnings are the compiler's
# business (-Werror there), not clang-tidy's: -Wno-error keeps them out of its findings.
database=$(realpath "$build/compile_commands.json")
# The build's commands without -DFMT_HEADER_ONLY=1 (the release build compiles fmt into each
# source): fmt's implementation is a system header's, whose findings clang-tidy never shows,
# and parsing it in every source is a fifth of clang-tidy's time.
tidy_dir=$(mktemp -d)
trap 'rm -f "$findings"; rm -rf "$tidy_dir"' EXIT
sed 's/ -DFMT_HEADER_ONLY=1 / /g' "$database" >"$tidy_dir/compile_commands.json"
missing=0
sources=()
while IFS= read -r -d '' file; do
  if grep -qF "\"file\": \"$PWD/$file\"" "$database"; then
    sources+=("$file")
  else
    echo "$file: not in $build/compile_commands.json (configure $build again)" >>"$findings"
    missing=$((missing + 1))
  fi
done < <(git ls-files -z 'src/*.cpp')
printf '%s\0' "${sources[@]}" |
  xargs -0 -n 4 -P "$jobs" clang-tidy -p "$tidy_dir" --quiet --extra-arg=-Wno-error \
    --extra-arg=-Wno-unknown-warning-option 2>/dev/null |
  sed -n "s|^$PWD/||; /^[^ ]*:[0-9]*:[0-9]*: \(warning\|error\): /p" | sort -u >>"$findings" || true

total=$(wc -l <"$findings")
cat "$findings"
echo "style: $total finding(s): clang-format $formatted, clang-tidy $((total - formatted - missing))," \
  "not compiled $missing (${#sources[@]} sources checked by clang-tidy)"
[ "$total" -eq 0 ]

#!/usr/bin/env bash
# Builds the Debian package: an optimised build (-O2, as Debian builds) in build-pkg, then cpack -G DEB.
# Prints the path of the .deb on stdout (progress goes to stderr).
# Usage: packaging/build-deb.sh [BUILD_DIR]      (default: build-pkg in the source tree)
#        packaging/build-deb.sh --configure BUILD_DIR [CMAKE_ARGS...]
#            only configures BUILD_DIR with the package's flags, and CMAKE_ARGS after them
#            (tests/run-all.sh: its release build is the package's, so that the tests run the
#            binary that is packed, and the package costs no build of its own)
#        packaging/build-deb.sh --reuse BUILD_DIR
#            packs a BUILD_DIR configured with --configure (bringing its build up to date)
# Needs: the build dependencies (packaging/install-deps.sh build) and dpkg-dev (dpkg-shlibdeps
# computes the library dependencies, dpkg-buildflags the hardening flags).
#
# The Maintainer field and the changelog's trailer: DLOCK_MAINTAINER="Full Name <address>", or
# DEBFULLNAME and DEBEMAIL as for dch(1); without them, the placeholder in CMakeLists.txt.
# SOURCE_DATE_EPOCH, when set, dates the changelog entry (default: the commit's date).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
mode=all
case ${1:-} in
  --configure | --reuse)
    mode=${1#--}
    [ $# -ge 2 ] || { echo "build-deb.sh: $1 needs a build directory" >&2; exit 64; }
    shift
    ;;
esac
build=${1:-$src/build-pkg}
[ $# -eq 0 ] || shift

if ! command -v dpkg-shlibdeps >/dev/null; then
  echo "build-deb.sh: dpkg-shlibdeps not found; install dpkg-dev" >&2
  exit 69
fi

maintainer=${DLOCK_MAINTAINER:-}
if [ -z "$maintainer" ] && [ -n "${DEBEMAIL:-}" ]; then
  case $DEBEMAIL in
    *'<'*) maintainer=$DEBEMAIL ;; # "Full Name <address>"
    *) maintainer="${DEBFULLNAME:-${NAME:-dlock developers}} <$DEBEMAIL>" ;;
  esac
fi
cmake_args=()
[ -z "$maintainer" ] || cmake_args+=("-DDLOCK_MAINTAINER=$maintainer")

# Debian's hardening flags, as debhelper would pass them: fortify (which needs the optimisation
# of -O2), stack protector, format-security, relro and bindnow; PIE is GCC's
# default. CMake takes CXXFLAGS and LDFLAGS (executables and the TLS module) from the
# environment of a fresh configuration; it ignores CPPFLAGS, so -D_FORTIFY_SOURCE joins
# CXXFLAGS. Run from the source tree, so that -ffile-prefix-map maps it to ".".
export DEB_BUILD_MAINT_OPTIONS="hardening=+all ${DEB_BUILD_MAINT_OPTIONS:-}"
cxxflags=$(cd "$src" && dpkg-buildflags --get CPPFLAGS && dpkg-buildflags --get CXXFLAGS)
ldflags=$(cd "$src" && dpkg-buildflags --get LDFLAGS)

if [ "$mode" = reuse ]; then
  grep -q '^DLOCK_PACKAGE_FLAGS:INTERNAL=1' "$build/CMakeCache.txt" 2>/dev/null || {
    echo "build-deb.sh: $build was not configured by build-deb.sh --configure" >&2
    exit 64
  }
else
  # A fresh configuration, so that the package is built against the libraries installed now.
  rm -f "$build/CMakeCache.txt"
  if [ "$mode" = configure ]; then
    # the caller's arguments last, so that they win; cmake's output for the caller
    CXXFLAGS=${cxxflags//$'\n'/ } LDFLAGS=$ldflags \
      cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLOCK_BUILD_TESTS=OFF \
      -DCMAKE_INSTALL_PREFIX=/usr -DDLOCK_PACKAGE_FLAGS:INTERNAL=1 "${cmake_args[@]}" "$@"
    exit 0
  fi
  CXXFLAGS=${cxxflags//$'\n'/ } LDFLAGS=$ldflags \
    cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLOCK_BUILD_TESTS=OFF \
    -DCMAKE_INSTALL_PREFIX=/usr -DDLOCK_PACKAGE_FLAGS:INTERNAL=1 "${cmake_args[@]}" >&2
fi
grep -E '^(CMAKE_CXX_FLAGS|CMAKE_(EXE|MODULE)_LINKER_FLAGS|DLOCK_MAINTAINER):' \
  "$build/CMakeCache.txt" >&2
cmake --build "$build" -j"$(nproc)" >&2
rm -f "$build"/dlock_*.deb
(cd "$build" && cpack -G DEB) >&2

debs=("$build"/dlock_*.deb)
if [ ! -f "${debs[0]}" ] || [ ${#debs[@]} -ne 1 ]; then
  echo "build-deb.sh: cpack did not produce exactly one dlock_*.deb in $build" >&2
  exit 1
fi
echo "${debs[0]}"

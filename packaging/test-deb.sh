#!/usr/bin/env bash
# Builds the .deb, checks it with lintian (no error or warning allowed), installs it with
# apt-get, checks the installed dlock against a throwaway redis-server on a unix socket, checks
# the man page renders, then removes the package.
# Exits non-zero on any failure. Runs as root, or with sudo.
# Usage: packaging/test-deb.sh [BUILD_DIR]
#        packaging/test-deb.sh --reuse BUILD_DIR   (packs a build made with build-deb.sh --configure)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive

fail() {
  echo "test-deb.sh: FAIL: $*" >&2
  exit 1
}
step() { echo "== $*" >&2; }

tmp=$(mktemp -d)
redis_pid=
installed=0
cleanup() {
  local rc=$?
  if [ -n "$redis_pid" ]; then
    kill "$redis_pid" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "$redis_pid" 2>/dev/null || break
      sleep 0.1
    done
  fi
  if [ "$installed" = 1 ]; then
    "${sudo[@]}" apt-get remove -y -qq dlock >/dev/null 2>&1 || true
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT

for tool in redis-server redis-cli man lintian; do
  command -v "$tool" >/dev/null || fail "$tool is needed (packaging/install-deps.sh test)"
done
if [ -e /usr/bin/dlock ] && dpkg-query -W -f='${Status}' dlock 2>/dev/null | grep -q 'install ok installed'; then
  fail "a dlock package is already installed; remove it first (apt-get remove dlock)"
fi

step "building the package"
if [ "${1:-}" = --reuse ]; then
  deb=$("$src/packaging/build-deb.sh" --reuse "${2:?--reuse needs a build directory}")
else
  deb=$("$src/packaging/build-deb.sh" "${1:-$src/build-pkg}")
fi
[ -f "$deb" ] || fail "build-deb.sh printed no .deb"
echo "$deb" >&2
dpkg-deb --info "$deb" >&2
dpkg-deb --contents "$deb" >&2
depends=$(dpkg-deb --field "$deb" Depends)
[[ $depends == *libc6* ]] || fail "Depends lacks libc6: $depends"
# dlock links fmt and libstdc++ in (DLOCK_LINK_STATIC, for a cheap start), and hiredis where its
# -dev package ships a static archive (Debian's do): the binary loads no C++ library.
dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/bin/dlock >"$tmp/dlock"
needed=$(readelf -d "$tmp/dlock" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
for lib in $needed; do
  case $lib in libc.so.* | libm.so.* | ld-linux* | libhiredi*) ;;
    *) fail "/usr/bin/dlock loads $lib, which should be linked in (NEEDED: $needed)" ;;
  esac
done
if dpkg-deb --contents "$deb" | grep -q 'dlock-tls.so'; then
  [[ $depends == *libhiredi* ]] || fail "Depends lacks libhiredis (or libhiredict) for the TLS module: $depends"
fi
[[ $depends == *libpq5* ]] || fail "Depends lacks libpq5 (dlopened for postgres://): $depends"
[[ $depends == *libmariadb3* ]] || fail "Depends lacks libmariadb3 (dlopened for mysql://): $depends"
[[ $depends == *libcurl4* ]] || fail "Depends lacks libcurl4 (dlopened for etcd://): $depends"
[ "$(dpkg-deb --field "$deb" Recommends)" = redis-tools ] || fail "Recommends is not redis-tools"

step "lintian"
# Errors and warnings fail the test. Info tags are shown too; the ones for the hardening
# and the stripping that the package promises fail it as well.
rc=0
report=$(lintian --fail-on error,warning --display-info "$deb" 2>&1) || rc=$?
[ -z "$report" ] || echo "$report" >&2
[ "$rc" = 0 ] || fail "lintian reports errors or warnings on $deb"
! grep -qE ': (hardening-no-[a-z-]+|binary-has-unneeded-section)( |$)' <<<"$report" \
  || fail "the binaries lack hardening or keep unneeded sections (lintian, above)"

step "installing $deb"
# apt-get needs a path with a slash to treat the argument as a file.
case $deb in /*) ;; *) deb=./$deb ;; esac
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "$deb" >&2
installed=1
dpkg-query -W -f='${Status}' dlock | grep -q 'install ok installed' || fail "dlock is not installed"

step "dlock --version"
version=$(/usr/bin/dlock --version) || fail "/usr/bin/dlock --version failed"
echo "$version" >&2
[[ $version == "dlock "* ]] || fail "unexpected --version output: $version"
# A TLS build must find its dlock-tls.so module at the installed path.
if [[ $version != *"TLS: no"* ]]; then
  [[ $version == *"TLS: OpenSSL"* ]] || fail "the installed TLS module does not load: $version"
fi

step "the installed files"
for f in /usr/share/man/man1/dlock.1.gz /usr/share/bash-completion/completions/dlock \
  /usr/share/zsh/vendor-completions/_dlock /usr/share/fish/vendor_completions.d/dlock.fish \
  /usr/share/doc/dlock/copyright /usr/share/doc/dlock/changelog.gz; do
  [ -s "$f" ] || fail "$f is missing"
done

step "dlock run against a throwaway redis-server"
redis-server --port 0 --unixsocket "$tmp/redis.sock" --unixsocketperm 700 --save '' \
  --appendonly no --dir "$tmp" --daemonize yes --pidfile "$tmp/redis.pid" \
  --logfile "$tmp/redis.log"
for _ in $(seq 100); do
  [ -s "$tmp/redis.pid" ] && redis-cli -s "$tmp/redis.sock" ping 2>/dev/null | grep -q PONG && break
  sleep 0.05
done
redis_pid=$(cat "$tmp/redis.pid") || fail "redis-server did not start: $(cat "$tmp/redis.log")"
first=$(/usr/bin/dlock --url "unix://$tmp/redis.sock" run -k pkg-test -- sh -c 'echo "$DLOCK_FENCING_TOKEN"') \
  || fail "dlock run failed ($?)"
out=$(/usr/bin/dlock --url "unix://$tmp/redis.sock" run -k pkg-test -- sh -c 'echo "$DLOCK_KEY"') \
  || fail "dlock run failed ($?)"
[ "$out" = pkg-test ] || fail "the command saw DLOCK_KEY=$out"
[ "$(redis-cli -s "$tmp/redis.sock" get 'dlock:{pkg-test}:fence')" = $((first + 1)) ] \
  || fail "the fencing counter did not count the second holder (first token $first)"
rc=0
/usr/bin/dlock --url "unix://$tmp/redis.sock" status pkg-test >/dev/null || rc=$?
[ "$rc" = 1 ] || fail "dlock status of a free lock gave $rc, not 1"

step "man page"
rendered=$(MANWIDTH=80 man -l /usr/share/man/man1/dlock.1.gz 2>"$tmp/man.err") || fail "man -l failed: $(cat "$tmp/man.err")"
[ ! -s "$tmp/man.err" ] || fail "man -l wrote to stderr: $(cat "$tmp/man.err")"
for section in NAME SYNOPSIS DESCRIPTION 'EXIT STATUS' ENVIRONMENT 'SEE ALSO'; do
  grep -q "^$section" <<<"$rendered" || fail "the installed man page lacks $section"
done
grep -q "dlock $(sed -n 's/^dlock \([^ ]*\).*/\1/p' <<<"$version")" <<<"$rendered" \
  || fail "the installed man page does not carry the version of the binary"
if command -v mandb >/dev/null; then
  man -w dlock >/dev/null 2>&1 || echo "note: man -w dlock did not find the page (mandb not run?)" >&2
fi

step "removing the package"
"${sudo[@]}" apt-get remove -y -qq dlock >&2
installed=0
[ ! -e /usr/bin/dlock ] || fail "/usr/bin/dlock is still there after apt-get remove"
[ ! -e /usr/share/man/man1/dlock.1.gz ] || fail "the man page is still there after apt-get remove"

echo "test-deb.sh: OK ($deb)"

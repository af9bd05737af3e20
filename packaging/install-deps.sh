#!/usr/bin/env bash
# Installs, with apt-get, whatever dlock needs to build and test that is not installed yet.
# Usage: packaging/install-deps.sh [build|test|bench]   (each includes the ones before it)
#
# hiredis: TLS (rediss://) needs the hiredis >= 1.0 API with hiredis_ssl. Debian 13 and
# Ubuntu 24.04 ship it as libhiredis-dev; Debian 12 ships hiredis 0.14 without TLS, so on
# Debian 12 this script enables bookworm-backports and installs libhiredict-shims-dev (the
# same API, from the hiredict fork). Set DLOCK_NO_BACKPORTS=1 to build without TLS instead.
# Valkey 8 (also from bookworm-backports there) is installed for the test suite when available.
set -euo pipefail

level=${1:-test}
. /etc/os-release

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed'; }
available() { [ -n "$(apt-cache policy "$1" 2>/dev/null | sed -n 's/ *Candidate: //p' | grep -v none)" ]; }

updated=0
apt_update() {
  if [ "$updated" = 0 ]; then
    "${sudo[@]}" apt-get update -qq
    updated=1
  fi
}

hiredis=(libhiredis-dev)
if [ "${ID:-}" = debian ] && [ "${VERSION_CODENAME:-}" = bookworm ] && [ "${DLOCK_NO_BACKPORTS:-0}" != 1 ]; then
  if ! installed libhiredict-shims-dev; then
    if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
      echo "enabling bookworm-backports for the hiredis 1.x API with TLS (libhiredict-shims-dev)" >&2
      echo 'deb http://deb.debian.org/debian bookworm-backports main' |
        "${sudo[@]}" tee /etc/apt/sources.list.d/dlock-bookworm-backports.list >/dev/null
      updated=0
    fi
    apt_update
  fi
  if installed libhiredict-shims-dev || available libhiredict-shims-dev; then
    hiredis=(libhiredict-shims-dev)
  else
    echo "bookworm-backports unreachable: building without TLS (hiredis 0.14)" >&2
  fi
fi

build=(g++ cmake make pkg-config git "${hiredis[@]}" libssl-dev libcli11-dev libfmt-dev libpq-dev
  libmariadb-dev libcurl4-openssl-dev nlohmann-json3-dev libzookeeper-mt-dev)
test=(libgtest-dev dpkg-dev redis-server redis-tools bats bats-assert bats-support procps util-linux
  python3 python3-prometheus-client openssl man-db bc lintian tmux iptables iproute2 parallel
  postgresql pgbouncer mariadb-server mariadb-client etcd-server etcd-client zookeeper
  default-jre-headless default-jdk-headless libcurator-recipes-java strace clang-format clang-tidy)
bench=(hyperfine etcd-server etcd-client util-linux time)

wanted=("${build[@]}")
case $level in
  build) ;;
  test) wanted+=("${test[@]}") ;;
  bench) wanted+=("${test[@]}" "${bench[@]}") ;;
  *) echo "usage: $0 [build|test|bench]" >&2; exit 64 ;;
esac

missing=()
for pkg in "${wanted[@]}"; do
  installed "$pkg" || missing+=("$pkg")
done
# Valkey is optional: the suite runs against it too when it is installed.
if [ "$level" != build ] && ! installed valkey-server; then
  apt_update
  available valkey-server && missing+=(valkey-server)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]}" >&2
apt_update
# policy-rc.d keeps the packaged redis-server, valkey, etcd, postgresql, pgbouncer and mariadb
# from starting services (the tests start servers of their own).
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee /usr/sbin/policy-rc.d >/dev/null
  "${sudo[@]}" chmod +x /usr/sbin/policy-rc.d
  trap '"${sudo[@]}" rm -f /usr/sbin/policy-rc.d' EXIT
fi
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

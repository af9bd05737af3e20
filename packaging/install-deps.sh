#!/usr/bin/env bash
# Installs, with apt-get, whatever dlock needs to build and test that is not installed yet.
# Usage: packaging/install-deps.sh [build|test|bench]   (each includes the ones before it)
set -euo pipefail

level=${1:-test}
build=(g++ cmake make pkg-config git libhiredis-dev libcli11-dev libfmt-dev)
test=(libgtest-dev redis-server redis-tools bats bats-assert bats-support procps util-linux python3 man-db)
bench=(hyperfine etcd-server etcd-client util-linux)

wanted=("${build[@]}")
case $level in
  build) ;;
  test) wanted+=("${test[@]}") ;;
  bench) wanted+=("${test[@]}" "${bench[@]}") ;;
  *) echo "usage: $0 [build|test|bench]" >&2; exit 64 ;;
esac

missing=()
for pkg in "${wanted[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed'; then
    missing+=("$pkg")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  sudo=(sudo)
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
# policy-rc.d keeps the packaged redis-server and etcd from starting system-wide services.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee /usr/sbin/policy-rc.d >/dev/null
  "${sudo[@]}" chmod +x /usr/sbin/policy-rc.d
  trap '"${sudo[@]}" rm -f /usr/sbin/policy-rc.d' EXIT
fi
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

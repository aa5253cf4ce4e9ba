#!/usr/bin/env bash
# The runtime images hold every shared library their binaries load: for each binary a Dockerfile
# copies into its runtime stage, every library `ldd` resolves on this (Debian 12) build machine
# comes from a package that stage installs, or from one the debian:12-slim base has (the C and
# C++ runtimes, which apt itself needs, and the packages of priority "required"). The images'
# `--help` steps would catch a missing one too, but only in a docker build, which CI does not
# run: the aggregator's image lacked tcmalloc once the aggregator linked it.
# Usage: docker_libs_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
if ! command -v dpkg-query > /dev/null; then
  echo "not a Debian machine (no dpkg): the images' package lists cannot be checked here"
  exit 77
fi
src=$1
build=$2
status=0

# The packages a Dockerfile's runtime stage (after its last FROM) installs with apt-get.
runtime_packages() {
  awk '/^FROM /{stage=""} {stage = stage "\n" $0} END {print stage}' "$1" |
    awk '/apt-get install/{on=1; next} /rm -rf \/var\/lib\/apt/{on=0} on' |
    tr -d '\\&' | tr -s ' \t' '\n' | grep -E '^[a-z0-9][a-z0-9.+-]+$' | sort -u
}

base_packages() {
  printf '%s\n' libc6 libgcc-s1 libstdc++6
  dpkg-query -W -f='${Package} ${Priority}\n' | awk '$2 == "required" {print $1}' | sed 's/:.*//'
}

# "<package> <path>" for every library file that the binaries load, by its path as ldd gives it
# and as resolved (Debian 12 ships some under /lib, some under /usr/lib); one dpkg call for all.
declare -A owner
index_owners() {
  local paths=()
  for bin in "$@"; do
    [ -x "$build/$bin" ] || continue
    while read -r path; do
      paths+=("$path" "$(readlink -f "$path")")
    done < <(ldd "$build/$bin" | awk '$2 == "=>" && $3 != "not" {print $3}')
  done
  [ "${#paths[@]}" -gt 0 ] || return 0
  while IFS= read -r line; do
    owner[${line#*: }]=${line%%:*}
  done < <(dpkg -S "${paths[@]}" 2> /dev/null | grep -v '^diversion' || true)
}

check() {  # dockerfile binary...
  local dockerfile=$src/deploy/docker/$1
  shift
  local listed base
  listed=$(runtime_packages "$dockerfile")
  base=$(base_packages)
  if [ -z "$listed" ]; then
    echo "FAIL: no apt-get install found in the runtime stage of $dockerfile" >&2
    status=1
    return
  fi
  for bin in "$@"; do
    if [ ! -x "$build/$bin" ]; then
      echo "FAIL: $build/$bin is not built" >&2
      status=1
      continue
    fi
    # "libfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x...)"; the loader and vdso have no "=>".
    while read -r lib path; do
      if [ "$path" = "not" ]; then
        echo "FAIL: $bin: $lib not found on this machine" >&2
        status=1
        continue
      fi
      local pkg=${owner[$path]:-${owner[$(readlink -f "$path")]:-}}
      if [ -z "$pkg" ]; then
        echo "FAIL: $bin: $lib ($path) belongs to no Debian package" >&2
        status=1
      elif ! grep -qx "$pkg" <<< "$listed" && ! grep -qx "$pkg" <<< "$base"; then
        echo "FAIL: $bin needs $lib from $pkg, which $(basename "$dockerfile")'s runtime stage does not install" >&2
        status=1
      fi
    done < <(ldd "$build/$bin" | awk '$2 == "=>" {print $1, $3}')
  done
}

index_owners aggregator/ncclwatch-aggregator aggregator/ncclwatch agent/ncclwatch-agent \
  agent/csi/ncclwatch-csi-driver
check aggregator.Dockerfile aggregator/ncclwatch-aggregator aggregator/ncclwatch
check agent.Dockerfile agent/ncclwatch-agent agent/csi/ncclwatch-csi-driver
[ "$status" = 0 ] && echo "every library of the images' binaries is installed in their runtime stage"
exit "$status"

#!/usr/bin/env bash
# The runtime images hold every shared library their binaries load: for each binary a Dockerfile
# copies from the build tree into its runtime stage, every library `ldd` resolves on this (Debian 12) build machine
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
failures=0

# A Dockerfile's runtime stage: the part after its last FROM.
runtime_stage() {
  awk '/^FROM /{stage=""} {stage = stage "\n" $0} END {print stage}' "$1"
}

# The packages a runtime stage installs with apt-get.
runtime_packages() {
  awk '/apt-get install/{on=1; next} /rm -rf \/var\/lib\/apt/{on=0} on' <<< "$1" |
    tr -d '\\&' | tr -s ' \t' '\n' | grep -E '^[a-z0-9][a-z0-9.+-]+$' | sort -u
}

# The binaries a runtime stage copies from the build tree, relative to it.
runtime_binaries() {
  sed -n 's|^COPY --from=build /src/build/\([^ ]*\) .*|\1|p' <<< "$1"
}

base_packages() {
  printf '%s\n' libc6 libgcc-s1 libstdc++6
  dpkg-query -W -f='${Package} ${Priority}\n' | awk '$2 == "required" {print $1}' | sed 's/:.*//'
}
base=$(base_packages)

check() {  # dockerfile
  local dockerfile=$src/deploy/docker/$1
  local stage listed bins before=$failures
  stage=$(runtime_stage "$dockerfile")
  listed=$(runtime_packages "$stage")
  mapfile -t bins < <(runtime_binaries "$stage")
  if [ -z "$listed" ] || [ "${#bins[@]}" = 0 ]; then
    echo "FAIL: no apt-get install or no binary copied in the runtime stage of $dockerfile" >&2
    failures=$((failures + 1))
    return
  fi
  # "<binary> <library> <path>" for every library the binaries load ("not" for a path ldd did not
  # find; the loader and the vdso have no "=>").
  local loads="" bin
  for bin in "${bins[@]}"; do
    if [ ! -x "$build/$bin" ]; then
      echo "FAIL: $build/$bin is not built" >&2
      failures=$((failures + 1))
      continue
    fi
    loads+=$(ldd "$build/$bin" | awk -v bin="$bin" '$2 == "=>" {print bin, $1, $3}')$'\n'
  done
  # Each library's package, by its path as ldd gives it and as resolved (Debian 12 ships some
  # under /lib, some under /usr/lib): one dpkg call for all.
  local -A owner=()
  local paths=() line
  while read -r _ _ path; do
    [ -n "$path" ] && [ "$path" != "not" ] && paths+=("$path" "$(readlink -f "$path")")
  done <<< "$loads"
  while IFS= read -r line; do
    owner[${line#*: }]=${line%%:*}
  done < <(dpkg -S "${paths[@]}" 2> /dev/null | grep -v '^diversion' || true)
  local lib path pkg
  while read -r bin lib path; do
    [ -n "$bin" ] || continue
    if [ "$path" = "not" ]; then
      echo "FAIL: $bin: $lib not found on this machine" >&2
      failures=$((failures + 1))
      continue
    fi
    pkg=${owner[$path]:-${owner[$(readlink -f "$path")]:-}}
    if [ -z "$pkg" ]; then
      echo "FAIL: $bin: $lib ($path) belongs to no Debian package" >&2
      failures=$((failures + 1))
    elif ! grep -qx "$pkg" <<< "$listed" && ! grep -qx "$pkg" <<< "$base"; then
      echo "FAIL: $bin needs $lib from $pkg, which $1's runtime stage does not install" >&2
      failures=$((failures + 1))
    fi
  done <<< "$loads"
  if [ "$failures" = "$before" ]; then echo "$1: ${bins[*]}: every library installed"; fi
}

check aggregator.Dockerfile
check agent.Dockerfile
[ "$failures" = 0 ]

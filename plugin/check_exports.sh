#!/usr/bin/env bash
# Checks the three files of the built plugin (docs/isolation.md):
#   LOADER  libnccl-profiler-ncclwatch.so: exports exactly ncclProfiler_v4 to _v7 (48-byte data
#           objects), needs nothing but libc, stays mapped after dlclose (NODELETE);
#   ENGINE  libncclwatch-engine.so: exports only ncclwatch_engine_get_api, and lists
#           libncclwatch-hostlibc.so as its first dependency (before the libc it interposes);
#   HOSTLIBC libncclwatch-hostlibc.so: needs no library at all.
# Usage: check_exports.sh LOADER ENGINE HOSTLIBC
set -euo pipefail
if [ $# -ne 3 ]; then sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2; fi
loader=$1 engine=$2 hostlibc=$3
fail() { echo "FAIL: $*"; exit 1; }

exported=$(nm -D --defined-only "$loader" | awk '{print $3}' | sort)
expected=$'ncclProfiler_v4\nncclProfiler_v5\nncclProfiler_v6\nncclProfiler_v7'
if [ "$exported" != "$expected" ]; then
  echo "FAIL: $loader exports:"; echo "$exported" | sed 's/^/  /'
  echo "expected exactly:"; echo "$expected" | sed 's/^/  /'
  exit 1
fi
for sym in ncclProfiler_v4 ncclProfiler_v5 ncclProfiler_v6 ncclProfiler_v7; do
  # A data object ('D' in .data), as NCCL's dlsym expects, 48 bytes.
  line=$(nm -D -S --defined-only "$loader" | awk -v s="$sym" '$4 == s')
  size=$((16#$(echo "$line" | awk '{print $2}')))
  type=$(echo "$line" | awk '{print $3}')
  [ "$type" = "D" ] && [ "$size" -eq 48 ] || fail "$sym is '$line' (want a 48-byte D)"
done
readelf -d "$loader" | grep -q 'NODELETE' || fail "$loader lacks DF_1_NODELETE"
needed=$(readelf -d "$loader" | awk '/NEEDED/ {print $5}' | tr -d '[]' | grep -v '^libc\.so\.6$' |
  grep -v -E '^lib(t|a|ub)san\.so' || true)
[ -z "$needed" ] || fail "$loader needs more than libc: $needed"

[ "$(nm -D --defined-only "$engine" | awk '{print $3}')" = "ncclwatch_engine_get_api" ] ||
  fail "$engine exports: $(nm -D --defined-only "$engine" | awk '{print $3}' | tr '\n' ' ')"
first=$(readelf -d "$engine" | awk '/NEEDED/ {print $5; exit}' | tr -d '[]')
[ "$first" = "libncclwatch-hostlibc.so" ] || fail "$engine's first dependency is $first"

[ -z "$(readelf -d "$hostlibc" | grep NEEDED || true)" ] || fail "$hostlibc needs a library"
echo "ok: the loader exports only ncclProfiler_v4 to v7 (48-byte data objects), needs only libc," \
  "NODELETE; the engine exports only its interface; libncclwatch-hostlibc.so needs nothing"

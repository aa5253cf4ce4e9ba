#!/usr/bin/env bash
# Checks that the built plugin exports exactly ncclProfiler_v4 to _v7 and nothing else, and
# that it stays mapped after dlclose (NODELETE). Usage: check_exports.sh path/to/plugin.so
set -euo pipefail
so="$1"
exported=$(nm -D --defined-only "$so" | awk '{print $3}' | sort)
expected=$'ncclProfiler_v4\nncclProfiler_v5\nncclProfiler_v6\nncclProfiler_v7'
if [ "$exported" != "$expected" ]; then
  echo "FAIL: $so exports:"; echo "$exported" | sed 's/^/  /'
  echo "expected exactly:"; echo "$expected" | sed 's/^/  /'
  exit 1
fi
for sym in ncclProfiler_v4 ncclProfiler_v5 ncclProfiler_v6 ncclProfiler_v7; do
  # A data object ('D' in .data), as NCCL's dlsym expects, 48 bytes.
  line=$(nm -D -S --defined-only "$so" | awk -v s="$sym" '$4 == s')
  size=$((16#$(echo "$line" | awk '{print $2}')))
  type=$(echo "$line" | awk '{print $3}')
  [ "$type" = "D" ] && [ "$size" -eq 48 ] || { echo "FAIL: $sym is '$line' (want a 48-byte D)"; exit 1; }
done
readelf -d "$so" | grep -q 'NODELETE' || { echo "FAIL: $so lacks DF_1_NODELETE"; exit 1; }
echo "ok: $so exports only ncclProfiler_v4 to v7 (48-byte data objects), NODELETE set"

#!/bin/sh
# Usage: bundle-plugin.sh PLUGIN.so OUTDIR
#
# Makes the NCCL profiler plugin loadable inside any training container, whatever it ships.
# PLUGIN.so is the loader (libnccl-profiler-ncclwatch.so); the engine and the host-libc library
# beside it are copied with it (docs/isolation.md), and so is every shared library the engine
# needs (gRPC, protobuf, abseil, OpenSSL, ..., and the C++ runtime: the engine runs in a link-map
# namespace of its own, so its libstdc++ may be newer than the training process's). Each gets a
# RUNPATH of $ORIGIN, so that they find one another there. Left out are libc and its parts, which
# must match the system's dynamic loader. Run in the image build, where the libraries are
# installed.
set -eu
plugin=$1
out=$2
dir=$(dirname "$plugin")
engine=$dir/libncclwatch-engine.so
mkdir -p "$out"
for f in "$plugin" "$engine" "$dir/libncclwatch-hostlibc.so"; do
  [ -f "$f" ] || { echo "bundle-plugin: missing $f (build the nccl-profiler-ncclwatch target)" >&2; exit 1; }
  cp "$f" "$out/"
done

ldd "$engine" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | while read -r soname path; do
  case "$soname" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|libncclwatch-*)
      continue ;;
  esac
  cp -L "$path" "$out/$soname"
done
for lib in "$out"/*.so*; do
  chmod 0644 "$lib"
  patchelf --set-rpath '$ORIGIN' "$lib"
done

# Every dependency must now resolve inside OUTDIR, or to libc and its parts.
stray=$(ldd "$out/libncclwatch-engine.so" | awk -v dir="$out/" '
  /not found/ { print; next }
  $2 == "=>" && $3 ~ /^\// && index($3, dir) != 1 &&
    $1 !~ /^(libc|libm|libdl|libpthread|librt)\.so/ { print }')
if [ -n "$stray" ]; then
  echo "bundle-plugin: unbundled dependencies:" >&2
  echo "$stray" >&2
  exit 1
fi
echo "bundle-plugin: $(ls "$out" | wc -l) files in $out"

#!/bin/sh
# Usage: bundle-plugin.sh PLUGIN.so OUTDIR
#
# Makes the NCCL profiler plugin loadable inside any training container, whatever it ships:
# copies the plugin and every shared library it needs (gRPC, protobuf, abseil, OpenSSL, ...) into
# OUTDIR and gives each a RUNPATH of $ORIGIN, so that they find one another there. Left out are
# the C and C++ runtimes, which every process that runs NCCL has already loaded (a second copy
# could not coexist with them). Run in the image build, where the libraries are installed.
set -eu
plugin=$1
out=$2
mkdir -p "$out"
cp "$plugin" "$out/"

ldd "$plugin" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | while read -r soname path; do
  case "$soname" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|libstdc++.so.*|libgcc_s.so.*)
      continue ;;
  esac
  cp -L "$path" "$out/$soname"
done
for lib in "$out"/*.so*; do
  chmod 0644 "$lib"
  patchelf --set-rpath '$ORIGIN' "$lib"
done

# Every dependency must now resolve inside OUTDIR, or to the runtimes left out above.
stray=$(ldd "$out/$(basename "$plugin")" | awk -v dir="$out/" '
  /not found/ { print; next }
  $2 == "=>" && $3 ~ /^\// && index($3, dir) != 1 &&
    $1 !~ /^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s)\.so/ { print }')
if [ -n "$stray" ]; then
  echo "bundle-plugin: unbundled dependencies:" >&2
  echo "$stray" >&2
  exit 1
fi
echo "bundle-plugin: $(ls "$out" | wc -l) files in $out"

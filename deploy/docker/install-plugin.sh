#!/bin/sh
# Usage: ncclwatch-install-plugin DEST
#
# Run by the agent DaemonSet's init container: copies the plugin and its libraries from the image
# (/usr/lib/ncclwatch, or $NCCLWATCH_PLUGIN_SRC) into DEST, the node's hostPath directory that
# training pods mount. Each file is written under a temporary name and renamed into place, so a
# training process that has the previous version mapped keeps its (unchanged) copy: overwriting a
# mapped library in place would crash it. Unchanged files are left alone.
set -eu
src=${NCCLWATCH_PLUGIN_SRC:-/usr/lib/ncclwatch}
dest=${1:?usage: ncclwatch-install-plugin DEST}
[ -d "$dest" ] || { echo "ncclwatch-install-plugin: $dest is not a directory" >&2; exit 1; }

tmp=""
trap 'if [ -n "$tmp" ]; then rm -f "$tmp"; fi' EXIT
copied=0
kept=0
for f in "$src"/*; do
  name=$(basename "$f")
  if cmp -s "$f" "$dest/$name"; then
    kept=$((kept + 1))
    continue
  fi
  tmp="$dest/.$name.tmp.$$"
  cp "$f" "$tmp"
  chmod 0644 "$tmp"
  mv -f "$tmp" "$dest/$name"
  tmp=""
  copied=$((copied + 1))
done
echo "ncclwatch-install-plugin: $copied files installed, $kept unchanged, in $dest"

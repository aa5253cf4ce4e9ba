#!/usr/bin/env bash
# Runs the README's "Running it by hand" block as written -- extracted from README.md at run
# time, not copied -- from the repository root, in a process group of its own, and checks that a
# finding comes out: `ncclwatch stragglers` names the slow GPU, and /federate has its series. Every process the block started is stopped at the end. Takes the default ports
# (9470-9472) and /tmp/ncclwatch, as the block does.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
block=$(awk '/^## Running it by hand/ {on = 1; next}
             on && /^```sh$/ {inside = 1; next}
             inside && /^```$/ {exit}
             inside {print}' README.md)
if [ -z "$block" ]; then
  echo "by_hand_test: README.md has no sh block under '## Running it by hand'" >&2
  exit 1
fi
rm -rf /tmp/ncclwatch
out=$(mktemp)
trap 'rm -f "$out"' EXIT
setsid bash -c "set -x; $block" >"$out" 2>&1 &
group=$!
# A deadline, not a synchronisation: the block ends by itself once its questions are answered.
# (The watchdog's sleep goes with it, and holds none of this test's output open.)
(
  trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
  sleep 180 &
  sleeper=$!
  wait "$sleeper" && kill -TERM -- "-$group" 2>/dev/null
) >/dev/null 2>&1 &
watchdog=$!
wait "$group"
kill -TERM "$watchdog" 2>/dev/null
wait "$watchdog" 2>/dev/null
kill -TERM -- "-$group" 2>/dev/null  # the daemons and the job it left in the background
for _ in 1 2 3 4 5 6 7 8 9 10; do
  kill -0 -- "-$group" 2>/dev/null || break
  sleep 0.5  # give them their graceful stop; then nothing is left
done
kill -KILL -- "-$group" 2>/dev/null
rm -rf /tmp/ncclwatch
fail=0
check() {  # what, pattern
  if ! grep -qE -- "$2" "$out"; then
    echo "by_hand_test: $1: no line matching '$2' in the block's output" >&2
    fail=1
  fi
}
check "the CLI names the slow GPU" '^Root cause: rank 5, GPU5 on node node-a'
check "/federate has the straggler series, with the training's rank" '^ncclwatch_straggler\{.*,rank="5",.*global_rank="5"'
if [ "$fail" != 0 ]; then
  echo "---- the block's output" >&2
  cat "$out" >&2
  exit 1
fi
echo "by_hand_test: the README's block found the slow GPU"

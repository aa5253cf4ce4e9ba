#!/usr/bin/env bash
# NCCLWATCH_CHAIN_PLUGIN (docs/plugin-chaining.md): simjob drives ncclwatch with the invariant-
# checking trace plugin chained behind it, and both must see what each would see alone.
#
# Usage: simjob_chain_test.sh SIMJOB NCCLWATCH_PLUGIN_SO TRACE_PLUGIN_SO TRACE_PLUGIN_V5_SO
#
# For every ABI version simjob (NCCL) speaks with ncclwatch (5-7) and both trace plugins (one with
# ncclProfiler_v7, one with nothing newer than _v5, as NCCL Inspector): the chained trace plugin
# reports no violation (its parents are its own handles, of the right type; every start stopped;
# nothing its mask does not ask for) and the same event counts as when it is NCCL's only plugin
# (at the version NCCL would then speak with it); ncclwatch writes the same operations
# (NCCLWATCH_DUMP_DIR, timestamps aside) as when it runs alone. Then: a Megatron-style 3D job (six
# communicators a rank, pipeline Send/Recv) likewise; a trace plugin asking for
# collectives only gets no kernel channels although ncclwatch asks for them, and what cannot be
# chained (ncclwatch itself, a missing file) is said once and ncclwatch runs alone.
set -euo pipefail

if [[ $# -ne 4 ]]; then
  echo "usage: $0 SIMJOB NCCLWATCH_PLUGIN_SO TRACE_PLUGIN_SO TRACE_PLUGIN_V5_SO" >&2
  exit 2
fi
SIMJOB=$1
NCCLWATCH=$2
TRACE7=$3
TRACE5=$4
for f in "$SIMJOB" "$NCCLWATCH" "$TRACE7" "$TRACE5"; do
  [[ -f "$f" ]] || { echo "simjob_chain_test: no such file: $f" >&2; exit 2; }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/simjob_chain_test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
CASE=setup

fail() {
  echo "simjob_chain_test: FAIL [$CASE]: $*" >&2
  for f in "$WORK/$CASE".*; do
    [[ -f "$f" ]] || continue
    echo "--- $f:" >&2
    head -c 4000 "$f" >&2
  done
  exit 1
}

# counts TRACE_FILE: each rank's event counts and checks, one line per rank, sorted.
counts() {
  sed -E 's/.*(rank=[0-9]+).*( GroupApi=.* unstopped=[0-9]+).*( violations=[0-9]+).*/\1\2\3/' "$1" |
    sort
}

# ops DUMP_DIR: ncclwatch's operations as written offline, without the moment and the process.
ops() {
  cat "$1"/*.log | sed -E 's/"dump_timestamp_us":[0-9]+//; s/"pid":[0-9]+//' | sort
}

# simjob NAME ABI PLUGIN [VAR=VALUE...]: one 2 nodes x 2 ranks job of 3 iterations, 2 channels,
# NCCL speaking ABI version ABI with PLUGIN (JOB: the job's own simjob arguments).
JOB=(--nodes 2 --ranks-per-node 2 --iterations 3 --channels 2)
simjob() {
  local name=$1 abi=$2 plugin=$3
  shift 3
  mkdir -p "$WORK/$name.dump"
  if ! env "$@" SIMJOB_TRACE_OUT="$WORK/$name.trace" NCCLWATCH_DUMP_DIR="$WORK/$name.dump" \
      NCCLWATCH_FINALIZE_TIMEOUT_MS=200 NCCLWATCH_AGENT_ADDR="unix://$WORK/no-agent.sock" \
      "$SIMJOB" --plugin "$plugin" "${JOB[@]}" --abi "$abi" --verbose >"$WORK/$name.log" 2>&1; then
    CASE=$name
    fail "simjob exited with status $?"
  fi
}

for abi in 4 5 6 7; do
  simjob "alone-ncclwatch-abi$abi" "$abi" "$NCCLWATCH"
done
for abi in 5 6 7; do
  for child in 7 5; do
    trace=$TRACE7
    [[ $child == 5 ]] && trace=$TRACE5
    CASE="abi$abi-child-v$child"
    alone_abi=$((abi < child ? abi : child))
    simjob "$CASE.alone" "$alone_abi" "$trace"
    simjob "$CASE" "$abi" "$NCCLWATCH" NCCLWATCH_CHAIN_PLUGIN="$trace"
    grep -q "chained profiler plugin $trace (ABI v$child)" "$WORK/$CASE.log" ||
      fail "ncclwatch did not say it chained $trace"
    [[ $(wc -l <"$WORK/$CASE.trace") == 4 ]] || fail "expected 4 trace lines"
    grep -q " violations=0 " "$WORK/$CASE.trace" || fail "violations"
    ! grep -v " violations=0 " "$WORK/$CASE.trace" >/dev/null || fail "violations"
    [[ "$(counts "$WORK/$CASE.trace")" == "$(counts "$WORK/$CASE.alone.trace")" ]] ||
      fail "chained counts differ from alone: $(counts "$WORK/$CASE.trace" | head -1) vs \
$(counts "$WORK/$CASE.alone.trace" | head -1)"
    [[ "$(ops "$WORK/$CASE.dump")" == "$(ops "$WORK/alone-ncclwatch-abi$abi.dump")" ]] ||
      fail "ncclwatch's operations differ from when it runs alone"
    [[ $(ops "$WORK/$CASE.dump" | wc -l) == 60 ]] || fail "expected 60 operations (15 a rank)"
  done
done

# A Megatron-style 3D job (TP x PP x DP over 4 nodes: six communicators a rank, pipeline Send/Recv):
# the same, through v7 with the v5-only plugin.
JOB=(--layout=megatron --nodes=4 --ranks-per-node=2 --iterations 2)
CASE=megatron
simjob "$CASE.alone" 5 "$TRACE5"
simjob "$CASE" 7 "$NCCLWATCH" NCCLWATCH_CHAIN_PLUGIN="$TRACE5"
[[ $(wc -l <"$WORK/$CASE.trace") == 8 ]] || fail "expected 8 trace lines"
! grep -v " violations=0 " "$WORK/$CASE.trace" >/dev/null || fail "violations"
grep -q " comms=6 " "$WORK/$CASE.trace" || fail "expected six communicators a rank"
[[ "$(counts "$WORK/$CASE.trace")" == "$(counts "$WORK/$CASE.alone.trace")" ]] ||
  fail "chained counts differ from alone"
JOB=(--nodes 2 --ranks-per-node 2 --iterations 3 --channels 2)

# An NCCL that speaks v4 with ncclwatch (before 2.28) has no API events, which a v5 plugin's
# collectives hang from: the second plugin is not served, and that is said.
CASE=abi4
simjob "$CASE" 4 "$NCCLWATCH" NCCLWATCH_CHAIN_PLUGIN="$TRACE5"
grep -q "NCCLWATCH_CHAIN_PLUGIN: this NCCL speaks profiler ABI v4, which $TRACE5 (v5) cannot run" \
  "$WORK/$CASE.log" || fail "no word of the v4 refusal"
! grep -qE " (Coll|P2p|KernelCh)=[1-9]" "$WORK/$CASE.trace" 2>/dev/null ||
  fail "the second plugin got events under a v4 NCCL"
[[ "$(ops "$WORK/$CASE.dump")" == "$(ops "$WORK/alone-ncclwatch-abi4.dump")" ]] ||
  fail "ncclwatch's operations differ from when it runs alone"

# A second plugin asking for collectives only: no KernelCh reaches it, though ncclwatch asks.
CASE=coll-only
simjob "$CASE.alone" 5 "$TRACE5" SIMJOB_TRACE_MASK=2
simjob "$CASE" 7 "$NCCLWATCH" SIMJOB_TRACE_MASK=2 NCCLWATCH_CHAIN_PLUGIN="$TRACE5"
grep -q " KernelCh=0 " "$WORK/$CASE.trace" || fail "the chained plugin got KernelCh events"
[[ "$(counts "$WORK/$CASE.trace")" == "$(counts "$WORK/$CASE.alone.trace")" ]] ||
  fail "chained counts differ from alone"
[[ "$(ops "$WORK/$CASE.dump")" == "$(ops "$WORK/alone-ncclwatch-abi7.dump")" ]] ||
  fail "ncclwatch's operations differ from when it runs alone"

# What cannot be chained is said, and ncclwatch runs alone.
CASE=itself
simjob "$CASE" 7 "$NCCLWATCH" NCCLWATCH_CHAIN_PLUGIN="$NCCLWATCH"
grep -q "NCCLWATCH_CHAIN_PLUGIN: $NCCLWATCH is ncclwatch itself; running without it" \
  "$WORK/$CASE.log" || fail "no word of the refusal"
[[ "$(ops "$WORK/$CASE.dump")" == "$(ops "$WORK/alone-ncclwatch-abi7.dump")" ]] ||
  fail "ncclwatch's operations differ from when it runs alone"
CASE=missing
simjob "$CASE" 7 "$NCCLWATCH" NCCLWATCH_CHAIN_PLUGIN=no-such-profiler
grep -q "NCCLWATCH_CHAIN_PLUGIN: cannot load no-such-profiler: .*; running without it" \
  "$WORK/$CASE.log" || fail "no word of the missing plugin"
[[ "$(ops "$WORK/$CASE.dump")" == "$(ops "$WORK/alone-ncclwatch-abi7.dump")" ]] ||
  fail "ncclwatch's operations differ from when it runs alone"
echo "simjob_chain_test: OK"

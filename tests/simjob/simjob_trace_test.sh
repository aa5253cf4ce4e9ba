#!/usr/bin/env bash
# Runs simjob against the invariant-checking trace plugin and checks what the plugin saw.
#
# Usage: simjob_trace_test.sh SIMJOB_BINARY TRACE_PLUGIN_SO
#
# Each scenario is a 2 nodes x 2 ranks job; the megatron ones are 4 nodes x 2 ranks. The plugin appends one line per rank to a trace file
# (format: see trace_tracer.h); every line must report violations=0, and the event counts must be
# consistent with the workload, the ABI version, the activation mask and the injected fault.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 SIMJOB_BINARY TRACE_PLUGIN_SO" >&2
  exit 2
fi
SIMJOB=$1
PLUGIN=$2
[[ -x "$SIMJOB" ]] || { echo "simjob_trace_test: not executable: $SIMJOB" >&2; exit 2; }
[[ -f "$PLUGIN" ]] || { echo "simjob_trace_test: no such plugin: $PLUGIN" >&2; exit 2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/simjob_trace_test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
SCENARIO=setup
LINES=()

fail() {
  echo "simjob_trace_test: FAIL [$SCENARIO]: $*" >&2
  if [[ -f "$WORK/$SCENARIO.log" ]]; then
    echo "--- simjob output:" >&2
    cat "$WORK/$SCENARIO.log" >&2
  fi
  if [[ -f "$WORK/$SCENARIO.trace" ]]; then
    echo "--- trace lines:" >&2
    cat "$WORK/$SCENARIO.trace" >&2
  fi
  exit 1
}

# field LINE KEY: prints the value of KEY=VALUE in a trace line.
field() {
  local re=" $2=([^ ]*)"
  if [[ " $1" =~ $re ]]; then echo "${BASH_REMATCH[1]}"; else echo "missing"; fi
}

# line_of RANK: the trace line of that rank.
line_of() {
  local line
  for line in "${LINES[@]}"; do
    if [[ "$(field "$line" rank)" == "$1" ]]; then echo "$line"; return; fi
  done
  fail "no trace line for rank $1"
}

# expect LINE KEY VALUE
expect() {
  local got
  got=$(field "$1" "$2")
  [[ "$got" == "$3" ]] || fail "rank $(field "$1" rank): expected $2=$3, got $2=$got"
}

# run NAME [SIMJOB ARGS...]: runs one scenario (with the environment given by the caller) and
# loads its trace lines into LINES.
run() {
  SCENARIO=$1
  shift
  local trace="$WORK/$SCENARIO.trace"
  if ! SIMJOB_TRACE_OUT="$trace" "$SIMJOB" --plugin "$PLUGIN" --nodes 2 --ranks-per-node 2 \
      --start-delay-ms 200 "$@" >"$WORK/$SCENARIO.log" 2>&1; then
    fail "simjob exited with status $?"
  fi
  [[ -f "$trace" ]] || fail "the plugin wrote no trace file"
  mapfile -t LINES <"$trace"
}

# Every line: no violations; and, unless told otherwise, every started event was stopped.
check_clean() {
  local allow_unstopped=${1:-no} line
  for line in "${LINES[@]}"; do
    expect "$line" violations 0
    [[ "$allow_unstopped" == yes ]] || expect "$line" unstopped 0
  done
}

# KernelCh starts == channels x (Coll + P2p), Group == GroupApi == KernelLaunch (v5+), API
# events match their tasks one to one, KernelPhase only on v7 (at most three per KernelCh), and all
# ranks saw the same counts (unless the third argument is "per-rank": the stages of an
# interleaved pipeline launch their exchanges in different groups).
check_counts() {
  local abi=$1 channels=$2 same=${3:-same} line first_counts="" counts coll p2p phases
  for line in "${LINES[@]}"; do
    coll=$(field "$line" Coll)
    p2p=$(field "$line" P2p)
    ((coll > 0 && p2p > 0)) || fail "no Coll/P2p events: $line"
    expect "$line" KernelCh $((channels * (coll + p2p)))
    phases=$(field "$line" KernelPhase)
    if ((abi >= 7)); then
      ((phases > 0 && phases <= 3 * channels * (coll + p2p))) ||
        fail "rank $(field "$line" rank): KernelPhase=$phases for $((channels * (coll + p2p))) KernelCh"
    else
      expect "$line" KernelPhase 0
    fi
    if ((abi >= 5)); then
      expect "$line" CollApi "$coll"
      expect "$line" P2pApi "$p2p"
      expect "$line" GroupApi "$(field "$line" Group)"
      expect "$line" KernelLaunch "$(field "$line" Group)"
    else
      expect "$line" GroupApi 0
      expect "$line" CollApi 0
      expect "$line" P2pApi 0
    fi
    counts=$(echo "$line" | grep -oE ' (GroupApi|CollApi|P2pApi|Group|Coll|P2p|KernelCh)=[0-9]+' |
      tr -d '\n')
    [[ "$same" != same || -z "$first_counts" || "$counts" == "$first_counts" ]] ||
      fail "ranks disagree on event counts: '$first_counts' vs '$counts'"
    first_counts=$counts
  done
}

expect_ranks() {
  ((${#LINES[@]} == $1)) || fail "expected $1 trace lines, got ${#LINES[@]}"
}

# --- every ABI version, timed run -----------------------------------------------------------------
for abi in 4 5 6 7; do
  run "abi$abi" --abi "$abi" --duration-s 2
  expect_ranks 4
  check_clean
  check_counts "$abi" 4
  expect "${LINES[0]}" abi "$abi"
done

# --- exact counts: 3 iterations = 9 collectives + 3 Send/Recv groups, 2 channels ------------------
# KernelPhase (v7, the default): three phases per KernelCh, except that at every step the last rank
# to arrive has no initial sync: 30 fewer (9 x 2 collective channels, 3 x 2 x 2 Send/Recv ones).
run iterations --iterations 3 --channels 2 --gap-us 1000
expect_ranks 4
check_clean
check_counts 7 2
phases=0
for rank in 0 1 2 3; do
  line=$(line_of $rank)
  expect "$line" abi 7
  expect "$line" Coll 9
  expect "$line" P2p 6
  expect "$line" GroupApi 12
  expect "$line" KernelCh 30
  expect "$line" user_tags 1
  phases=$((phases + $(field "$line" KernelPhase)))
done
((phases == 4 * 3 * 30 - 30)) || fail "expected $((4 * 3 * 30 - 30)) KernelPhase events, got $phases"

# --- v7 user tags: --user-tag iteration tags every call with its iteration + 1 ---------------------
run user_tag --iterations 3 --gap-us 1000 --user-tag iteration
expect_ranks 4
check_clean
for line in "${LINES[@]}"; do expect "$line" user_tags 3; done

# --- NULL handles for GroupApi and Coll: children must then get NULL parents ----------------------
SIMJOB_TRACE_NULL_TYPES=$((256 + 2)) run null_handles --iterations 2 --gap-us 1000
expect_ranks 4
check_clean
check_counts 7 4
expect "${LINES[0]}" null $((8 + 6))

# NULL KernelCh handles: their KernelPhase children get NULL parents; NULL phases get no state/stop.
SIMJOB_TRACE_NULL_TYPES=$((64 + 32768)) run null_phases --iterations 2 --gap-us 1000
expect_ranks 4
check_clean
check_counts 7 4
line=$(line_of 0)
expect "$line" null $(($(field "$line" KernelCh) + $(field "$line" KernelPhase)))

# --- activation mask KernelCh only: its ancestors are emitted, KernelLaunch is not ----------------
SIMJOB_TRACE_MASK=64 run mask_kernel_ch --iterations 2 --gap-us 1000
expect_ranks 4
check_clean
expect "${LINES[0]}" KernelLaunch 0
expect "${LINES[0]}" CollApi 6
expect "${LINES[0]}" Group 8
expect "${LINES[0]}" KernelCh $((4 * (6 + 4)))

# --- activation mask KernelPhase only (v7): NCCL turns KernelCh on for it ---------------------------
SIMJOB_TRACE_MASK=32768 run mask_kernel_phase --iterations 2 --gap-us 1000
expect_ranks 4
check_clean
expect "${LINES[0]}" KernelLaunch 0
expect "${LINES[0]}" CollApi 6
expect "${LINES[0]}" KernelCh $((4 * (6 + 4)))
(($(field "${LINES[0]}" KernelPhase) > 0)) || fail "no KernelPhase events: ${LINES[0]}"

# --- the KernelPhase bit from a v6 table: cleared, as NCCL 2.31's v6 shim does ---------------------
SIMJOB_TRACE_MASK=$((64 + 32768)) run abi6_kernel_phase --abi 6 --iterations 2 --gap-us 1000
expect_ranks 4
check_clean
expect "${LINES[0]}" KernelCh $((4 * (6 + 4)))
expect "${LINES[0]}" KernelPhase 0

# --- activation mask CollApi only: API events, no tasks, no kernels --------------------------------
SIMJOB_TRACE_MASK=512 run mask_coll_api --iterations 2 --gap-us 1000
expect_ranks 4
check_clean
expect "${LINES[0]}" GroupApi 8
expect "${LINES[0]}" CollApi 6
for key in P2pApi Group Coll P2p KernelCh KernelLaunch; do expect "${LINES[0]}" "$key" 0; done

# --- slow rank: arrives last, so its kernels are the shortest and it never waits in initial sync ---
run slow_rank --duration-s 1.5 --slow-rank 3 --slow-us 3000
expect_ranks 4
check_clean
slow_us=$(field "$(line_of 3)" kch_mean_us)
expect "$(line_of 3)" sync_mean_us 0.000
for rank in 0 1 2; do
  other_us=$(field "$(line_of $rank)" kch_mean_us)
  awk -v s="$slow_us" -v o="$other_us" 'BEGIN { exit !(s + 2000 < o) }' ||
    fail "slow rank 3 mean kernel ${slow_us} us is not well below rank $rank's ${other_us} us"
  sync_us=$(field "$(line_of $rank)" sync_mean_us)
  awk -v w="$sync_us" 'BEGIN { exit !(w > 2000) }' ||
    fail "rank $rank waits ${sync_us} us in initial sync, expected > 2000 (rank 3 is 3000 us late)"
done

# --- hang: rank 1 stops arriving; the others launch the step, which never completes -----------------
run hang --duration-s 2 --hang-rank 1 --hang-after-s 1
expect_ranks 4
check_clean yes
expect "$(line_of 1)" unstopped 0
hung_groups=$(field "$(line_of 1)" GroupApi)
for rank in 0 2 3; do
  line=$(line_of $rank)
  expect "$line" GroupApi $((hung_groups + 1))
  open=$(field "$line" unstopped)
  ((open == 4 || open == 8)) || fail "rank $rank: expected one op's 4 or 8 open KernelCh, got $open"
done

# --- kill: rank 2 vanishes without finalize; the others report and exit cleanly -----------------------
run kill --duration-s 2 --kill-rank 2 --kill-after-s 1
expect_ranks 3
check_clean yes
for line in "${LINES[@]}"; do
  [[ "$(field "$line" rank)" != 2 ]] || fail "the killed rank wrote a trace line"
done
grep -q "rank 2 node 1 .*killed by --kill-rank" "$WORK/kill.log" || fail "kill not reported"

# --- megatron: 4 nodes x 2 GPUs = tp 2 x pp 2 x dp 2, the closed-loop job model ---------------------
MEGATRON=(--layout megatron --nodes 4 --ranks-per-node 2)

# Per iteration each rank launches 16 TP AllReduces, 5 pipeline groups holding 8 Send/Recv tasks,
# DP ReduceScatter + AllGather and the emb and mp AllReduces; a world AllReduce every 2nd one.
run megatron_iterations "${MEGATRON[@]}" --iterations 3 --world-every 2 --user-tag 7
expect_ranks 8
check_clean
check_counts 7 4
for line in "${LINES[@]}"; do
  expect "$line" comms 6
  expect "$line" Coll 61
  expect "$line" P2p 24
  expect "$line" GroupApi 76
  expect "$line" KernelCh 340
  expect "$line" user_tags 1
done
run megatron_abi4 "${MEGATRON[@]}" --abi 4 --iterations 2
expect_ranks 8
check_clean
check_counts 4 4

# A slow GPU (rank 3) has the shortest kernels; its TP partner (rank 2) waits in every layer, in
# the kernels' initial sync.
run megatron_slow "${MEGATRON[@]}" --duration-s 1.5 --slow-rank 3 --slow-factor 2
expect_ranks 8
check_clean
check_counts 7 4
slow_us=$(field "$(line_of 3)" kch_mean_us)
partner_us=$(field "$(line_of 2)" kch_mean_us)
awk -v s="$slow_us" -v o="$partner_us" 'BEGIN { exit !(s + 300 < o) }' ||
  fail "slow rank 3 mean kernel ${slow_us} us is not well below its TP partner's ${partner_us} us"
slow_us=$(field "$(line_of 3)" sync_mean_us)
partner_us=$(field "$(line_of 2)" sync_mean_us)
awk -v s="$slow_us" -v o="$partner_us" 'BEGIN { exit !(s + 300 < o) }' ||
  fail "slow rank 3 mean initial sync ${slow_us} us is not well below rank 2's ${partner_us} us"

# Stuck ranks: one op each with its channels open (4, or 8 for a Send/Recv group), and the
# --host-ahead 4 ops queued behind it launched but never started.
check_stuck() {
  local line=$1 coll p2p kch open queued_channels
  coll=$(field "$line" Coll)
  p2p=$(field "$line" P2p)
  kch=$(field "$line" KernelCh)
  open=$(field "$line" unstopped)
  ((open == 4 || open == 8)) || fail "rank $(field "$line" rank): expected 4 or 8 open KernelCh: $line"
  queued_channels=$((4 * (coll + p2p) - kch))
  ((queued_channels >= 16 && queued_channels <= 32)) ||
    fail "rank $(field "$line" rank): expected 4 queued ops that never start: $line"
  expect "$line" CollApi "$coll"
  expect "$line" GroupApi "$(field "$line" Group)"
}

# A fabric hang of dp0 at 1 s: every member arrives, it never completes; the job stalls behind it.
run megatron_fabric_hang "${MEGATRON[@]}" --duration-s 2 --fabric-hang-comm dp0 \
  --fabric-hang-after-s 1
expect_ranks 8
check_clean yes
for line in "${LINES[@]}"; do check_stuck "$line"; done
grep -q "communicator dp0 hangs" "$WORK/megatron_fabric_hang.log" || fail "fault not announced"

# Rank 5 stops enqueuing at 1 s: what it launched completes, everybody else gets stuck.
run megatron_hang "${MEGATRON[@]}" --duration-s 2 --hang-rank 5 --hang-after-s 1
expect_ranks 8
check_clean yes
line=$(line_of 5)
expect "$line" unstopped 0
expect "$line" KernelCh $((4 * ($(field "$line" Coll) + $(field "$line" P2p))))
for rank in 0 1 2 3 4 6 7; do check_stuck "$(line_of $rank)"; done

# Rank 2 dies at 1 s without finalize; the others report and exit cleanly.
run megatron_kill "${MEGATRON[@]}" --duration-s 2 --kill-rank 2 --kill-after-s 1
expect_ranks 7
check_clean yes
grep -q "rank 2 node 1 .*killed by --kill-rank" "$WORK/megatron_kill.log" || fail "kill not reported"

# --- megatron, other shapes (megatron_layout.h) ------------------------------------------------------
# MoE with the all-to-all dispatcher, tp 1 x pp 2 x dp 4: per iteration 8 pipeline Send/Recv tasks
# and 4 x 2 x 2 x 2 all-to-all groups of 3 Sends + 3 Recvs; DP ReduceScatter + AllGather, emb, mp.
run megatron_moe_a2a "${MEGATRON[@]}" --tp 1 --iterations 2 --moe-expert-us 300 \
  --moe-dispatcher alltoall
expect_ranks 8
check_clean
check_counts 7 4
for line in "${LINES[@]}"; do
  expect "$line" Coll 8
  expect "$line" P2p 400
done
grep -q "shapes: MoE all-to-all" "$WORK/megatron_moe_a2a.log" || fail "shape not announced"
# A slow expert GPU (rank 0; its expert-parallel group is ranks 0-3): its peers wait for it in
# both all-to-alls of every layer, it waits for nobody.
run megatron_moe_a2a_slow "${MEGATRON[@]}" --tp 1 --duration-s 1.5 --moe-expert-us 300 \
  --moe-dispatcher alltoall --slow-rank 0 --slow-factor 2
expect_ranks 8
check_clean
slow_us=$(field "$(line_of 0)" sync_mean_us)
for rank in 1 2 3; do
  peer_us=$(field "$(line_of $rank)" sync_mean_us)
  awk -v s="$slow_us" -v o="$peer_us" 'BEGIN { exit !(s + 200 < o) }' ||
    fail "slow rank 0 mean initial sync ${slow_us} us is not well below EP peer $rank's ${peer_us} us"
done

# FSDP: per iteration 16 TP AllReduces, 16 parameter AllGathers (2 per layer pass of 2 layers),
# 8 gradient ReduceScatters, emb and mp; no end-of-iteration DP sync.
run megatron_fsdp "${MEGATRON[@]}" --iterations 2 --fsdp
expect_ranks 8
check_clean
check_counts 7 4
for line in "${LINES[@]}"; do
  expect "$line" Coll 84
  expect "$line" P2p 16
done

# Interleaved 1F1B, 2 chunks of 1 layer: 24 Send/Recv tasks per iteration on every stage, in
# groups of up to four (stage 1 sends its last chunk's output round to stage 0).
run megatron_interleaved "${MEGATRON[@]}" --iterations 2 --virtual-stages 2
expect_ranks 8
check_clean
check_counts 7 4 per-rank
for line in "${LINES[@]}"; do
  expect "$line" Coll 40
  expect "$line" P2p 48
done

# Context-parallel ring attention over TP 2: one ring step (a Send and a Recv) per layer pass
# instead of the TP AllReduce.
run megatron_cp_ring "${MEGATRON[@]}" --iterations 2 --cp-ring
expect_ranks 8
check_clean
check_counts 7 4
for line in "${LINES[@]}"; do
  expect "$line" Coll 8
  expect "$line" P2p 80
done

# --- command line ----------------------------------------------------------------------------------
SCENARIO=cli
"$SIMJOB" --help >/dev/null || fail "--help failed"
set +e
"$SIMJOB" --plugin "$PLUGIN" --no-such-flag >/dev/null 2>"$WORK/cli.err"
rc=$?
set -e
((rc == 2)) || fail "an unknown flag gave exit status $rc, expected 2"
grep -q "unknown option '--no-such-flag'" "$WORK/cli.err" || fail "unclear error for a bad flag"
# Flags that do not fit the layout: exit 2 with the flag named.
expect_usage_error() {
  local expected=$1 rc
  shift
  set +e
  "$SIMJOB" --plugin "$PLUGIN" "$@" >/dev/null 2>"$WORK/cli.err"
  rc=$?
  set -e
  ((rc == 2)) || fail "'$*' gave exit status $rc, expected 2"
  grep -q -- "$expected" "$WORK/cli.err" || fail "'$*': no '$expected' in: $(cat "$WORK/cli.err")"
}
expect_usage_error "--tp 2 x --pp 2 x --dp 3 must equal" "${MEGATRON[@]}" --dp 3
expect_usage_error "--tp must divide" "${MEGATRON[@]}" --tp 4
expect_usage_error "--gap-us applies to --layout world|3d only" "${MEGATRON[@]}" --gap-us 10
expect_usage_error "no communicator 'dp9'" "${MEGATRON[@]}" --fabric-hang-comm dp9
expect_usage_error "--stage-factors needs 2 factors" "${MEGATRON[@]}" --stage-factors 1,2,3
expect_usage_error "--moe-dispatcher needs --moe-expert-us" "${MEGATRON[@]}" --moe-dispatcher alltoall
expect_usage_error "--fsdp needs --dp of at least 2" "${MEGATRON[@]}" --pp 4 --fsdp
expect_usage_error "--virtual-stages > 1 needs --microbatches a multiple of --pp 2" \
  "${MEGATRON[@]}" --virtual-stages 2 --microbatches 3
expect_usage_error "--virtual-stages 4 must divide --layers 2" "${MEGATRON[@]}" --virtual-stages 4
expect_usage_error "--cp-ring needs --tp of at least 2" "${MEGATRON[@]}" --tp 1 --cp-ring
expect_usage_error "--microbatches applies to --layout megatron only" --microbatches 8
expect_usage_error "--user-tag needs --abi 7" --abi 6 --user-tag iteration

echo "simjob_trace_test: PASS (ABI v4-v7; counts; KernelPhase; user tags; NULL handles; masks;" \
  "slow; hang; kill; megatron: counts, slow, fabric hang, hang, kill, MoE all-to-all (+ slow)," \
  "FSDP, interleaved 1F1B, ring attention; CLI)"

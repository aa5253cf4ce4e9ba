#include "tests/e2e/detection_scenarios.h"

#include <string>
#include <utility>
#include <vector>

namespace ncclwatch::testing {
namespace {

using ncclwatch::v1::Event;

std::vector<std::string> With(std::vector<std::string> base, const std::vector<std::string>& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

// 2 nodes x 4 GPUs, one world communicator.
std::vector<std::string> Common(const std::vector<std::string>& more) {
  return With({"--nodes=2", "--ranks-per-node=4", "--duration-s=7"}, more);
}

// 4 nodes x 2 GPUs, TP x PP x DP = 2 x 2 x 2.
std::vector<std::string> ThreeD(const std::vector<std::string>& more) {
  return With({"--layout=3d", "--nodes=4", "--ranks-per-node=2", "--pp-stages=2", "--duration-s=7"},
              more);
}

const char* kNode0 = "sim-node-0";

// A Megatron-style job (simjob --layout=megatron): 4 nodes x 2 GPUs, TP 2 inside a node, PP 2 and
// DP 2 across nodes, 1F1B with warm-up and drain, the per-step cross-stage AllReduce, a 4-byte
// world AllReduce every 50 steps, the host 4 operations ahead, a delay spreading through TP, PP
// and DP as synchronous training spreads it. World rank r runs on node r / 2, GPU r % 2.
std::vector<std::string> Megatron(const std::string& seed, const std::vector<std::string>& more) {
  return With(
      {"--layout=megatron", "--nodes=4", "--ranks-per-node=2", "--duration-s=6", "--seed=" + seed},
      more);
}

// Each with two seeds: the findings must not hang on one schedule's accidents.
void AddMegatronScenarios(std::vector<Scenario>* out) {
  std::vector<Scenario>& s = *out;
  for (const std::string seed : {"1", "2"}) {
    const std::string of = ", seed " + seed;
    // Pipeline drain seen by the cross-stage AllReduce, warm-up, imbalance, stalls: nobody's
    // fault, nothing pages.
    s.push_back({"3D healthy" + of, 4, {{"m-clean", Megatron(seed, {})}}, {}});
    s.push_back({"3D stage imbalance by design" + of,
                 4,
                 {{"m-imb", Megatron(seed, {"--stage-factors=1,1.4"})}},
                 {}});
    s.push_back({"3D job-wide stalls" + of,
                 4,
                 {{"m-stall", Megatron(seed, {"--stall-every-s=1.5", "--stall-ms=200"})}},
                 {}});
    // One GPU computes 1.5x as long: its TP partner, its pipeline peers and its DP group all
    // wait; only it is the finding.
    const std::string slow = seed == "1" ? "2" : "7";
    const std::string slow_gpu = seed == "1" ? "sim-node-1 GPU0" : "sim-node-3 GPU1";
    s.push_back({"3D slow GPU" + of,
                 4,
                 {{"m-slow", Megatron(seed, {"--slow-rank=" + slow, "--slow-factor=1.5"})}},
                 {{Event::STRAGGLER, "m-slow", slow_gpu, 0}}});
    s.push_back(
        {"3D GPU slows 1.3x mid-run" + of,
         4,
         {{"m-mid", Megatron(seed, {"--slow-rank=5", "--slow-factor=1.3", "--slow-after-s=2"})}},
         {{Event::STRAGGLER, "m-mid", "sim-node-2 GPU1", 2}}});
    // Throttled 2x for 2 s, then 2 s normal, repeating: one finding, no flapping.
    s.push_back({"3D bursty throttling" + of,
                 4,
                 {{"m-thr", Megatron(seed, {"--throttle-rank=6"})}},
                 {{Event::STRAGGLER, "m-thr", "sim-node-3 GPU0", 0}}});
    s.push_back(
        {"3D two slow GPUs on different nodes" + of,
         4,
         {{"m-two", Megatron(seed, {"--slow-rank=1", "--slow-rank=6", "--slow-factor=1.5"})}},
         {{Event::STRAGGLER, "m-two", "sim-node-0 GPU1", 0},
          {Event::STRAGGLER, "m-two", "sim-node-3 GPU0", 0}}});
    // NCCL 2.31 with KernelPhase on: lateness is judged on each kernel's measured wait for its
    // peers (docs/detection.md). The same verdicts: nothing for the healthy job, the slow GPU
    // alone for the slow one.
    const std::vector<std::string> v7 = {"--abi=7", "--env=NCCLWATCH_KERNEL_PHASE=1"};
    s.push_back({"3D healthy, KernelPhase waits" + of, 4, {{"m-v7", Megatron(seed, v7)}}, {}});
    s.push_back(
        {"3D slow GPU, KernelPhase waits" + of,
         4,
         {{"m-v7slow", Megatron(seed, With(v7, {"--slow-rank=" + slow, "--slow-factor=1.5"}))}},
         {{Event::STRAGGLER, "m-v7slow", slow_gpu, 0}}});
    // dp1's AllGather never ends from t0 + 2 s; the hosts ran ahead, so TP and PP operations
    // queue behind it on the same GPUs: one hang, theirs attached.
    s.push_back({"3D fabric hang in one DP group, host ahead" + of,
                 4,
                 {{"m-fh", Megatron(seed, {"--fabric-hang-comm=dp1", "--fabric-hang-after-s=2",
                                           "--host-ahead=4"})}},
                 {{Event::HANG, "m-fh", "dp1 no progress", 2}}});
    // The whole fabric stops under the world AllReduce: everything else queues behind it.
    s.push_back({"3D fabric hang of the whole job" + of,
                 4,
                 {{"m-fw", Megatron(seed, {"--fabric-hang-comm=world", "--world-every=5",
                                           "--fabric-hang-after-s=2"})}},
                 {{Event::HANG, "m-fw", "world no progress", 2}}});
    // Python's garbage collector: every second one rank's host pauses 200 ms before an
    // iteration, a different rank each time. Everyone waits once; nobody is slow: nothing.
    s.push_back({"3D one-rank-at-a-time host pauses" + of,
                 4,
                 {{"m-gc", Megatron(seed, {"--gc-every-s=1", "--gc-ms=200"})}},
                 {}});
    // Telemetry that lies: one op in 50 of rank 3 reports a kernel of 5 s. Counted by the plugin
    // (bogus_timings), never judged: nothing.
    s.push_back({"3D bogus GPU timestamps on one rank" + of,
                 4,
                 {{"m-bogus", Megatron(seed, {"--bogus-rank=3", "--bogus-every=50"})}},
                 {}});
    // Mixture of experts over the DP groups (two-way expert parallelism), with Megatron's
    // AllGather/ReduceScatter token dispatcher or an all-to-all of grouped Send/Recv: each
    // layer's hot expert moves with the routing, a different rank every microbatch and layer, and
    // computes twice as long. A workload property, never a page. With one GPU 1.5x slower at
    // everything, it alone is the finding.
    for (const auto& [dispatcher, tag] :
         {std::pair{"allgather", "AllGather"}, std::pair{"alltoall", "all-to-all"}}) {
      const std::vector<std::string> moe = {"--moe-expert-us=800",
                                            std::string("--moe-dispatcher=") + dispatcher};
      s.push_back({std::string("3D MoE healthy, moving hot expert (") + tag + " dispatcher)" + of,
                   4,
                   {{"m-moe", Megatron(seed, moe)}},
                   {}});
      s.push_back(
          {std::string("3D MoE slow expert GPU (") + tag + " dispatcher)" + of,
           4,
           {{"m-moeslow", Megatron(seed, With(moe, {"--slow-rank=" + slow, "--slow-factor=1.5"}))}},
           {{Event::STRAGGLER, "m-moeslow", slow_gpu, 0}}});
    }
    // A GPU whose expert kernels alone run 3x slower: its only symptom is in the combining
    // all-to-all (grouped Send/Recv), where it is busy every time, hot expert or not.
    s.push_back({"3D MoE GPU slow at its expert compute only (all-to-all dispatcher)" + of,
                 4,
                 {{"m-moeexp", Megatron(seed, {"--moe-expert-us=800", "--moe-dispatcher=alltoall",
                                               "--slow-rank=" + slow, "--slow-factor=3",
                                               "--slow-scope=expert"})}},
                 {{Event::STRAGGLER, "m-moeexp", slow_gpu, 0}}});
    // FSDP / ZeRO-3: each layer's parameters AllGathered before its forward and backward (one
    // layer ahead), its gradients ReduceScattered after its backward, over the DP groups.
    s.push_back({"3D FSDP healthy" + of, 4, {{"m-fsdp", Megatron(seed, {"--fsdp"})}}, {}});
    s.push_back(
        {"3D FSDP slow GPU" + of,
         4,
         {{"m-fsdpslow", Megatron(seed, {"--fsdp", "--slow-rank=" + slow, "--slow-factor=1.5"})}},
         {{Event::STRAGGLER, "m-fsdpslow", slow_gpu, 0}}});
    // Interleaved 1F1B (two model chunks per GPU: exchanges with both pipeline neighbours, the
    // last stage sending to the first) and context parallelism (ring attention: every layer's TP
    // all-reduce replaced by Send/Recv around the TP group): a slow GPU is the only finding.
    s.push_back({"3D interleaved 1F1B healthy" + of,
                 4,
                 {{"m-vpp", Megatron(seed, {"--virtual-stages=2"})}},
                 {}});
    s.push_back({"3D interleaved 1F1B slow GPU" + of,
                 4,
                 {{"m-vppslow", Megatron(seed, {"--virtual-stages=2", "--slow-rank=" + slow,
                                                "--slow-factor=1.5"})}},
                 {{Event::STRAGGLER, "m-vppslow", slow_gpu, 0}}});
    s.push_back({"3D context-parallel ring healthy" + of,
                 4,
                 {{"m-cp", Megatron(seed, {"--cp-ring"})}},
                 {}});
    s.push_back(
        {"3D context-parallel ring slow GPU" + of,
         4,
         {{"m-cpslow", Megatron(seed, {"--cp-ring", "--slow-rank=" + slow, "--slow-factor=1.5"})}},
         {{Event::STRAGGLER, "m-cpslow", slow_gpu, 0}}});
    // Two nodes of four GPUs: node 0 holds stage 0 of both replicas (TP 2 x DP 2), node 1 stage
    // 1. Node 0 slows to 1.3x from t0 + 3 s: every comparison with its replicas or its node's
    // peers cancels it, and its pipeline exchanges follow the TP all-reduce with no own time of
    // their own; its GPUs' own time grew while the rest of the job's did not.
    s.push_back({"3D node holding one stage of every replica slows 1.3x mid-run" + of,
                 2,
                 {{"m-stage", With({"--layout=megatron", "--nodes=2", "--ranks-per-node=4",
                                    "--tp=2", "--pp=2", "--duration-s=7", "--seed=" + seed,
                                    "--slow-rank=0,1,2,3", "--slow-factor=1.3", "--slow-after-s=3"},
                                   {})}},
                 {{Event::STRAGGLER, "m-stage", "sim-node-0 GPU0", 3},
                  {Event::STRAGGLER, "m-stage", "sim-node-0 GPU1", 3},
                  {Event::STRAGGLER, "m-stage", "sim-node-0 GPU2", 3},
                  {Event::STRAGGLER, "m-stage", "sim-node-0 GPU3", 3},
                  {Event::NODE_STRAGGLER, "m-stage", "node sim-node-0", 3}}});
    // Telemetry that never arrives: one op in 50 of rank 3 loses its profiler events, a
    // collective all of them (a gap in its seqNumbers) or any op its last channel's stop (it
    // never completes in the profiler). Its groups stay incomplete and expire: nothing.
    s.push_back({"3D lost profiler events on one rank" + of,
                 4,
                 {{"m-lost", Megatron(seed, {"--lose-rank=3", "--lose-every=50"})}},
                 {}});
    // Node 3 has no agent (its socket is missing): ranks 6 and 7 never report. Said once, for
    // the job, from the first reports on (t0 + 1 s at a 1 s flush interval); nothing is judged
    // on the incomplete communicators.
    s.push_back({"3D ranks never report (no agent on a node)" + of,
                 3,
                 {{"m-nr", Megatron(seed, {})}},
                 {{Event::RANKS_UNREPORTED, "m-nr", "world ranks 6 7", 1}}});
  }
}

// A GPU that drifts 1% slower every second from t0 + 1 s: 15% slower at 16 s, 20% at 21 s. The
// threshold is 15% of a typical own time measured with jitter, so it may be found from about 13%
// (14 s) on, and should be within 5 s of 20% (goal: 12 s after 14 s).
void AddDriftScenarios(std::vector<Scenario>* out) {
  for (const std::string seed : {"1", "2"}) {
    const std::string rank = seed == "1" ? "5" : "2";
    const std::string gpu = seed == "1" ? "sim-node-2 GPU1" : "sim-node-1 GPU0";
    out->push_back({"3D GPU drifting 1%/s slower, seed " + seed,
                    4,
                    {{"m-drift", Megatron(seed, {"--drift-rank=" + rank, "--drift-per-s=0.01",
                                                 "--drift-after-s=1", "--duration-s=27"})}},
                    {{Event::STRAGGLER, "m-drift", gpu, 14, 12}}});
  }
}

}  // namespace

std::vector<Scenario> Scenarios() {
  std::vector<Scenario> s;
  // Healthy jobs with realistic host jitter (+/-300 us per step) must produce nothing at all.
  for (const char* seed : {"1", "2", "3"}) {
    s.push_back(
        {std::string("clean, seed ") + seed,
         2,
         {{"clean", Common({"--seed=" + std::string(seed), "--jitter-us=300", "--node-comm"})}},
         {}});
  }
  s.push_back({"clean 3D (TP x PP x DP = 2 x 2 x 2)",
               4,
               {{"clean3d", ThreeD({"--seed=4", "--jitter-us=300"})}},
               {}});
  s.push_back({"slow rank",
               2,
               {{"slow", Common({"--slow-rank=5"})}},
               {{Event::STRAGGLER, "slow", "sim-node-1 GPU1", 0}}});
  s.push_back({"slow node (all its GPUs)",
               2,
               {{"slownode", Common({"--slow-node=1"})}},
               {{Event::STRAGGLER, "slownode", "sim-node-1 GPU0", 0},
                {Event::STRAGGLER, "slownode", "sim-node-1 GPU1", 0},
                {Event::STRAGGLER, "slownode", "sim-node-1 GPU2", 0},
                {Event::STRAGGLER, "slownode", "sim-node-1 GPU3", 0},
                {Event::NODE_STRAGGLER, "slownode", "node sim-node-1", 0}}});
  // Node 1 (of 3) takes 1.5 ms longer before its node-local (NVLink) AllReduce at every step: its
  // four GPUs are equally late there, so the own-time analysis finds none of them slow itself,
  // but the world communicator waits for the node at the AllReduce that follows. Nothing to
  // attribute to one GPU; the symptom still pages, as a slow node with no origin found.
  for (const char* seed : {"1", "2"}) {
    s.push_back(
        {std::string("slow node, delay before its node-local collective (flat), seed ") + seed,
         3,
         {{"slownodelocal",
           {"--nodes=3", "--ranks-per-node=4", "--duration-s=7", "--node-comm", "--slow-node=1",
            "--slow-us=1500", "--slow-before=node", "--seed=" + std::string(seed)}}},
         {{Event::NODE_STRAGGLER, "slownodelocal", "world node sim-node-1 origin not found", 0}}});
  }
  // The same in the 3D layout: node 1 holds stage 1 of replica 0 (both TP ranks); the extra time
  // before its TP AllReduce makes it late at the two embedding AllReduces (one per TP rank) that
  // follow, where replica 1's stage 1 is not. Its replica then reaches the DP collectives late,
  // which is the same in every DP group (not beyond the family): one node page, no origin.
  for (const char* seed : {"1", "2"}) {
    s.push_back(
        {std::string("slow node, delay before its node-local collective (3D), seed ") + seed,
         4,
         {{"slownodelocal3d", ThreeD({"--slow-node=1", "--slow-us=1500", "--slow-before=node",
                                      "--seed=" + std::string(seed)})}},
         {{Event::NODE_STRAGGLER, "slownodelocal3d", "node sim-node-1 origin not found", 0}}});
  }
  // Node 0's NIC halves at t0 + 3 s. Its data-parallel (dp0, dp1: nodes 0 and 2) and pipeline
  // (pp0, pp1: nodes 0 and 1) communicators degrade; its NVLink TP communicator does not; the
  // only node common to them all, and absent from the healthy dp2/dp3/pp2/pp3, is node 0.
  s.push_back(
      {"degraded link on one node (3D)",
       4,
       {{"nic", ThreeD({"--degrade-node=0", "--degrade-factor=0.5", "--degrade-after-s=3"})}},
       {{Event::COMM_DEGRADED, "nic", "dp0 hybrid", 3},
        {Event::COMM_DEGRADED, "nic", "dp1 hybrid", 3},
        {Event::COMM_DEGRADED, "nic", "pp0 hybrid", 3},
        {Event::COMM_DEGRADED, "nic", "pp1 hybrid", 3},
        {Event::NODE_NETWORK_SUSPECT, "nic", std::string("node ") + kNode0, 3}}});
  s.push_back({"rank never arrives",
               2,
               {{"hang", Common({"--hang-rank=6", "--hang-after-s=3"})}},
               {{Event::HANG, "hang", "world missing 6", 3}}});
  s.push_back({"rank process dies",
               2,
               {{"dies", Common({"--kill-rank=2", "--kill-after-s=3"})}},
               {{Event::HANG, "dies", "world missing 2", 3},
                {Event::RANK_SILENT, "dies", "world rank 2", 3}}});
  s.push_back({"+/-50 ms GPU clock offsets, slow rank",
               2,
               {{"skew", Common({"--clock-skew-ms=50", "--slow-rank=3"})}},
               {{Event::STRAGGLER, "skew", "sim-node-0 GPU3", 0}}});
  s.push_back({"two jobs at once (one slow rank in A)",
               2,
               {{"jobA", Common({"--slow-rank=2", "--seed=11"})},
                {"jobB", Common({"--seed=12", "--clock-skew-ms=50"})}},
               {{Event::STRAGGLER, "jobA", "sim-node-0 GPU2", 0}}});
  // World rank 5 is slow throughout; at t0 + 3 s the world splits by local-rank parity and rank 5
  // becomes rank 2 of split1 = {1, 3, 5, 7}: the same GPU, one finding. The idle parent must not
  // look hung or silent.
  s.push_back({"communicator split mid-run (slow rank 5)",
               2,
               {{"split", Common({"--split-after-s=3", "--slow-rank=5"})}},
               {{Event::STRAGGLER, "split", "sim-node-1 GPU1", 0}}});
  // 5,000 collectives per second per rank (200 us per step, 4 KiB-32 KiB messages), rank 3 stops
  // arriving at t0 + 3 s.
  s.push_back({"5,000 collectives/s per rank, rank never arrives",
               2,
               {{"rate",
                 {"--nodes=2", "--ranks-per-node=2", "--duration-s=6", "--gap-us=190",
                  "--jitter-us=10", "--msg-scale=0.001", "--hang-rank=3", "--hang-after-s=3"},
                 15'000}},
               {{Event::HANG, "rate", "world missing 3", 3}}});
  AddMegatronScenarios(&s);
  AddDriftScenarios(&s);
  return s;
}

}  // namespace ncclwatch::testing

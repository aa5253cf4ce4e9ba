// The profiler ABI v7 (NCCL 2.31) scenarios of plugin_scenarios_test (docs/nccl-profiler-abi.md
// §10), run like the others through every ABI version: what v7 adds must reach a v7 plugin, and
// nothing of it may reach or disturb a v4-v6 one.
//
//   KernelPhase  per channel, the initial sync (waiting for the peers), compute and final sync of
//                a collective's kernel; the plugin reports per sampled collective the longest
//                initial sync over its channels (SampleColumn.sync_wait_ns). The plugin asks for
//                them only on v7 and only under NCCLWATCH_KERNEL_PHASE=1, which AgentEnvironment
//                sets unless the environment already has it: ctest also runs these scenarios with
//                NCCLWATCH_KERNEL_PHASE=0 (plugin_scenarios_kernel_phase_off).
//   user tags    the application's per-call tag; operations with different tags are kept in
//                separate OpStats carrying the tag.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "plugin/abi.h"
#include "plugin/abi_v7.h"
#include "tests/scenarios/scenario_harness.h"

namespace ncclwatch::scenarios {
namespace {

using abi::EventDescrV7;

bool KernelPhaseEnv() {
  const char* v = std::getenv("NCCLWATCH_KERNEL_PHASE");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// Collectives whose kernels record their phases: with KernelPhase on (v7), every sampled
// collective reports the longest initial sync of its channels; otherwise no sync wait at all. The
// phases change nothing else: every collective stays timed, no channel event is an orphan.
TEST_P(ScenarioTest, KernelPhasesReportTheLongestInitialSyncPerCollective) {
  Nccl nccl(GetParam());
  ASSERT_TRUE(nccl.ok());
  nccl.Finalize(nccl.Init(Hash(11, 99), "probe", 1, 0));
  const Drops before = TotalsFor(Hash(11, 99), 0).last_drops;  // process-wide counters
  void* ctx = nccl.Init(Hash(11), "phases", 4, 1);
  const bool phases = GetParam() >= 7 && KernelPhaseEnv();
  EXPECT_EQ((nccl.mask() & abi::kKernelPhase) != 0, phases)
      << "mask 0x" << std::hex << nccl.mask() << ", NCCLWATCH_KERNEL_PHASE "
      << (KernelPhaseEnv() ? "1" : "not 1");

  constexpr int kOps = 12, kChannels = 4, kNoWait = 5;
  constexpr uint64_t kDuration = 100'000, kFinalSync = 2'000;
  std::vector<uint64_t> longest(kOps, 0);
  int expected_phases = 0, started_phases = 0;
  for (int s = 0; s < kOps; ++s) {
    // Uneven waits per channel; collective kNoWait arrived last everywhere: no initial sync.
    std::vector<uint64_t> sync(kChannels, 0);
    for (int c = 0; c < kChannels && s != kNoWait; ++c) {
      sync[c] = 1'000 * ((s * 5 + c * 3) % 7) + 37 * s + c + 1;
      longest[s] = std::max(longest[s], sync[c]);
    }
    expected_phases += phases ? kChannels * 2 + (s != kNoWait ? kChannels : 0) : 0;
    void* api = nccl.Api(ctx, "AllReduce", 1 << 16, false);
    void* op = nccl.Launch(ctx, api, "AllReduce", s, 1 << 16, kChannels);
    started_phases += nccl.RunChannelsWithPhases(ctx, op, kGpuEpoch + s * 200'000ull, kDuration,
                                                 sync, kFinalSync);
  }
  EXPECT_EQ(started_phases, expected_phases);
  if (GetParam() < 7) {
    // Even when asked to, the host hands a v4-v6 table no KernelPhase event (NCCL's v6 shim).
    void* op = nccl.Launch(ctx, nullptr, "AllReduce", kOps, 1 << 16, 1);
    EventDescrV7 k = Nccl::Descr(abi::kKernelCh, op);
    k.kernel_ch = {0, kGpuEpoch};
    void* channel = nccl.host().Start(ctx, k);
    const uint64_t events = nccl.host().events_started();
    EventDescrV7 p = Nccl::Descr(abi::kKernelPhase, channel);
    p.kernel_phase = {0, abi::kPhaseInitialSync, "initial_sync", kGpuEpoch};
    EXPECT_EQ(nccl.host().Start(ctx, p), nullptr);
    EXPECT_EQ(nccl.host().events_started(), events);
    abi::StateArgs args{};
    args.kernel_ch.p_timer = kGpuEpoch + 1'000;
    nccl.host().Record(channel, abi::kKernelChStop, &args);
    nccl.host().Stop(channel);
  }
  nccl.Finalize(ctx);

  Totals t = TotalsFor(Hash(11), 1);
  EXPECT_EQ(t.finals, 1);
  EXPECT_EQ(t.count["AllReduce"], static_cast<uint64_t>(GetParam() < 7 ? kOps + 1 : kOps));
  EXPECT_EQ(t.last_drops.untimed_ops, 0u);
  EXPECT_EQ(t.last_drops.orphans, before.orphans);
  EXPECT_EQ(t.last_drops.events_dropped, before.events_dropped);
  for (int s = 0; s < kOps; ++s) {
    const std::pair<std::string, uint64_t> key{"AllReduce", s};
    EXPECT_EQ(t.sampled[key], 1) << "collective " << s;
    if (!phases) {
      EXPECT_EQ(t.sync_wait[key], -1) << "collective " << s << ": no sync wait without phases";
    } else if (s == kNoWait) {
      // No initial-sync phase: 0 ("unknown"), or no column entry if it was alone in its report.
      EXPECT_TRUE(t.sync_wait[key] == 0 || t.sync_wait[key] == -1) << t.sync_wait[key];
    } else {
      EXPECT_EQ(t.sync_wait[key], static_cast<int64_t>(longest[s])) << "collective " << s;
    }
  }
}

// Collectives with two different user tags, untagged ones, and tagged sends: on v7 each tag gets
// its own OpStats; older tables never see a tag, so everything is untagged there.
TEST_P(ScenarioTest, UserTagsKeepOperationsApart) {
  Nccl nccl(GetParam());
  ASSERT_TRUE(nccl.ok());
  void* ctx = nccl.Init(Hash(12), "tags", 2, 0);
  constexpr uint64_t kStep = 1001, kLayer = (uint64_t{1} << 40) | 7;  // top bit: NCCL's own
  const std::vector<uint64_t> tags = {kStep, kStep,  kLayer, 0,     kStep,  kLayer,
                                      kStep, kLayer, 0,      kStep, kLayer, kStep};
  for (size_t i = 0; i < tags.size(); ++i) {
    void* api = nccl.Api(ctx, "AllReduce", 4096, false, tags[i]);
    void* op = nccl.Launch(ctx, api, "AllReduce", i, 4096, 2, tags[i]);
    nccl.RunChannels(ctx, op, 2, kGpuEpoch + i * 10'000ull, 2'000);
  }
  for (int i = 0; i < 3; ++i) {
    void* op = nccl.LaunchP2p(ctx, "Send", 1, 4096, 1, kStep);
    nccl.RunChannels(ctx, op, 1, kGpuEpoch + (20 + i) * 10'000ull, 1'000);
  }
  nccl.Finalize(ctx);

  Totals t = TotalsFor(Hash(12), 0);
  EXPECT_EQ(t.count["AllReduce"], tags.size());
  EXPECT_EQ(t.count["Send"], 3u);
  if (GetParam() < 7) {
    EXPECT_EQ(t.count["AllReduce@0"], tags.size());
    EXPECT_EQ(t.count["Send@0"], 3u);
    return;
  }
  EXPECT_EQ(t.count["AllReduce@" + std::to_string(kStep)], 6u);
  EXPECT_EQ(t.count["AllReduce@" + std::to_string(kLayer)], 4u);
  EXPECT_EQ(t.count["AllReduce@0"], 2u);
  EXPECT_EQ(t.count["Send@" + std::to_string(kStep)], 3u);
  EXPECT_EQ(t.count["Send@0"], 0u);
}

}  // namespace
}  // namespace ncclwatch::scenarios

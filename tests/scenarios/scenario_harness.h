// The harness of the plugin scenario tests (plugin_scenarios_test.cc): the stand-in agent the
// plugin streams to, a reader of what it recorded, and the NCCL side of one process.
//
//   AgentEnvironment  starts report_recorder once for the whole binary and sets the plugin's
//                     environment (NCCLWATCH_AGENT_ADDR, pool and ring sizes, job id, ...) before
//                     the first init; register it with ::testing::AddGlobalTestEnvironment.
//                     NCCLWATCH_KERNEL_PHASE is 1 unless the caller's environment sets it (a second
//                     ctest entry runs the v7 scenarios with 0): the plugin reads it once per
//                     process, and only its v7 table asks for KernelPhase.
//   TotalsFor         what one communicator rank reported, read from the recorder's file. The file
//                     is complete once the scenario's last finalize has returned.
//   Nccl              loads the real plugin (NCCLWATCH_PLUGIN_SO) through simjob's ProfilerHost
//                     for one ABI version and emits NCCL's event sequences from the calling thread.
//   ScenarioTest      the fixture, parameterized by the ABI version (4, 5, 6, 7).
//
// Failures are reported with EXPECT_* in the calling test. Nccl may be called from several
// threads at once, as NCCL's threads call the plugin.
#ifndef NCCLWATCH_TESTS_SCENARIOS_SCENARIO_HARNESS_H_
#define NCCLWATCH_TESTS_SCENARIOS_SCENARIO_HARNESS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "plugin/abi.h"
#include "plugin/abi_testing.h"
#include "plugin/abi_v7.h"
#include "tests/e2e/process.h"
#include "tests/simjob/profiler_host.h"

namespace ncclwatch::scenarios {

inline constexpr uint64_t kGpuEpoch = 1'700'000'000'000'000'000ull;
// NCCLWATCH_OP_POOL_SIZE that AgentEnvironment gives the plugin.
inline constexpr int kPoolSize = 16384;

// Starts the stand-in agent once for the whole binary and points the plugin at it. The plugin
// reads its environment at the first init of the process, and stays loaded (NODELETE) after that.
class AgentEnvironment : public ::testing::Environment {
 public:
  void SetUp() override;
  void TearDown() override;

 private:
  std::string dir_;
  std::unique_ptr<testing::Process> agent_;
};

// What one communicator rank reported, summed over its intervals (from report_recorder's file).
struct Drops {
  uint64_t events_dropped = 0, records_dropped = 0, untimed_ops = 0, orphans = 0;
};
struct Totals {
  int finals = 0;
  int nranks = 0;
  std::map<std::string, uint64_t> count;    // by "op", "op/algo_proto", "op>peer", "op@user_tag"
  std::map<std::string, uint64_t> untimed;  // by "op/algo_proto"
  std::map<std::string, uint64_t> untimed_bytes;
  uint64_t timed_total = 0;
  Drops last_drops;  // from the final report
  // Sampled collectives by (op, seq): how many times each was sampled, and its sync_wait_ns (-1:
  // its column had none; -2: its column had some, but not this sample's).
  std::map<std::pair<std::string, uint64_t>, int> sampled;
  std::map<std::pair<std::string, uint64_t>, int64_t> sync_wait;
};

// Reads the recorder's file; an unreadable line fails the calling test.
Totals TotalsFor(uint64_t comm_hash, int rank);

// The NCCL side of one process, for one ABI version: builds descriptors as NCCL does and calls
// the plugin from whichever thread the caller is on (each NCCL thread role is a caller here).
class Nccl {
 public:
  // Loads the plugin; on failure ok() is false and the calling test has failed.
  explicit Nccl(int abi_version);
  bool ok() const { return host_ != nullptr; }
  int abi() const { return abi_; }
  simjob::ProfilerHost& host() { return *host_; }
  // The activation mask the last Init returned.
  int mask() const { return mask_.load(); }

  // init; expects success and a context.
  void* Init(uint64_t hash, const char* name, int nranks, int rank, int n_nodes = 1);
  void Finalize(void* ctx) { host_->Finalize(ctx); }

  // The user thread's API events for one collective (v5+; NCCL's v4 shim drops them). Returns
  // the CollApi handle, which NCCL keeps as the Coll event's parent. `user_tag`: the call's v7
  // userProfilerTag (older tables never see it).
  void* Api(void* ctx, const char* func, size_t count, bool graph, uint64_t user_tag = 0);

  // The launching thread (user thread, NCCL's group thread or a CUDA host callback): Group and
  // Coll events. Coll stop means "enqueued"; the KernelCh children come later. Returns the Coll
  // handle (may be null if the plugin dropped it).
  void* Launch(void* ctx, void* coll_api, const char* func, uint64_t seq, size_t count,
               uint8_t channels, uint64_t user_tag = 0);

  void* LaunchP2p(void* ctx, const char* func, int peer, size_t count, uint8_t channels,
                  uint64_t user_tag = 0);

  // The proxy thread: KernelCh start, KernelChStop with the GPU timer, stop; per channel. The
  // kernels of these scenarios record no phases (NCCL then emits no KernelPhase events).
  void RunChannels(void* ctx, void* op, uint8_t channels, uint64_t gpu_start, uint64_t duration);

  // The same for a kernel that records its phases, on sync_ns.size() channels: channel c runs
  // [gpu_start + 100 c, + duration), of which the first sync_ns[c] are its initial sync and the
  // last final_sync_ns its final sync. When the last Init's mask asks for KernelPhase, each
  // channel's phases come between its KernelCh start and its KernelChStop, as NCCL 2.31's
  // profiler thread emits them once the channel has completed: per phase start, KernelPhaseStop
  // (31) with the phase's end, stop; a zero-length phase is left out, as NCCL does. Returns how
  // many KernelPhase events it started.
  int RunChannelsWithPhases(void* ctx, void* op, uint64_t gpu_start, uint64_t duration,
                            const std::vector<uint64_t>& sync_ns, uint64_t final_sync_ns);

  static abi::EventDescrV7 Descr(uint64_t type, void* parent) {
    return abi::MakeDescrV7(type, parent);
  }

 private:
  int abi_;
  int stream_ = 0;
  std::unique_ptr<simjob::ProfilerHost> host_;
  std::atomic<int> mask_{0};
};

class ScenarioTest : public ::testing::TestWithParam<int> {
 protected:
  // Distinct per ABI version and scenario, so that reports never mix.
  uint64_t Hash(int scenario, int i = 0) const {
    return (uint64_t{0x5ce} << 48) | (uint64_t(GetParam()) << 32) | (uint64_t(scenario) << 16) |
           uint64_t(i);
  }
};

}  // namespace ncclwatch::scenarios

#endif  // NCCLWATCH_TESTS_SCENARIOS_SCENARIO_HARNESS_H_

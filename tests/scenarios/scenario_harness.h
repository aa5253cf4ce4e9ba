// The harness of the plugin scenario tests (plugin_scenarios_test.cc): the stand-in agent the
// plugin streams to, a reader of what it recorded, and the NCCL side of one process.
//
//   AgentEnvironment  starts report_recorder once for the whole binary and sets the plugin's
//                     environment (NCCLWATCH_AGENT_ADDR, pool and ring sizes, job id, ...) before
//                     the first init; register it with ::testing::AddGlobalTestEnvironment.
//   TotalsFor         what one communicator rank reported, read from the recorder's file. The file
//                     is complete once the scenario's last finalize has returned.
//   Nccl              loads the real plugin (NCCLWATCH_PLUGIN_SO) through simjob's ProfilerHost
//                     for one ABI version and emits NCCL's event sequences from the calling thread.
//   ScenarioTest      the fixture, parameterized by the ABI version (4, 5, 6).
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

#include "gtest/gtest.h"
#include "plugin/abi.h"
#include "plugin/abi_testing.h"
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
  std::map<std::string, uint64_t> count;    // by "op", "op/algo_proto" and "op>peer"
  std::map<std::string, uint64_t> untimed;  // by "op/algo_proto"
  std::map<std::string, uint64_t> untimed_bytes;
  uint64_t timed_total = 0;
  Drops last_drops;  // from the final report
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
  // the CollApi handle, which NCCL keeps as the Coll event's parent.
  void* Api(void* ctx, const char* func, size_t count, bool graph);

  // The launching thread (user thread, NCCL's group thread or a CUDA host callback): Group and
  // Coll events. Coll stop means "enqueued"; the KernelCh children come later. Returns the Coll
  // handle (may be null if the plugin dropped it).
  void* Launch(void* ctx, void* coll_api, const char* func, uint64_t seq, size_t count,
               uint8_t channels);

  void* LaunchP2p(void* ctx, const char* func, int peer, size_t count, uint8_t channels);

  // The proxy thread: KernelCh start, KernelChStop with the GPU timer, stop; per channel.
  void RunChannels(void* ctx, void* op, uint8_t channels, uint64_t gpu_start, uint64_t duration);

  static abi::EventDescrV6 Descr(uint64_t type, void* parent) {
    return abi::MakeDescrV6(type, parent);
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

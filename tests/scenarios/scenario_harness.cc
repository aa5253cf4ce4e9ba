// The harness of the plugin scenario tests: the stand-in agent, the report reader and the NCCL
// side of one process. The contract is in scenario_harness.h.
#include "tests/scenarios/scenario_harness.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace ncclwatch::scenarios {
namespace {

using abi::EventDescrV7;
using simjob::ProfilerHost;

std::string g_reports_path;

}  // namespace

void AgentEnvironment::SetUp() {
  char tmpl[] = "/tmp/ncclwatch-scenarios-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  dir_ = tmpl;
  g_reports_path = dir_ + "/reports.txt";
  const std::string socket = "unix://" + dir_ + "/agent.sock";
  // The recorder is test scaffolding: in the ThreadSanitizer build it must not stop the run
  // over gRPC's internals, which TSan cannot see into.
  agent_ = std::make_unique<testing::Process>(
      std::vector<std::string>{NCCLWATCH_RECORDER_BIN, "--listen=" + socket,
                               "--out=" + g_reports_path},
      std::map<std::string, std::string>{{"TSAN_OPTIONS", "report_bugs=0"}}, dir_ + "/recorder.log",
      "--ready-fd");
  ASSERT_TRUE(agent_->started());
  setenv("NCCLWATCH_AGENT_ADDR", socket.c_str(), 1);
  setenv("NCCLWATCH_FLUSH_INTERVAL_MS", "200", 1);
  setenv("NCCLWATCH_OP_POOL_SIZE", std::to_string(kPoolSize).c_str(), 1);
  setenv("NCCLWATCH_RING_SIZE", "65536", 1);
  setenv("NCCLWATCH_FINALIZE_TIMEOUT_MS", "60000", 1);
  setenv("NCCLWATCH_DUMP_DIR", (dir_ + "/dump").c_str(), 1);
  setenv("NCCLWATCH_JOB_ID", "scenarios", 1);
  setenv("NCCLWATCH_KERNEL_PHASE", "1", /*overwrite=*/0);  // see scenario_harness.h
}

void AgentEnvironment::TearDown() {
  agent_.reset();
  std::string cmd = "rm -rf '" + dir_ + "'";
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir_.c_str());
}

Totals TotalsFor(uint64_t comm_hash, int rank) {
  Totals t;
  std::ifstream in(g_reports_path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string kind;
    uint64_t hash = 0;
    int r = -1;
    f >> kind >> hash >> r;
    if (hash != comm_hash || r != rank) continue;
    if (kind == "R") {
      int final = 0;
      Drops d;
      f >> t.nranks >> final >> d.events_dropped >> d.records_dropped >> d.untimed_ops >> d.orphans;
      if (final) {
        ++t.finals;
        t.last_drops = d;
      }
    } else if (kind == "S") {
      std::string op, algo_proto;
      int p2p = 0, peer = -1;
      uint64_t count = 0, untimed = 0, untimed_bytes = 0, user_tag = 0;
      f >> op >> p2p >> algo_proto >> peer >> count >> untimed >> untimed_bytes >> user_tag;
      t.count[op] += count;
      t.count[p2p ? op + ">" + std::to_string(peer) : op + "/" + algo_proto] += count;
      t.count[op + "@" + std::to_string(user_tag)] += count;
      t.untimed[op + "/" + algo_proto] += untimed;
      t.untimed_bytes[op + "/" + algo_proto] += untimed_bytes;
      t.timed_total += count;
    } else if (kind == "W") {
      std::string op;
      uint64_t seq = 0;
      int64_t wait = 0;
      f >> op >> seq >> wait;
      ++t.sampled[{op, seq}];
      t.sync_wait[{op, seq}] = wait;
    }
    EXPECT_FALSE(f.fail()) << "unreadable line: " << line;
  }
  return t;
}

Nccl::Nccl(int abi_version) : abi_(abi_version) {
  std::string error;
  host_ = ProfilerHost::Load(NCCLWATCH_PLUGIN_SO, abi_version, &error);
  EXPECT_NE(host_, nullptr) << error;
}

void* Nccl::Init(uint64_t hash, const char* name, int nranks, int rank, int n_nodes) {
  void* ctx = nullptr;
  int mask = 0;
  EXPECT_EQ(host_->Init(&ctx, hash, &mask, name, n_nodes, nranks, rank, nullptr), abi::kSuccess);
  EXPECT_NE(ctx, nullptr) << "no context for communicator " << name;
  mask_.store(mask);
  return ctx;
}

void* Nccl::Api(void* ctx, const char* func, size_t count, bool graph, uint64_t user_tag) {
  if (abi_ < 5) return nullptr;
  EventDescrV7 ga = Descr(abi::kGroupApi, nullptr);
  ga.group_api = {graph, 1};
  void* group_api = host_->Start(ctx, ga);
  host_->Record(group_api, abi::kGroupStartApiStop, nullptr);
  EventDescrV7 ca = Descr(abi::kCollApi, group_api);
  ca.coll_api = {func, count, "ncclFloat32", 0, &stream_, graph, user_tag};
  void* coll_api = host_->Start(ctx, ca);
  host_->Stop(coll_api);
  host_->Record(group_api, abi::kGroupEndApiStart, nullptr);
  host_->Stop(group_api);
  return coll_api;
}

void* Nccl::Launch(void* ctx, void* coll_api, const char* func, uint64_t seq, size_t count,
                   uint8_t channels, uint64_t user_tag) {
  void* group = host_->Start(ctx, Descr(abi::kGroup, nullptr));
  EventDescrV7 c = Descr(abi::kColl, abi_ >= 5 ? coll_api : group);
  c.coll = {seq, func,   nullptr,  nullptr, count,   0,     "ncclFloat32", channels,
            16,  "RING", "SIMPLE", group,   nullptr, false, user_tag};
  void* coll = host_->Start(ctx, c);
  host_->Stop(coll);
  host_->Stop(group);
  return coll;
}

void* Nccl::LaunchP2p(void* ctx, const char* func, int peer, size_t count, uint8_t channels,
                      uint64_t user_tag) {
  void* group = host_->Start(ctx, Descr(abi::kGroup, nullptr));
  EventDescrV7 p = Descr(abi::kP2p, group);
  p.p2p = {func, nullptr, "ncclInt8", count, peer, channels, group, user_tag};
  void* op = host_->Start(ctx, p);
  host_->Stop(op);
  host_->Stop(group);
  return op;
}

void Nccl::RunChannels(void* ctx, void* op, uint8_t channels, uint64_t gpu_start,
                       uint64_t duration) {
  for (uint8_t ch = 0; ch < channels; ++ch) {
    EventDescrV7 k = Descr(abi::kKernelCh, op);
    k.kernel_ch = {ch, gpu_start + ch * 100};
    void* h = host_->Start(ctx, k);
    abi::StateArgs args{};
    args.kernel_ch.p_timer = gpu_start + ch * 100 + duration;
    host_->Record(h, abi::kKernelChStop, &args);
    host_->Stop(h);
  }
}

int Nccl::RunChannelsWithPhases(void* ctx, void* op, uint64_t gpu_start, uint64_t duration,
                                const std::vector<uint64_t>& sync_ns, uint64_t final_sync_ns) {
  static constexpr const char* kNames[] = {"initial_sync", "compute", "final_sync"};
  const bool phases = (mask() & abi::kKernelPhase) != 0;
  int started = 0;
  for (size_t c = 0; c < sync_ns.size(); ++c) {
    const auto ch = static_cast<uint8_t>(c);
    const uint64_t start = gpu_start + c * 100, stop = start + duration;
    EventDescrV7 k = Descr(abi::kKernelCh, op);
    k.kernel_ch = {ch, start};
    void* h = host_->Start(ctx, k);
    const uint64_t bounds[4] = {start, start + sync_ns[c], stop - final_sync_ns, stop};
    for (uint8_t p = 0; phases && p < 3; ++p) {
      if (bounds[p] == bounds[p + 1]) continue;
      EventDescrV7 d = Descr(abi::kKernelPhase, h);
      d.kernel_phase = {ch, p, kNames[p], bounds[p]};
      void* phase = host_->Start(ctx, d);  // a null handle gets no state and no stop
      ++started;
      abi::StateArgs args{};
      args.kernel_ch.p_timer = bounds[p + 1];
      host_->Record(phase, abi::kKernelPhaseStop, &args);
      host_->Stop(phase);
    }
    abi::StateArgs args{};
    args.kernel_ch.p_timer = stop;
    host_->Record(h, abi::kKernelChStop, &args);
    host_->Stop(h);
  }
  return started;
}

}  // namespace ncclwatch::scenarios

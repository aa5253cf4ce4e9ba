// Benchmarks of the profiler plugin, called through its exported ncclProfiler_v5 or _v7 table
// exactly as NCCL calls it (the .so is dlopen'ed with RTLD_NOW|RTLD_LOCAL).
//
//   plugin_bench [--abi=5|7] [--in-flight=N] [--pool=N] [--agent=present|absent|hung]
//                [--report-seconds=N] [--plugin=PATH] [benchmark flags]
//
// --plugin: another profiler plugin than ncclwatch's (the no-op one, tests/bench/noop_plugin.cc:
// what the calls alone cost, beside NCCLWATCH_CHAIN_PLUGIN's figures).
//
// --in-flight=N: before measuring, N collectives are enqueued whose kernels never finish (a hung
// or stalled GPU, a CUDA graph, a long gradient-accumulation step): the micro-benchmarks then run
// with N operations in flight. --pool sets NCCLWATCH_OP_POOL_SIZE (default 2048: beyond it,
// operations are dropped and counted, which must cost no more than recording them).
//
// 1. Report volume: drives 50,000 collectives/s spread over 8 communicators for N seconds (each
//    with its launch-path events and 2 KernelCh channels) and counts the bytes the plugin sends to
//    a fake agent -- real gRPC over a unix socket, bytes as they arrive.
// 2. Google Benchmark micro-benchmarks of the callback paths:
//    - BM_LaunchPath: GroupApi start, state 23, CollApi start/stop, state 24, Group start,
//      Coll start/stop, Group stop, GroupApi stop (one collective as NCCL enqueues it).
//    - BM_P2pLaunchPath: the same for a Send or Recv (GroupApi, P2pApi, Group, P2p), cycling
//      over 7 peers and both directions, as an expert-parallel all-to-all enqueues them.
//    - BM_KernelChPath/C: per channel, KernelCh start + KernelChStop state + stop, with C channels
//      per collective (the last channel completes the operation and queues it for the flusher).
// The agent modes: present (reads everything), absent (nothing listens), hung (accepts the stream,
// never reads: gRPC flow control stalls the plugin's sender thread) -- the callbacks must not care.
// This program links no protobuf code of its own, like a training process; the fake agent uses
// gRPC's generic (byte-level) service.
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "benchmark/benchmark.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "plugin/abi.h"
#include "plugin/abi_testing.h"
#include "plugin/abi_v7.h"

namespace ncclwatch::bench {
namespace {

using namespace ncclwatch::abi;

// ---- fake agent ----------------------------------------------------------------------------

std::atomic<uint64_t> g_bytes{0};
std::atomic<uint64_t> g_messages{0};
std::atomic<uint64_t> g_streams_done{0};

// Reads every message of one stream and counts its bytes (or, when hung, never reads).
class CountingReactor : public grpc::ServerGenericBidiReactor {
 public:
  explicit CountingReactor(bool hung) : hung_(hung) {
    if (!hung) StartRead(&buffer_);
  }
  // A hung agent still has to end the call when the server shuts down; otherwise a pending read
  // fails and OnReadDone finishes it.
  void OnCancel() override {
    if (hung_) Finish(grpc::Status::CANCELLED);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      g_streams_done.fetch_add(1);
      response_.Clear();
      Finish(grpc::Status::OK);
      return;
    }
    g_bytes.fetch_add(buffer_.Length());
    g_messages.fetch_add(1);
    buffer_.Clear();
    StartRead(&buffer_);
  }
  void OnDone() override { delete this; }

 private:
  const bool hung_;
  grpc::ByteBuffer buffer_;
  grpc::ByteBuffer response_;
};

class FakeAgent : public grpc::CallbackGenericService {
 public:
  explicit FakeAgent(bool hung) : hung_(hung) {}
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    return new CountingReactor(hung_);
  }

 private:
  bool hung_;
};

// ---- driving the plugin ----------------------------------------------------------------------

ProfilerV5* g_v5 = nullptr;
ProfilerV7* g_v7 = nullptr;
int g_mask = 0;

// The loaded table's functions, whichever version: the callbacks have one shape except for the
// descriptor type, and every benchmark builds both descriptor versions the same way.
template <typename Descr>
Result Start(void* ctx, void** handle, Descr* d) {
  if constexpr (std::is_same_v<Descr, EventDescrV7>) {
    return g_v7->start_event(ctx, handle, d);
  } else {
    return g_v5->start_event(ctx, handle, d);
  }
}
Result Stop(void* h) { return g_v7 ? g_v7->stop_event(h) : g_v5->stop_event(h); }
Result Record(void* h, EventState s, StateArgs* a) {
  return g_v7 ? g_v7->record_event_state(h, s, a) : g_v5->record_event_state(h, s, a);
}

struct Comm {
  void* context = nullptr;
};

std::vector<Comm> InitComms(int n, uint64_t base_hash) {
  std::vector<Comm> comms(n);
  for (int i = 0; i < n; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "comm%d", i);
    if (g_v7) {
      g_v7->init(&comms[i].context, base_hash + i, &g_mask, name, 2, 16, 3, nullptr);
    } else {
      g_v5->init(&comms[i].context, base_hash + i, &g_mask, name, 2, 16, 3, nullptr);
    }
  }
  return comms;
}

// One collective as NCCL enqueues it; returns the Coll handle (the KernelCh parent).
template <typename Descr>
inline void* LaunchCollectiveAs(void* ctx, uint64_t seq, uint8_t channels) {
  static int stream_marker;
  void* group_api = nullptr;
  Descr ga = MakeDescr<Descr>(kGroupApi, nullptr);
  ga.group_api = {false, 1};
  Start(ctx, &group_api, &ga);
  Record(group_api, kGroupStartApiStop, nullptr);
  void* coll_api = nullptr;
  Descr ca = MakeDescr<Descr>(kCollApi, group_api);
  ca.coll_api.func = "AllReduce";
  ca.coll_api.count = 1 << 20;
  ca.coll_api.datatype = "ncclFloat32";
  ca.coll_api.stream = &stream_marker;
  Start(ctx, &coll_api, &ca);
  if (coll_api) Stop(coll_api);
  Record(group_api, kGroupEndApiStart, nullptr);
  void* group = nullptr;
  Descr gr = MakeDescr<Descr>(kGroup, nullptr);
  Start(ctx, &group, &gr);
  void* coll = nullptr;
  Descr c = MakeDescr<Descr>(kColl, coll_api);
  c.rank = 3;
  c.coll.seq_number = seq;
  c.coll.func = "AllReduce";
  c.coll.count = 1 << 20;
  c.coll.datatype = "ncclFloat32";
  c.coll.n_channels = channels;
  c.coll.n_warps = 16;
  c.coll.algo = "RING";
  c.coll.proto = "SIMPLE";
  c.coll.parent_group = group;
  Start(ctx, &coll, &c);
  if (coll) Stop(coll);
  if (group) Stop(group);
  if (group_api) Stop(group_api);
  return coll;
}

// One exchange as NCCL enqueues a Send or Recv: GroupApi, P2pApi start/stop, Group, P2p
// start/stop (no channels), Group stop, GroupApi stop. The plugin numbers it per peer and
// direction (one relaxed fetch_add on the communicator's counters).
template <typename Descr>
inline void* LaunchP2pAs(void* ctx, int peer, bool send) {
  static int stream_marker;
  const char* func = send ? "Send" : "Recv";
  void* group_api = nullptr;
  Descr ga = MakeDescr<Descr>(kGroupApi, nullptr);
  ga.group_api = {false, 1};
  Start(ctx, &group_api, &ga);
  void* p2p_api = nullptr;
  Descr pa = MakeDescr<Descr>(kP2pApi, group_api);
  pa.p2p_api.func = func;
  pa.p2p_api.count = 1 << 20;
  pa.p2p_api.datatype = "ncclFloat32";
  pa.p2p_api.stream = &stream_marker;
  Start(ctx, &p2p_api, &pa);
  if (p2p_api) Stop(p2p_api);
  void* group = nullptr;
  Descr gr = MakeDescr<Descr>(kGroup, nullptr);
  Start(ctx, &group, &gr);
  void* op = nullptr;
  Descr p = MakeDescr<Descr>(kP2p, p2p_api);
  p.rank = 3;
  p.p2p.func = func;
  p.p2p.datatype = "ncclFloat32";
  p.p2p.count = 1 << 20;
  p.p2p.peer = peer;
  p.p2p.n_channels = 0;
  p.p2p.parent_group = group;
  Start(ctx, &op, &p);
  if (op) Stop(op);
  if (group) Stop(group);
  if (group_api) Stop(group_api);
  return op;
}

template <typename Descr>
inline void RunChannelAs(void* ctx, void* coll, uint8_t channel, uint64_t start, uint64_t stop) {
  void* kh = nullptr;
  Descr k = MakeDescr<Descr>(kKernelCh, coll);
  k.kernel_ch = {channel, start};
  Start(ctx, &kh, &k);
  if (kh == nullptr) return;
  StateArgs args;
  args.kernel_ch.p_timer = stop;
  Record(kh, kKernelChStop, &args);
  Stop(kh);
}

inline void* LaunchCollective(void* ctx, uint64_t seq, uint8_t channels) {
  return g_v7 ? LaunchCollectiveAs<EventDescrV7>(ctx, seq, channels)
              : LaunchCollectiveAs<EventDescrV5>(ctx, seq, channels);
}
inline void RunChannel(void* ctx, void* coll, uint8_t channel, uint64_t start, uint64_t stop) {
  if (g_v7) {
    RunChannelAs<EventDescrV7>(ctx, coll, channel, start, stop);
  } else {
    RunChannelAs<EventDescrV5>(ctx, coll, channel, start, stop);
  }
}

// Enqueues `n` collectives whose kernels never finish (their channels never start): they stay in
// flight for the rest of the process.
void HoldInFlight(int n) {
  static std::vector<Comm> comms = InitComms(1, 0x4000);
  for (int i = 0; i < n; ++i) LaunchCollective(comms[0].context, i, 4);
}

uint64_t g_seq = 0;

void BM_LaunchPath(benchmark::State& state) {
  static std::vector<Comm> comms = InitComms(1, 0x1000);
  void* ctx = comms[0].context;
  for (auto _ : state) {
    // No channels: the slot is released at Coll stop, so the pool never fills.
    benchmark::DoNotOptimize(LaunchCollective(ctx, g_seq++, 0));
  }
}

// An all-to-all's worth of exchanges: a Send and a Recv with each of 7 peers, round after round.
void BM_P2pLaunchPath(benchmark::State& state) {
  static std::vector<Comm> comms = InitComms(1, 0x3000);
  void* ctx = comms[0].context;
  int i = 0;
  for (auto _ : state) {
    const int peer = (i >> 1) % 7;
    const bool send = (i & 1) == 0;
    benchmark::DoNotOptimize(g_v7 ? LaunchP2pAs<EventDescrV7>(ctx, peer, send)
                                  : LaunchP2pAs<EventDescrV5>(ctx, peer, send));
    ++i;
  }
}

void BM_KernelChPath(benchmark::State& state) {
  static std::vector<Comm> comms = InitComms(1, 0x2000);
  void* ctx = comms[0].context;
  const uint8_t channels = static_cast<uint8_t>(state.range(0));
  constexpr int kBatch = 256;  // operations launched (untimed) per measured batch
  std::vector<void*> ops(kBatch);
  std::vector<double> batch_ns;
  batch_ns.reserve(1 << 20);
  uint64_t t = 1'700'000'000'000'000'000ull;
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) ops[i] = LaunchCollective(ctx, g_seq++, channels);
    auto begin = std::chrono::steady_clock::now();
    for (int i = 0; i < kBatch; ++i) {
      for (uint8_t ch = 0; ch < channels; ++ch) RunChannel(ctx, ops[i], ch, t, t + 50'000);
      t += 100'000;
    }
    auto end = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(end - begin).count());
    if (batch_ns.size() < batch_ns.capacity())
      batch_ns.push_back(std::chrono::duration<double, std::nano>(end - begin).count());
  }
  // Cost of one channel (KernelCh start + KernelChStop + stop), from the measured time only: the
  // mean, and the median batch's (the flusher thread, saturated by this loop's ~25 million
  // completions a second, slows some batches down; no job comes near that rate).
  state.counters["per_channel"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * kBatch * channels,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  if (!batch_ns.empty()) {
    std::nth_element(batch_ns.begin(), batch_ns.begin() + batch_ns.size() / 2, batch_ns.end());
    state.counters["per_channel_p50"] = batch_ns[batch_ns.size() / 2] / (kBatch * channels);
  }
}

BENCHMARK(BM_LaunchPath)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_P2pLaunchPath)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_KernelChPath)
    ->Arg(1)
    ->Arg(4)
    ->UseManualTime()
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);

// 50,000 collectives/s over 8 communicators for `seconds`; returns bytes/s the agent received.
void MeasureReportVolume(double seconds, const char* mode) {
  constexpr int kComms = 8;
  constexpr int kRate = 50'000;
  constexpr int kTicksPerSecond = 1000;
  std::vector<Comm> comms = InitComms(kComms, 0x3000);
  uint64_t before_bytes = g_bytes.load(), before_msgs = g_messages.load();
  uint64_t gpu = 1'700'000'000'000'000'000ull;
  auto start = std::chrono::steady_clock::now();
  const int ticks = static_cast<int>(seconds * kTicksPerSecond);
  std::vector<uint64_t> seq(kComms, 0);
  for (int tick = 0; tick < ticks; ++tick) {
    for (int i = 0; i < kRate / kTicksPerSecond; ++i) {
      int c = i % kComms;
      void* op = LaunchCollective(comms[c].context, seq[c]++, 2);
      RunChannel(comms[c].context, op, 0, gpu, gpu + 15'000);
      RunChannel(comms[c].context, op, 1, gpu + 1'000, gpu + 16'000);
      gpu += 20'000;
    }
    std::this_thread::sleep_until(start + std::chrono::microseconds((tick + 1) * 1000));
  }
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  uint64_t streams_before = g_streams_done.load();
  // Finalizing the last communicator sends the last reports and closes the stream gracefully.
  for (Comm& c : comms) g_v7 ? g_v7->finalize(c.context) : g_v5->finalize(c.context);
  bool present = std::strcmp(mode, "present") == 0;
  if (present) {
    // The stream's end arrives after all its messages: wait for it (bounded) instead of sleeping.
    for (int i = 0; i < 2000 && g_streams_done.load() == streams_before; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  uint64_t bytes = g_bytes.load() - before_bytes, msgs = g_messages.load() - before_msgs;
  std::printf(
      "report volume: %d collectives/s on %d communicators for %.1f s -> %llu reports, "
      "%.1f KiB/s per rank (%.1f bytes per collective)\n",
      kRate, kComms, elapsed, static_cast<unsigned long long>(msgs), bytes / elapsed / 1024.0,
      static_cast<double>(bytes) / (kRate * elapsed));
}

}  // namespace
}  // namespace ncclwatch::bench

int main(int argc, char** argv) {
  using namespace ncclwatch::bench;
  std::string mode = "present";
  double report_seconds = 3;
  int abi = 5, in_flight = 0, pool = 2048;
  std::string plugin = NCCLWATCH_PLUGIN_SO;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--agent=", 0) == 0) {
      mode = a.substr(8);
    } else if (a.rfind("--report-seconds=", 0) == 0) {
      report_seconds = std::stod(a.substr(17));
    } else if (a.rfind("--abi=", 0) == 0) {
      abi = std::stoi(a.substr(6));
    } else if (a.rfind("--in-flight=", 0) == 0) {
      in_flight = std::stoi(a.substr(12));
    } else if (a.rfind("--pool=", 0) == 0) {
      pool = std::stoi(a.substr(7));
    } else if (a.rfind("--plugin=", 0) == 0) {
      plugin = a.substr(9);
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (mode != "present" && mode != "absent" && mode != "hung") {
    std::fprintf(stderr, "plugin_bench: --agent must be present, absent or hung\n");
    return 2;
  }
  if ((abi != 5 && abi != 7) || in_flight < 0 || pool < 64) {
    std::fprintf(stderr, "plugin_bench: --abi is 5 or 7, --in-flight >= 0, --pool >= 64\n");
    return 2;
  }
  std::string socket = "/tmp/ncclwatch-bench-" + std::to_string(getpid()) + ".sock";
  std::unique_ptr<FakeAgent> service;
  std::unique_ptr<grpc::Server> server;
  if (mode != "absent") {
    service = std::make_unique<FakeAgent>(mode == "hung");
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + socket, grpc::InsecureServerCredentials());
    builder.RegisterCallbackGenericService(service.get());
    server = builder.BuildAndStart();
    if (!server) {
      std::fprintf(stderr, "plugin_bench: cannot listen on %s\n", socket.c_str());
      return 1;
    }
  }
  setenv("NCCLWATCH_AGENT_ADDR", ("unix://" + socket).c_str(), 1);
  // Room for many completions of the micro-benchmarks between two drains of the flusher (the
  // largest ring the plugin accepts); beyond it they are dropped and counted, as in a job.
  setenv("NCCLWATCH_RING_SIZE", "262144", 1);
  setenv("NCCLWATCH_OP_POOL_SIZE", std::to_string(pool).c_str(), 1);
  void* lib = dlopen(plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "plugin_bench: %s\n", dlerror());
    return 1;
  }
  if (abi == 7) {
    g_v7 = static_cast<ncclwatch::abi::ProfilerV7*>(dlsym(lib, "ncclProfiler_v7"));
  } else {
    g_v5 = static_cast<ncclwatch::abi::ProfilerV5*>(dlsym(lib, "ncclProfiler_v5"));
  }
  if (g_v7 == nullptr && g_v5 == nullptr) {
    std::fprintf(stderr, "plugin_bench: %s has no ncclProfiler_v%d\n", plugin.c_str(), abi);
    return 1;
  }
  std::printf("agent: %s abi: %d in_flight: %d pool: %d\n", mode.c_str(), abi, in_flight, pool);
  if (report_seconds > 0) MeasureReportVolume(report_seconds, mode.c_str());
  HoldInFlight(in_flight);

  int bench_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&bench_argc, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (server) server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
  unlink(socket.c_str());
  std::fflush(stdout);
  _exit(0);  // skip the plugin's exit flush: a hung agent would hold it for the finalize timeout
}

// The real plugin, loaded through the simulated NCCL host (tests/simjob/profiler_host.h) the way
// NCCL loads it, driven through each ABI version (v4, v5, v6, v7) into every situation of
// docs/nccl-profiler-abi.md §2–§10 that a production plugin meets:
//
//   concurrent init; user, launch, host-callback and proxy threads calling at once; KernelCh
//   children that start after their parent stopped; NULL context and NULL eStateArgs; PXN proxy
//   events from another process; graph-captured operations replayed from host callbacks; one-rank
//   communicators; split and shrink children that outlive their parent; destroy, dlclose, reload
//   and re-init; copy-engine collectives (v6+); 8 communicators x 2 threads x 1M events; and, in
//   plugin_v7_scenarios.cc, KernelPhase events and user tags (v7).
//
// What the plugin recorded is checked from the reports it streams over real gRPC to
// report_recorder, a stand-in agent that writes what they say to a file. Every scenario finalizes
// all of its communicators, and the last finalize waits until the agent has read everything, so the
// file is complete when the scenario's last finalize returns: no sleeps, no polling.
//
// The suite runs in the plain, AddressSanitizer+UBSan and ThreadSanitizer builds (scripts/test).
// NCCLWATCH_STRESS_EVENTS (default 1000000) sets the events per thread of the stress scenario.
//
// The harness (the stand-in agent, the report reader, the NCCL side) is scenario_harness.h.
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "plugin/abi.h"
#include "tests/scenarios/scenario_harness.h"

namespace ncclwatch::scenarios {
namespace {

using abi::EventDescrV7;

TEST_P(ScenarioTest, ConcurrentInitGivesEachCommunicatorItsOwnContext) {
  Nccl nccl(GetParam());
  ASSERT_TRUE(nccl.ok());
  constexpr int kComms = 8, kOps = 20;
  std::vector<void*> ctx(kComms);
  std::barrier start(kComms);
  std::vector<std::thread> threads;
  for (int i = 0; i < kComms; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();  // as ncclCommInitAll runs one init per device at once
      ctx[i] = nccl.Init(Hash(1, i), "initall", kComms, i);
      for (int s = 0; s < kOps; ++s) {
        void* api = nccl.Api(ctx[i], "AllReduce", 1024, false);
        void* op = nccl.Launch(ctx[i], api, "AllReduce", s, 1024, 2);
        nccl.RunChannels(ctx[i], op, 2, kGpuEpoch + s * 10'000, 5'000);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(std::set<void*>(ctx.begin(), ctx.end()).size(), size_t{kComms});
  for (void* c : ctx) nccl.Finalize(c);
  for (int i = 0; i < kComms; ++i) {
    Totals t = TotalsFor(Hash(1, i), i);
    EXPECT_EQ(t.finals, 1) << "comm " << i;
    EXPECT_EQ(t.nranks, kComms);
    EXPECT_EQ(t.count["AllReduce"], uint64_t{kOps}) << "comm " << i;
  }
}

// The user thread issues API calls, a launch thread enqueues collectives, the proxy thread runs
// their channels after the Coll events have stopped, and a host-callback thread launches and
// completes point-to-point operations: all on one communicator, at once.
TEST_P(ScenarioTest, UserLaunchHostCallbackAndProxyThreadsAtOnce) {
  Nccl nccl(GetParam());
  ASSERT_TRUE(nccl.ok());
  void* ctx = nccl.Init(Hash(2), "threads", 4, 1);
  constexpr int kColls = 5000, kP2p = 3000, kApi = 5000;
  // Launch -> proxy hand-off, bounded like a GPU queue (host-side scaffolding, not the plugin).
  constexpr int kWindow = 256;
  std::vector<std::atomic<void*>> queue(kWindow);
  std::atomic<int> head{0}, tail{0};
  std::thread launch([&] {
    for (int s = 0; s < kColls; ++s) {
      while (head.load(std::memory_order_acquire) - tail.load(std::memory_order_acquire) ==
             kWindow) {
        std::this_thread::yield();
      }
      void* op = nccl.Launch(ctx, nullptr, "AllReduce", s, 4096, 4);
      queue[s % kWindow].store(op, std::memory_order_relaxed);
      head.store(s + 1, std::memory_order_release);
    }
  });
  std::thread proxy([&] {
    for (int s = 0; s < kColls; ++s) {
      while (head.load(std::memory_order_acquire) == s) std::this_thread::yield();
      void* op = queue[s % kWindow].load(std::memory_order_relaxed);
      // Channels start in reverse order and one stops before the next starts.
      for (int ch = 3; ch >= 0; --ch) {
        EventDescrV7 k = Nccl::Descr(abi::kKernelCh, op);
        k.kernel_ch = {static_cast<uint8_t>(ch), kGpuEpoch + s * 20'000ull};
        void* h = nccl.host().Start(ctx, k);
        abi::StateArgs args{};
        args.kernel_ch.p_timer = kGpuEpoch + s * 20'000ull + 8'000 + ch;
        nccl.host().Record(h, abi::kKernelChStop, &args);
        nccl.host().Stop(h);
      }
      tail.store(s + 1, std::memory_order_release);
    }
  });
  std::thread callback([&] {
    for (int i = 0; i < kP2p; ++i) {
      void* op = nccl.LaunchP2p(ctx, i % 2 ? "Recv" : "Send", 2, 65536, 1);
      nccl.RunChannels(ctx, op, 1, kGpuEpoch + i * 30'000ull, 3'000);
    }
  });
  std::thread user([&] {
    for (int i = 0; i < kApi; ++i) nccl.Api(ctx, "AllReduce", 4096, false);
  });
  for (auto* t : {&launch, &proxy, &callback, &user}) t->join();
  nccl.Finalize(ctx);
  Totals t = TotalsFor(Hash(2), 1);
  EXPECT_EQ(t.finals, 1);
  EXPECT_EQ(t.count["AllReduce/RING_SIMPLE"], uint64_t{kColls});
  EXPECT_EQ(t.count["Send>2"], uint64_t{kP2p / 2});
  EXPECT_EQ(t.count["Recv>2"], uint64_t{kP2p / 2});
  EXPECT_EQ(t.last_drops.records_dropped, 0u);
  EXPECT_EQ(t.last_drops.untimed_ops, 0u);
}

// NCCL may hand a NULL context (a communicator whose init gave none) and NULL eStateArgs; neither
// may crash, and an operation whose KernelChStop came without arguments is counted as untimed.
TEST_P(ScenarioTest, NullContextAndNullStateArgs) {
  Nccl nccl(GetParam());
  ASSERT_TRUE(nccl.ok());
  void* ctx = nccl.Init(Hash(3), "nulls", 2, 0);
  EventDescrV7 c = Nccl::Descr(abi::kColl, nullptr);
  c.coll = {0,      "AllReduce", nullptr, nullptr, 64,    0, "ncclFloat32", 1, 16,
            "RING", "LL",        nullptr, nullptr, false, 0};
  EXPECT_EQ(nccl.host().Start(nullptr, c), nullptr);  // NULL context: nothing recorded
  void* group_api =
      nccl.abi() >= 5 ? nccl.host().Start(ctx, Nccl::Descr(abi::kGroupApi, nullptr)) : nullptr;
  nccl.host().Record(group_api, abi::kGroupStartApiStop, nullptr);
  void* op = nccl.Launch(ctx, nullptr, "AllReduce", 0, 64, 1);
  ASSERT_NE(op, nullptr);
  EventDescrV7 k = Nccl::Descr(abi::kKernelCh, op);
  k.kernel_ch = {0, kGpuEpoch};
  void* h = nccl.host().Start(ctx, k);
  ASSERT_NE(h, nullptr);
  nccl.host().Record(h, abi::kKernelChStop, nullptr);  // no arguments: no stop timestamp
  nccl.host().Stop(h);
  nccl.host().Stop(group_api);
  void* timed = nccl.Launch(ctx, nullptr, "AllReduce", 1, 64, 1);
  nccl.RunChannels(ctx, timed, 1, kGpuEpoch + 10'000, 2'000);
  nccl.Finalize(ctx);
  nccl.Finalize(nullptr);  // NCCL does not, but a NULL context must be harmless
  Totals t = TotalsFor(Hash(3), 0);
  EXPECT_EQ(t.count["AllReduce"], 1u);
  EXPECT_EQ(t.last_drops.untimed_ops, 1u);
}

// Under PXN another process's proxy thread emits ProxyOp/ProxyStep/NetPlugin events whose context
// and parentObj point into the originating process (docs/nccl-profiler-abi.md §10.2). A KernelCh
// whose parent is not one of our operations is refused without being read.
TEST_P(ScenarioTest, PxnEventsFromAnotherProcessAreNeverDereferenced) {
  Nccl nccl(GetParam());
  ASSERT_TRUE(nccl.ok());
  void* ctx = nccl.Init(Hash(4), "pxn", 8, 3, 2);
  void* op = nccl.Launch(ctx, nullptr, "AllGather", 0, 1 << 20, 1);
  // A communicator finalized now reports the process-wide orphan counter's starting value.
  nccl.Finalize(nccl.Init(Hash(4, 1), "probe", 1, 0));
  // Addresses in an unmapped page: any read would fault.
  void* foreign = reinterpret_cast<void*>(uintptr_t{0x10});
  for (uint64_t type :
       {uint64_t{abi::kProxyOp}, uint64_t{abi::kProxyStep}, uint64_t{abi::kNetPlugin}}) {
    EventDescrV7 d = Nccl::Descr(type, foreign);
    d.proxy_op.pid = getpid() + 1;
    EXPECT_EQ(nccl.host().Start(foreign, d), nullptr);
  }
  EventDescrV7 k = Nccl::Descr(abi::kKernelCh, foreign);
  EXPECT_EQ(nccl.host().Start(ctx, k), nullptr);
  uint64_t unrelated[32] = {};  // readable, but not an operation of ours
  EventDescrV7 k2 = Nccl::Descr(abi::kKernelCh, unrelated);
  EXPECT_EQ(nccl.host().Start(ctx, k2), nullptr);
  nccl.RunChannels(ctx, op, 1, kGpuEpoch, 40'000);  // the real channel still completes it
  nccl.Finalize(ctx);
  const uint64_t before = TotalsFor(Hash(4, 1), 0).last_drops.orphans;
  Totals t = TotalsFor(Hash(4), 3);
  EXPECT_EQ(t.count["AllGather"], 1u);
  EXPECT_EQ(t.last_drops.orphans, before + 2);
}

// A captured graph emits its API events once, with graphCaptured set; each replay then fires the
// Group, Coll and KernelCh events from a CUDA host-callback thread
// (docs/nccl-profiler-abi.md §8.2).
TEST_P(ScenarioTest, GraphCapturedCollectivesAreRecordedOnEveryReplay) {
  Nccl nccl(GetParam());
  ASSERT_TRUE(nccl.ok());
  void* ctx = nccl.Init(Hash(5), "graph", 4, 2);
  void* captured_api = nccl.Api(ctx, "ReduceScatter", 1 << 16, true);
  constexpr int kReplays = 200;
  std::thread host_callback([&] {
    for (int r = 0; r < kReplays; ++r) {
      void* op = nccl.Launch(ctx, captured_api, "ReduceScatter", r, 1 << 16, 2);
      nccl.RunChannels(ctx, op, 2, kGpuEpoch + r * 50'000ull, 20'000);
    }
  });
  host_callback.join();
  nccl.Finalize(ctx);
  EXPECT_EQ(TotalsFor(Hash(5), 2).count["ReduceScatter"], uint64_t{kReplays});
}

// NCCL emits no collective events on a one-rank communicator, but Send/Recv to self go through
// the p2p path (docs/nccl-profiler-abi.md §10.1).
TEST_P(ScenarioTest, OneRankCommunicatorRecordsSendRecvToSelf) {
  Nccl nccl(GetParam());
  ASSERT_TRUE(nccl.ok());
  void* ctx = nccl.Init(Hash(6), "solo", 1, 0);
  for (int i = 0; i < 10; ++i) {
    for (const char* f : {"Send", "Recv"}) {
      void* op = nccl.LaunchP2p(ctx, f, 0, 4096, 1);
      nccl.RunChannels(ctx, op, 1, kGpuEpoch + i * 10'000ull, 1'000);
    }
  }
  nccl.Finalize(ctx);
  Totals t = TotalsFor(Hash(6), 0);
  EXPECT_EQ(t.nranks, 1);
  EXPECT_EQ(t.count["Send>0"], 10u);
  EXPECT_EQ(t.count["Recv>0"], 10u);
}

// Split and shrink children are ordinary new communicators to the plugin (docs/nccl-profiler-abi.md
// §9.2); they may outlive their parent, and the parent's operations in flight outlive its finalize.
TEST_P(ScenarioTest, SplitAndShrinkChildrenOutliveTheirParent) {
  Nccl nccl(GetParam());
  ASSERT_TRUE(nccl.ok());
  void* parent = nccl.Init(Hash(7, 0), "world", 8, 5);
  void* split_a = nccl.Init(Hash(7, 1), "tp", 4, 1);
  void* split_b = nccl.Init(Hash(7, 2), "dp", 2, 0);
  void* shrunk = nccl.Init(Hash(7, 3), "world", 7, 4);
  void* pending = nccl.Launch(parent, nullptr, "AllReduce", 0, 256, 1);
  nccl.Finalize(parent);  // its last operation's kernel has not finished yet
  nccl.RunChannels(parent, pending, 1, kGpuEpoch, 1'000);  // the proxy finishes it afterwards
  int n = 0;
  for (void* child : {split_a, split_b, shrunk}) {
    ++n;
    for (int s = 0; s < 5 * n; ++s) {
      void* op = nccl.Launch(child, nullptr, "AllGather", s, 1 << 12, 2);
      nccl.RunChannels(child, op, 2, kGpuEpoch + s * 10'000ull, 3'000);
    }
  }
  for (void* child : {split_a, split_b, shrunk}) nccl.Finalize(child);
  EXPECT_EQ(TotalsFor(Hash(7, 0), 5).finals, 1);
  EXPECT_EQ(TotalsFor(Hash(7, 1), 1).count["AllGather"], 5u);
  EXPECT_EQ(TotalsFor(Hash(7, 2), 0).count["AllGather"], 10u);
  Totals shrink = TotalsFor(Hash(7, 3), 4);
  EXPECT_EQ(shrink.count["AllGather"], 15u);
  EXPECT_EQ(shrink.nranks, 7);
}

// After the last communicator NCCL dlcloses the plugin and reloads it for the next one
// (docs/nccl-profiler-abi.md §2.3); the same communicator hash may come back.
TEST_P(ScenarioTest, DestroyDlcloseReloadAndReinit) {
  for (int round = 1; round <= 3; ++round) {
    Nccl nccl(GetParam());
    ASSERT_TRUE(nccl.ok());
    void* ctx = nccl.Init(Hash(8), "again", 2, 1);
    for (int s = 0; s < round; ++s) {
      void* op = nccl.Launch(ctx, nullptr, "Broadcast", s, 1 << 10, 1);
      nccl.RunChannels(ctx, op, 1, kGpuEpoch + s * 10'000ull, 2'000);
    }
    nccl.Finalize(ctx);
  }  // ~Nccl dlcloses
  Totals t = TotalsFor(Hash(8), 1);
  EXPECT_EQ(t.finals, 3);
  EXPECT_EQ(t.count["Broadcast"], 1u + 2u + 3u);
}

// v6+ copy-engine collectives carry no timing but do carry what they move: they are counted with
// their bytes. Older tables do not ask for them.
TEST_P(ScenarioTest, CopyEngineCollectivesAreCountedOnV6) {
  Nccl nccl(GetParam());
  ASSERT_TRUE(nccl.ok());
  void* ctx = nccl.Init(Hash(9), "ce", 4, 0);
  if (GetParam() < 6) {
    EXPECT_EQ(nccl.mask() & abi::kCeColl, 0);
    nccl.Finalize(ctx);
    return;
  }
  EXPECT_NE(nccl.mask() & abi::kCeColl, 0);
  constexpr int kOps = 7;
  for (int i = 0; i < kOps; ++i) {
    void* api = nccl.Api(ctx, "AllGather", 1 << 20, false);
    EventDescrV7 ce = Nccl::Descr(abi::kCeColl, api);
    ce.ce_coll = {static_cast<uint64_t>(i),
                  "AllGather",
                  nullptr,
                  nullptr,
                  1 << 20,
                  0,
                  "ncclInt8",
                  "MC",
                  true,
                  4,
                  1,
                  static_cast<uint32_t>(i),
                  nullptr,
                  0};
    void* h = nccl.host().Start(ctx, ce);
    ASSERT_NE(h, nullptr);
    EventDescrV7 sync = Nccl::Descr(abi::kCeSync, h);
    sync.ce_sync = {false, 4};
    EventDescrV7 batch = Nccl::Descr(abi::kCeBatch, h);
    batch.ce_batch = {4, 1 << 20, true};
    nccl.host().Stop(nccl.host().Start(ctx, sync));  // children: not needed, NULL handles
    nccl.host().Stop(nccl.host().Start(ctx, batch));
    nccl.host().Stop(h);
  }
  nccl.Finalize(ctx);
  Totals t = TotalsFor(Hash(9), 0);
  EXPECT_EQ(t.untimed["AllGather/CE_MC"], uint64_t{kOps});
  EXPECT_EQ(t.untimed_bytes["AllGather/CE_MC"], uint64_t{kOps} << 20);
  EXPECT_EQ(t.timed_total, 0u);
}

// 8 communicators, each with a launch thread and a proxy thread making at least
// NCCLWATCH_STRESS_EVENTS callbacks each (default a million, 200,000 under a sanitizer); every
// collective is accounted for exactly.
TEST_P(ScenarioTest, EightCommunicatorsTwoThreadsEachAMillionEvents) {
  const char* env = std::getenv("NCCLWATCH_STRESS_EVENTS");
#ifdef NCCLWATCH_SANITIZED
  constexpr uint64_t kDefaultEvents = 200'000;  // CMakeLists.txt: a fifth under a sanitizer
#else
  constexpr uint64_t kDefaultEvents = 1'000'000;
#endif
  const uint64_t events = env != nullptr ? std::strtoull(env, nullptr, 10) : kDefaultEvents;
  Nccl nccl(GetParam());
  ASSERT_TRUE(nccl.ok());
  constexpr int kComms = 8;
  constexpr uint8_t kChannels = 4;
  // Callbacks per collective on the launch thread: Group and Coll start+stop, plus on v5+ the
  // GroupApi (start, two states, stop) and CollApi (start, stop) events.
  const uint64_t launch_events = GetParam() >= 5 ? 10 : 4;
  const uint64_t colls = (events + launch_events - 1) / launch_events;
  ASSERT_GE(colls * kChannels * 3, events);  // the proxy thread makes at least as many
  nccl.Finalize(nccl.Init(Hash(10, 99), "probe", 1, 0));
  // Both counters are process-wide: a probe communicator reports their starting values.
  const Drops before = TotalsFor(Hash(10, 99), 0).last_drops;
  std::vector<void*> ctx(kComms);
  for (int c = 0; c < kComms; ++c) ctx[c] = nccl.Init(Hash(10, c), "stress", kComms, c);
  std::vector<std::thread> threads;
  // In flight per communicator stays below the pool size: nothing may be dropped for lack of room.
  constexpr int kWindow = 1024;
  static_assert(kComms * kWindow < kPoolSize);
  struct Lane {
    std::vector<std::atomic<void*>> queue = std::vector<std::atomic<void*>>(kWindow);
    std::atomic<uint64_t> head{0}, tail{0};
  };
  std::vector<Lane> lanes(kComms);
  for (int c = 0; c < kComms; ++c) {
    threads.emplace_back([&, c] {
      Lane& lane = lanes[c];
      for (uint64_t s = 0; s < colls; ++s) {
        while (s - lane.tail.load(std::memory_order_acquire) == kWindow) std::this_thread::yield();
        void* api = nccl.Api(ctx[c], "AllReduce", 1 << 16, false);
        lane.queue[s % kWindow].store(nccl.Launch(ctx[c], api, "AllReduce", s, 1 << 16, kChannels),
                                      std::memory_order_relaxed);
        lane.head.store(s + 1, std::memory_order_release);
      }
    });
    threads.emplace_back([&, c] {
      Lane& lane = lanes[c];
      for (uint64_t s = 0; s < colls; ++s) {
        while (lane.head.load(std::memory_order_acquire) == s) std::this_thread::yield();
        void* op = lane.queue[s % kWindow].load(std::memory_order_relaxed);
        nccl.RunChannels(ctx[c], op, kChannels, kGpuEpoch + s * 40'000, 30'000);
        lane.tail.store(s + 1, std::memory_order_release);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (void* c : ctx) nccl.Finalize(c);
  for (int c = 0; c < kComms; ++c) {
    Totals t = TotalsFor(Hash(10, c), c);
    EXPECT_EQ(t.finals, 1);
    // Exact accounting: what was reported plus what the rings dropped is what was emitted.
    EXPECT_EQ(t.count["AllReduce"] + t.last_drops.records_dropped, colls) << "comm " << c;
    EXPECT_EQ(t.last_drops.orphans, before.orphans) << "comm " << c;
    EXPECT_EQ(t.last_drops.events_dropped, before.events_dropped) << "comm " << c;
    EXPECT_EQ(t.last_drops.untimed_ops, 0u) << "comm " << c;
  }
}

INSTANTIATE_TEST_SUITE_P(Abi, ScenarioTest, ::testing::Values(4, 5, 6, 7),
                         [](const auto& info) { return "v" + std::to_string(info.param); });

}  // namespace
}  // namespace ncclwatch::scenarios

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new ncclwatch::scenarios::AgentEnvironment);
  return RUN_ALL_TESTS();
}

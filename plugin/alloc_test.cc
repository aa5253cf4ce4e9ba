// Proves that the plugin's callbacks allocate nothing on the heap after warm-up.
//
// This executable defines malloc and its relatives, so every library in the process -- the plugin
// loaded with dlopen, libstdc++'s operator new, gRPC -- calls these versions. They count the calls
// made by a thread while its counting flag is set; the flag is set only around the callbacks, so
// the plugin's own background threads (flusher, sender) may allocate freely, as designed.
#include <dlfcn.h>
#include <malloc.h>
#include <stdlib.h>

#include <atomic>
#include <cstring>

#include "gtest/gtest.h"
#include "plugin/abi.h"
#include "plugin/abi_testing.h"
#include "plugin/abi_v7.h"

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);
}

namespace {
thread_local bool t_counting = false;
std::atomic<uint64_t> g_allocations{0};
inline void Count() {
  if (t_counting) g_allocations.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

extern "C" {
void* malloc(size_t n) {
  Count();
  return __libc_malloc(n);
}
void* calloc(size_t n, size_t m) {
  Count();
  return __libc_calloc(n, m);
}
void* realloc(void* p, size_t n) {
  Count();
  return __libc_realloc(p, n);
}
void free(void* p) { __libc_free(p); }
void* memalign(size_t a, size_t n) {
  Count();
  return __libc_memalign(a, n);
}
void* aligned_alloc(size_t a, size_t n) {
  Count();
  return __libc_memalign(a, n);
}
int posix_memalign(void** out, size_t a, size_t n) {
  Count();
  *out = __libc_memalign(a, n);
  return *out != nullptr ? 0 : ENOMEM;
}
}

namespace ncclwatch::abi {
namespace {

TEST(PluginAllocationTest, CallbacksDoNotAllocateAfterWarmUp) {
  // The counter works: an allocation on a counting thread is seen.
  t_counting = true;
  void* probe = malloc(16);
  int* probe2 = new int(1);
  t_counting = false;
  ASSERT_EQ(g_allocations.load(), 2u);
  free(probe);
  delete probe2;
  g_allocations = 0;

  setenv("NCCLWATCH_AGENT_ADDR", "unix:///nonexistent/ncclwatch-alloc-test.sock", 1);
  void* lib = dlopen(NCCLWATCH_PLUGIN_SO, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  auto* v5 = static_cast<ProfilerV5*>(dlsym(lib, "ncclProfiler_v5"));
  void* ctx = nullptr;
  int mask = 0;
  ASSERT_EQ(v5->init(&ctx, 0x5eed, &mask, "world", 2, 8, 1, nullptr), kSuccess);  // may allocate

  static int stream;
  uint64_t gpu = 1'700'000'000'000'000'000ull;
  auto one_round = [&](uint64_t seq) {
    // Everything NCCL calls for one collective and one send, with the events we ignore too.
    void* group_api = nullptr;
    EventDescrV5 ga = MakeDescrV5(kGroupApi, nullptr);
    v5->start_event(ctx, &group_api, &ga);
    v5->record_event_state(group_api, kGroupStartApiStop, nullptr);
    void* coll_api = nullptr;
    EventDescrV5 ca = MakeDescrV5(kCollApi, group_api);
    ca.coll_api = {"AllReduce", 4096, "ncclFloat32", 0, &stream, false};
    v5->start_event(ctx, &coll_api, &ca);
    v5->record_event_state(group_api, kGroupEndApiStart, nullptr);
    void* group = nullptr;
    EventDescrV5 gr = MakeDescrV5(kGroup, nullptr);
    v5->start_event(ctx, &group, &gr);
    EventDescrV5 c = MakeDescrV5(kColl, coll_api);
    c.coll = {seq,           "AllReduce", nullptr, nullptr, 4096, 0,
              "ncclFloat32", 4,           16,      "RING",  "LL", group};
    void* coll = nullptr;
    v5->start_event(ctx, &coll, &c);
    EventDescrV5 p = MakeDescrV5(kP2p, nullptr);
    p.p2p = {"Send", nullptr, "ncclBfloat16", 1 << 20, 3, 2, group};
    void* send = nullptr;
    v5->start_event(ctx, &send, &p);
    for (void* h : {coll, send}) {
      if (h != nullptr) v5->stop_event(h);
    }
    for (void* op : {coll, send}) {
      uint8_t channels = op == coll ? 4 : 2;
      for (uint8_t ch = 0; ch < channels; ++ch) {
        EventDescrV5 k = MakeDescrV5(kKernelCh, op);
        k.kernel_ch = {ch, gpu};
        void* kh = nullptr;
        v5->start_event(ctx, &kh, &k);
        StateArgs args;
        args.kernel_ch.p_timer = gpu + 20'000;
        v5->record_event_state(kh, kKernelChStop, &args);
        if (kh != nullptr) v5->stop_event(kh);
      }
    }
    gpu += 50'000;
  };
  for (uint64_t seq = 0; seq < 1000; ++seq) one_round(seq);  // warm-up

  t_counting = true;
  for (uint64_t seq = 1000; seq < 201000; ++seq) one_round(seq);
  t_counting = false;
  EXPECT_EQ(g_allocations.load(), 0u) << "heap allocations in 200,000 rounds of callbacks";

  EXPECT_EQ(v5->finalize(ctx), kSuccess);
}

// ABI v7 as NCCL 2.31 drives it with KernelPhase on: tagged operations, a symmetric kernel, a
// copy-engine collective, and initial-sync, compute and final-sync phases under every channel.
TEST(PluginAllocationTest, V7CallbacksWithKernelPhasesDoNotAllocateAfterWarmUp) {
  g_allocations = 0;
  setenv("NCCLWATCH_AGENT_ADDR", "unix:///nonexistent/ncclwatch-alloc-test.sock", 1);
  void* lib = dlopen(NCCLWATCH_PLUGIN_SO, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  auto* v7 = static_cast<ProfilerV7*>(dlsym(lib, "ncclProfiler_v7"));
  ASSERT_NE(v7, nullptr);
  void* ctx = nullptr;
  int mask = 0;
  ASSERT_EQ(v7->init(&ctx, 0x7eed, &mask, "world-v7", 2, 8, 1, nullptr), kSuccess);
  ASSERT_NE(ctx, nullptr);

  static int stream;
  uint64_t gpu = 1'700'000'000'000'000'000ull;
  uint64_t phases_started = 0;
  auto one_round = [&](uint64_t seq) {
    void* group = nullptr;
    EventDescrV7 gr = MakeDescrV7(kGroup, nullptr);
    v7->start_event(ctx, &group, &gr);
    EventDescrV7 c = MakeDescrV7(kColl, nullptr);
    c.coll.seq_number = seq;
    c.coll.func = "AllReduce";
    c.coll.count = 4096;
    c.coll.datatype = "ncclBfloat16";
    c.coll.n_channels = 4;
    c.coll.algo = (seq & 1) != 0 ? "NVLS" : "RING";
    c.coll.proto = (seq & 1) != 0 ? "" : "LL128";
    c.coll.is_sym_coll = (seq & 1) != 0;
    c.coll.kernel_variant = (seq & 1) != 0 ? "AGxLL_R" : nullptr;
    c.coll.parent_group = group;
    c.coll.user_tag = seq % 7;
    void* coll = nullptr;
    v7->start_event(ctx, &coll, &c);
    EventDescrV7 p = MakeDescrV7(kP2p, nullptr);
    p.p2p = {"Recv", nullptr, "ncclFloat32", 1 << 16, 5, 1, group, seq};
    void* recv = nullptr;
    v7->start_event(ctx, &recv, &p);
    EventDescrV7 ce = MakeDescrV7(kCeColl, nullptr);
    ce.ce_coll.seq_number = seq;
    ce.ce_coll.func = "AllGather";
    ce.ce_coll.datatype = "ncclInt8";
    ce.ce_coll.count = 1 << 20;
    ce.ce_coll.sync_strategy = "MC";
    ce.ce_coll.stream = &stream;
    ce.ce_coll.user_tag = 3;
    void* ce_handle = nullptr;
    v7->start_event(ctx, &ce_handle, &ce);
    for (void* h : {coll, recv, ce_handle}) {
      if (h != nullptr) v7->stop_event(h);
    }
    if (group != nullptr) v7->stop_event(group);
    for (void* op : {coll, recv}) {
      const uint8_t channels = op == coll ? 4 : 1;
      for (uint8_t ch = 0; ch < channels; ++ch) {
        EventDescrV7 k = MakeDescrV7(kKernelCh, op);
        k.kernel_ch = {ch, gpu};
        void* kh = nullptr;
        v7->start_event(ctx, &kh, &k);
        for (uint8_t phase = 0; phase < 3; ++phase) {
          EventDescrV7 ph = MakeDescrV7(kKernelPhase, kh);
          ph.kernel_phase = {ch, phase, phase == 1 ? "compute" : "sync", gpu + phase * 5'000};
          void* phase_handle = nullptr;
          v7->start_event(ctx, &phase_handle, &ph);
          phases_started += phase_handle != nullptr;
          StateArgs args;
          args.kernel_ch.p_timer = gpu + phase * 5'000 + 4'000;
          v7->record_event_state(phase_handle, kKernelPhaseStop, &args);
          if (phase_handle != nullptr) v7->stop_event(phase_handle);
        }
        StateArgs args;
        args.kernel_ch.p_timer = gpu + 20'000;
        v7->record_event_state(kh, kKernelChStop, &args);
        if (kh != nullptr) v7->stop_event(kh);
      }
    }
    gpu += 50'000;
  };
  for (uint64_t seq = 0; seq < 1000; ++seq) one_round(seq);  // warm-up
  // The phases reached the plugin: only the initial sync gets a handle, one per channel.
  ASSERT_EQ(phases_started, 1000u * 5);

  t_counting = true;
  for (uint64_t seq = 1000; seq < 201000; ++seq) one_round(seq);
  t_counting = false;
  EXPECT_EQ(g_allocations.load(), 0u) << "heap allocations in 200,000 rounds of v7 callbacks";

  EXPECT_EQ(v7->finalize(ctx), kSuccess);
}

}  // namespace
}  // namespace ncclwatch::abi

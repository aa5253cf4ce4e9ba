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

}  // namespace
}  // namespace ncclwatch::abi

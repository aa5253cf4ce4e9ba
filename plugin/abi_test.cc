// Loads the built plugin exactly as NCCL does (dlopen RTLD_NOW|RTLD_LOCAL, dlsym of the data
// symbols) and checks its tables and its behaviour with no agent listening. Deliberately links no
// protobuf or gRPC code of its own, like a training process that has none.
//
// The descriptor layouts themselves are pinned at compile time by the static_asserts in abi.h
// (docs/nccl-profiler-abi.md §5); this file includes it, so a layout change fails this test's
// build. The other § numbers in this file refer to that document too.
#include "plugin/abi.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "plugin/abi_testing.h"

namespace ncclwatch::abi {
namespace {

// Spot checks repeated here so that the test reads as the specification it enforces.
static_assert(sizeof(EventDescrV5) == 112 && sizeof(EventDescrV4) == 104);
static_assert(offsetof(EventDescrV5, coll.seq_number) == 24);
static_assert(offsetof(EventDescrV5, kernel_ch.p_timer) == 32);
static_assert(offsetof(EventDescrV4, coll.n_channels) == 80);

class PluginLoadTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Nothing listens here: the plugin must carry on regardless.
    setenv("NCCLWATCH_AGENT_ADDR", "unix:///nonexistent/ncclwatch-abi-test.sock", 1);
    setenv("NCCLWATCH_FINALIZE_TIMEOUT_MS", "60000", 1);  // must not be waited for: no agent
    handle_ = dlopen(NCCLWATCH_PLUGIN_SO, RTLD_NOW | RTLD_LOCAL);
  }
  static void* handle_;
};
void* PluginLoadTest::handle_ = nullptr;

TEST_F(PluginLoadTest, ExportsThreeWellFormedTables) {
  ASSERT_NE(handle_, nullptr) << dlerror();
  auto* v4 = static_cast<ProfilerV4*>(dlsym(handle_, "ncclProfiler_v4"));
  auto* v5 = static_cast<ProfilerV5*>(dlsym(handle_, "ncclProfiler_v5"));
  auto* v6 = static_cast<ProfilerV6*>(dlsym(handle_, "ncclProfiler_v6"));
  ASSERT_TRUE(v4 && v5 && v6);
  for (const char* name : {v4->name, v5->name, v6->name}) EXPECT_STREQ(name, "ncclwatch");
  EXPECT_TRUE(v5->init && v5->start_event && v5->stop_event && v5->record_event_state &&
              v5->finalize);
  EXPECT_TRUE(v4->init && v4->start_event && v6->start_event);
  // Nothing else leaks out (the full list is checked on the file by check_exports.sh).
  EXPECT_EQ(dlsym(handle_, "ncclProfiler_v3"), nullptr);
}

TEST_F(PluginLoadTest, RunsACollectiveAndFinalizesWithoutAnAgent) {
  ASSERT_NE(handle_, nullptr) << dlerror();
  auto* v5 = static_cast<ProfilerV5*>(dlsym(handle_, "ncclProfiler_v5"));
  void* ctx = nullptr;
  int mask = 0;
  ASSERT_EQ(v5->init(&ctx, 0xabcdef, &mask, "world", 1, 2, 0, nullptr), kSuccess);
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(mask, kColl | kP2p | kKernelCh);

  EventDescrV5 coll = MakeDescrV5(kColl, nullptr);
  coll.coll = {0, "AllReduce", nullptr, nullptr, 1024,   0, "ncclFloat32",
               2, 8,           "RING",  "LL",    nullptr};
  void* op = nullptr;
  ASSERT_EQ(v5->start_event(ctx, &op, &coll), kSuccess);
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(v5->stop_event(op), kSuccess);  // enqueued; channels follow, as in NCCL
  for (uint8_t ch = 0; ch < 2; ++ch) {
    EventDescrV5 k = MakeDescrV5(kKernelCh, op);
    k.kernel_ch = {ch, 1000};
    void* kh = nullptr;
    ASSERT_EQ(v5->start_event(ctx, &kh, &k), kSuccess);
    ASSERT_NE(kh, nullptr);
    StateArgs args;
    args.kernel_ch.p_timer = 5000;
    EXPECT_EQ(v5->record_event_state(kh, kKernelChStop, &args), kSuccess);
    EXPECT_EQ(v5->stop_event(kh), kSuccess);
  }
  // Events the plugin does not use get NULL handles; NULL state args are accepted.
  EventDescrV5 api = MakeDescrV5(kGroupApi, nullptr);
  void* api_handle = reinterpret_cast<void*>(1);
  EXPECT_EQ(v5->start_event(ctx, &api_handle, &api), kSuccess);
  EXPECT_EQ(api_handle, nullptr);
  EXPECT_EQ(v5->record_event_state(nullptr, kGroupEndApiStart, nullptr), kSuccess);
  // A NULL context (a communicator NCCL has no profiler context for) gets nothing.
  void* none = reinterpret_cast<void*>(1);
  EXPECT_EQ(v5->start_event(nullptr, &none, &coll), kSuccess);
  EXPECT_EQ(none, nullptr);

  // With no agent, finalize must not wait out NCCLWATCH_FINALIZE_TIMEOUT_MS (60 s): if it did,
  // this test would hit ctest's timeout.
  EXPECT_EQ(v5->finalize(ctx), kSuccess);
}

TEST_F(PluginLoadTest, V4InitTakesItsOwnArgumentOrder) {
  ASSERT_NE(handle_, nullptr) << dlerror();
  auto* v4 = static_cast<ProfilerV4*>(dlsym(handle_, "ncclProfiler_v4"));
  void* ctx = nullptr;
  int mask = 0;
  ASSERT_EQ(v4->init(&ctx, &mask, "tp", 0x1234, 1, 4, 3, nullptr), kSuccess);
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(mask, kColl | kP2p | kKernelCh);
  EventDescrV4 p2p = MakeDescrV4(kP2p, nullptr);
  p2p.p2p = {"Send", nullptr, "ncclFloat32", 256, 1, 1};
  void* op = nullptr;
  ASSERT_EQ(v4->start_event(ctx, &op, &p2p), kSuccess);
  EXPECT_NE(op, nullptr);
  EXPECT_EQ(v4->stop_event(op), kSuccess);
  EXPECT_EQ(v4->finalize(ctx), kSuccess);
}

// ncclCommInitAll and grouped splits call init concurrently from NCCL-created threads (§3.2).
TEST_F(PluginLoadTest, ConcurrentInitGivesEveryCommunicatorItsOwnContext) {
  ASSERT_NE(handle_, nullptr) << dlerror();
  auto* v5 = static_cast<ProfilerV5*>(dlsym(handle_, "ncclProfiler_v5"));
  constexpr int kThreads = 8;
  std::vector<void*> contexts(kThreads, nullptr);
  int mask = 0;  // one process-global mask, shared by every init, as in NCCL
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back(
        [&, i] { v5->init(&contexts[i], 0x700 + i, &mask, "split", 1, kThreads, i, nullptr); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) {
    ASSERT_NE(contexts[i], nullptr) << i;
    for (int j = 0; j < i; ++j) EXPECT_NE(contexts[i], contexts[j]);
  }
  EXPECT_EQ(mask, kColl | kP2p | kKernelCh);
  for (void* ctx : contexts) EXPECT_EQ(v5->finalize(ctx), kSuccess);
}

// The last finalize makes NCCL dlclose the library; a later communicator loads it again (§2.3).
TEST_F(PluginLoadTest, WorksAgainAfterDestroyDlcloseAndReload) {
  ASSERT_NE(handle_, nullptr) << dlerror();
  auto* v5 = static_cast<ProfilerV5*>(dlsym(handle_, "ncclProfiler_v5"));
  void* ctx = nullptr;
  int mask = 0;
  ASSERT_EQ(v5->init(&ctx, 0x900, &mask, nullptr, 1, 2, 0, nullptr), kSuccess);  // NULL name
  ASSERT_EQ(v5->finalize(ctx), kSuccess);
  ASSERT_EQ(dlclose(handle_), 0);
  handle_ = dlopen(NCCLWATCH_PLUGIN_SO, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle_, nullptr) << dlerror();
  v5 = static_cast<ProfilerV5*>(dlsym(handle_, "ncclProfiler_v5"));
  ctx = nullptr;
  ASSERT_EQ(v5->init(&ctx, 0x901, &mask, "again", 1, 2, 1, nullptr), kSuccess);
  ASSERT_NE(ctx, nullptr);
  EventDescrV5 coll = MakeDescrV5(kColl, nullptr);
  coll.coll = {0, "Broadcast", nullptr, nullptr, 64, 0, "ncclInt8", 1, 4, "RING", "LL", nullptr};
  void* op = nullptr;
  v5->start_event(ctx, &op, &coll);
  EXPECT_NE(op, nullptr);
  v5->stop_event(op);
  EXPECT_EQ(v5->finalize(ctx), kSuccess);
}

// Events the plugin does not ask for may still arrive; under PXN a ProxyOp's context and parent
// point into another process (§10.2), so nothing may be dereferenced. A one-rank communicator
// (§10.1) gets a context but no events; v6 copy-engine events are accepted without a handle.
TEST_F(PluginLoadTest, ForeignPointersAndUnusedEventTypesAreNeverTouched) {
  ASSERT_NE(handle_, nullptr) << dlerror();
  auto* v6 = static_cast<ProfilerV6*>(dlsym(handle_, "ncclProfiler_v6"));
  void* ctx = nullptr;
  int mask = 0;
  ASSERT_EQ(v6->init(&ctx, 0xa00, &mask, "solo", 1, 1, 0, nullptr), kSuccess);
  ASSERT_NE(ctx, nullptr);
  void* foreign = reinterpret_cast<void*>(0x10);  // would crash if dereferenced
  for (uint64_t type :
       {uint64_t{kProxyOp}, uint64_t{kProxyStep}, uint64_t{kNetPlugin}, uint64_t{kProxyCtrl},
        uint64_t{kCeSync}, uint64_t{kCeBatch}, uint64_t{kKernelLaunch}, uint64_t{1} << 40}) {
    EventDescrV6 d = MakeDescrV6(type, foreign);
    d.proxy_op.pid = getpid() + 1;
    void* h = reinterpret_cast<void*>(1);
    EXPECT_EQ(v6->start_event(foreign, &h, &d), kSuccess) << type;
    EXPECT_EQ(h, nullptr) << type;
  }
  // A KernelCh whose parent is readable memory but not one of our operation slots is refused
  // without being read. (CeColl is left out above: it is recorded, with NCCL's own context.)
  uint64_t not_a_handle[16] = {};
  EventDescrV6 d = MakeDescrV6(kKernelCh, not_a_handle);
  void* h = reinterpret_cast<void*>(1);
  EXPECT_EQ(v6->start_event(ctx, &h, &d), kSuccess);
  EXPECT_EQ(h, nullptr);
  EXPECT_EQ(v6->record_event_state(not_a_handle, kKernelChStop, nullptr), kSuccess);
  EXPECT_EQ(v6->finalize(ctx), kSuccess);
}

}  // namespace
}  // namespace ncclwatch::abi

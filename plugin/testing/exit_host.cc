// A training process that never destroys its communicators: it starts 4 threads that launch
// collectives through the plugin without pause, and returns from main while they still do. The
// plugin's exit path runs with those threads live; the process must exit with status 0.
//
//   plugin_exit_host PLUGIN_SO      (environment: the NCCLWATCH_* variables for the plugin)
#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "plugin/testing/nccl_driver.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PLUGIN_SO\n", argv[0]);
    return 2;
  }
  // Leaked on purpose: the threads use it until the process is gone.
  auto* nccl = new ncclwatch::testing::NcclDriver(argv[1]);
  if (!nccl->ok()) {
    std::fprintf(stderr, "plugin_exit_host: %s\n", nccl->error().c_str());
    return 3;
  }
  constexpr int kThreads = 4;
  constexpr int kWarmOps = 2000;  // per thread, before main returns
  static std::atomic<int> warm{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    void* ctx = nccl->Init(0xe417'0000 + t, 0, 2);
    threads.emplace_back([nccl, ctx] {
      for (uint64_t seq = 0;; ++seq) {
        nccl->Collective(ctx, seq, 2);
        if (seq + 1 == kWarmOps) warm.fetch_add(1);
      }
    });
  }
  // Every thread is launching; return while they keep going (never joined, by design).
  while (warm.load() < kThreads) std::this_thread::yield();
  for (auto& t : threads) t.detach();
  return 0;
}

// Test helper: the NCCL side of one process, through the plugin's exported ncclProfiler_v7 table,
// for the lifecycle tests and their host programs (which link no gRPC or protobuf of their own,
// like a training process). Loads the .so as NCCL does (dlopen RTLD_NOW|RTLD_LOCAL).
#ifndef NCCLWATCH_PLUGIN_TESTING_NCCL_DRIVER_H_
#define NCCLWATCH_PLUGIN_TESTING_NCCL_DRIVER_H_

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "plugin/abi_testing.h"
#include "plugin/abi_v7.h"

namespace ncclwatch::testing {

class NcclDriver {
 public:
  // Loads `path` (RTLD_NOW|RTLD_LOCAL, optionally into its own link-map namespace) and resolves
  // ncclProfiler_v7; ok() says whether that worked, error() why not.
  explicit NcclDriver(const char* path) {
    lib_ = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) {
      error_ = dlerror();
      return;
    }
    v7_ = static_cast<abi::ProfilerV7*>(dlsym(lib_, "ncclProfiler_v7"));
    if (v7_ == nullptr) error_ = "no ncclProfiler_v7 in " + std::string(path);
  }
  bool ok() const { return v7_ != nullptr; }
  const std::string& error() const { return error_; }
  abi::ProfilerV7& v7() { return *v7_; }

  void* Init(uint64_t hash, int rank, int nranks, abi::Logger logfn = nullptr) {
    void* ctx = nullptr;
    int mask = 0;
    v7_->init(&ctx, hash, &mask, "lifecycle", 1, nranks, rank, logfn);
    return ctx;
  }

  // One collective as NCCL enqueues it, then its `channels` channels run on the "GPU".
  void Collective(void* ctx, uint64_t seq, uint8_t channels) {
    void* coll = nullptr;
    abi::EventDescrV7 c = abi::MakeDescr<abi::EventDescrV7>(abi::kColl, nullptr);
    c.coll = {};
    c.coll.seq_number = seq;
    c.coll.func = "AllReduce";
    c.coll.count = 1 << 20;
    c.coll.datatype = "ncclFloat32";
    c.coll.n_channels = channels;
    c.coll.algo = "RING";
    c.coll.proto = "SIMPLE";
    v7_->start_event(ctx, &coll, &c);
    if (coll != nullptr) v7_->stop_event(coll);
    const uint64_t t = 1'700'000'000'000'000'000ull + seq * 100'000;
    for (uint8_t ch = 0; ch < channels; ++ch) {
      void* kh = nullptr;
      abi::EventDescrV7 k = abi::MakeDescr<abi::EventDescrV7>(abi::kKernelCh, coll);
      k.kernel_ch = {ch, t};
      v7_->start_event(ctx, &kh, &k);
      if (kh == nullptr) continue;
      abi::StateArgs args;
      args.kernel_ch.p_timer = t + 50'000;
      v7_->record_event_state(kh, abi::kKernelChStop, &args);
      v7_->stop_event(kh);
    }
  }

  void Finalize(void* ctx) { v7_->finalize(ctx); }

 private:
  void* lib_ = nullptr;
  abi::ProfilerV7* v7_ = nullptr;
  std::string error_;
};

}  // namespace ncclwatch::testing

#endif  // NCCLWATCH_PLUGIN_TESTING_NCCL_DRIVER_H_

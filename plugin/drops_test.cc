// Exact accounting under overload, and a concurrency stress test of the callback path.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "plugin/flusher.h"

namespace ncclwatch::plugin {
namespace {

class CountingSink : public ReportSink {
 public:
  void Submit(ncclwatch::v1::RankReport report) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& s : report.stats()) reported_ += s.count();
    last_drops_ = report.drops();
    ring_drops_[report.identity().comm_hash()] = report.drops().records_dropped();
    ++reports_;
  }
  bool Drain(std::chrono::milliseconds) override { return true; }
  uint64_t dropped() const override { return 0; }
  uint64_t reported() {
    std::lock_guard<std::mutex> lock(mu_);
    return reported_;
  }
  // Process-wide counters as of the last report.
  ncclwatch::v1::DropCounters last_drops() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_drops_;
  }
  // records_dropped is per communicator (one ring each): the sum of every communicator's latest.
  uint64_t ring_drops() {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t n = 0;
    for (const auto& [comm, dropped] : ring_drops_) n += dropped;
    return n;
  }

 private:
  std::mutex mu_;
  uint64_t reported_ = 0;
  uint64_t reports_ = 0;
  ncclwatch::v1::DropCounters last_drops_;
  std::map<uint64_t, uint64_t> ring_drops_;
};

OpDescr Coll(uint64_t seq, uint8_t channels) {
  return OpDescr{false, "AllReduce", seq, "ncclFloat32", 1024, "RING", "LL", -1, channels};
}

// NCCL's side of one operation's channels: it emits them even when our handle was NULL.
void RunChannels(Recorder& rec, void* op, uint8_t channels, uint64_t t) {
  for (uint8_t ch = 0; ch < channels; ++ch) {
    void* h = rec.StartKernelChannel(op, ch, t);
    rec.RecordKernelChannelStop(h, t + 1000);
    rec.StopEvent(h);
  }
}

TEST(DropAccountingTest, ReportedPlusDroppedEqualsEmitted) {
  // 64 slots and a 64-entry ring, overfilled both ways, with drains in between.
  Recorder rec(64, 64);
  CountingSink sink;
  PluginConfig config;
  Flusher flusher(config, rec, ProcessIdentity{"j", "h", 1, 0}, sink);
  CommState* comm = rec.InitComm(CommIdentity{1, "world", 0, 2, 1, 0});
  constexpr uint8_t kChannels = 2;
  uint64_t emitted = 0, seq = 0;
  for (int round = 0; round < 20; ++round) {
    // 100 operations enqueued at once: only 64 find a slot.
    std::vector<void*> ops;
    for (int i = 0; i < 100; ++i, ++emitted) {
      void* op = rec.StartOp(comm, Coll(seq++, kChannels));
      rec.StopEvent(op);
      ops.push_back(op);
    }
    for (void* op : ops) RunChannels(rec, op, kChannels, seq * 10);
    // Every other round completes twice the ring's capacity before the flusher drains.
    if (round % 2 == 1) flusher.RunOnce(/*report=*/true);
  }
  flusher.RunOnce(true);
  ncclwatch::v1::DropCounters drops = sink.last_drops();
  EXPECT_GT(drops.events_dropped(), 0u);
  EXPECT_GT(drops.records_dropped(), 0u);
  EXPECT_EQ(drops.untimed_ops(), 0u);
  EXPECT_EQ(sink.reported() + drops.events_dropped() + sink.ring_drops(), emitted)
      << "reported " << sink.reported() << ", pool drops " << drops.events_dropped()
      << ", ring drops " << drops.records_dropped();
  // Each dropped operation's channels arrive parentless and are counted separately.
  EXPECT_EQ(drops.channel_events_orphaned(), drops.events_dropped() * kChannels);
  EXPECT_EQ(rec.ops_in_use(), 0u);
}

// 8 communicators, each with a "user" thread enqueueing collectives and a "proxy" thread running
// their channels, while the flusher thread drains and reports: 1M callback events per
// communicator (200k under a sanitizer). Run in every build, the ASan+UBSan one included.
TEST(StressTest, EightCommunicatorsTwoThreadsEachAMillionEvents) {
  constexpr int kComms = 8;
  constexpr uint8_t kChannels = 2;
  constexpr int kEventsPerOp = 2 + 3 * kChannels;  // start+stop, and per channel start+state+stop
#ifdef NCCLWATCH_SANITIZED
  constexpr int kEventsPerComm = 200'000;  // CMakeLists.txt: a fifth under a sanitizer
#else
  constexpr int kEventsPerComm = 1'000'000;
#endif
  constexpr int kOpsPerComm = kEventsPerComm / kEventsPerOp;
  constexpr size_t kDepth = 256;  // 8 x 256 in flight fits the 4096-slot pool
  Recorder rec(4096, 1 << 16);
  CountingSink sink;
  PluginConfig config;
  config.flush_interval_ms = 50;
  Flusher flusher(config, rec, ProcessIdentity{"j", "h", 1, 0}, sink);
  flusher.Start();

  struct Lane {
    CommState* comm;
    std::mutex mu;  // the test's own hand-off queue, not the plugin's
    std::condition_variable changed;
    std::deque<void*> queue;  // enqueued operations waiting for their kernel
    bool done = false;
  };
  std::vector<std::unique_ptr<Lane>> lanes;
  for (int c = 0; c < kComms; ++c) {
    auto lane = std::make_unique<Lane>();
    lane->comm = rec.InitComm(CommIdentity{100u + c, "comm", 0, 2, 1, 0});
    lanes.push_back(std::move(lane));
  }
  std::vector<std::thread> threads;
  for (auto& lane_ptr : lanes) {
    Lane* lane = lane_ptr.get();
    threads.emplace_back([&rec, lane] {
      for (int i = 0; i < kOpsPerComm; ++i) {
        {
          // Like a CUDA stream, at most kDepth operations are enqueued ahead of the GPU.
          std::unique_lock<std::mutex> lock(lane->mu);
          lane->changed.wait(lock, [&] { return lane->queue.size() < kDepth; });
        }
        void* op = rec.StartOp(lane->comm, Coll(i, kChannels));
        rec.StopEvent(op);
        std::lock_guard<std::mutex> lock(lane->mu);
        lane->queue.push_back(op);
        lane->changed.notify_all();
      }
      std::lock_guard<std::mutex> lock(lane->mu);
      lane->done = true;
      lane->changed.notify_all();
    });
    threads.emplace_back([&rec, lane] {
      uint64_t t = 1;
      for (;;) {
        void* op;
        {
          std::unique_lock<std::mutex> lock(lane->mu);
          lane->changed.wait(lock, [&] { return !lane->queue.empty() || lane->done; });
          if (lane->queue.empty()) return;
          op = lane->queue.front();
          lane->queue.pop_front();
          lane->changed.notify_all();
        }
        RunChannels(rec, op, kChannels, t += 10);
      }
    });
  }
  for (auto& t : threads) t.join();
  flusher.Stop();
  flusher.RunOnce(true);  // whatever the last interval held
  ncclwatch::v1::DropCounters drops = sink.last_drops();
  // The pool is sized for the queue depth, so no operation may be refused; the rings may overflow
  // when the flusher is starved of CPU (16 busy threads on 2 cores), and then every loss is
  // counted: reported + dropped is exactly what was emitted.
  EXPECT_EQ(drops.events_dropped(), 0u);
  EXPECT_EQ(drops.channel_events_orphaned(), 0u);
  EXPECT_EQ(sink.reported() + sink.ring_drops(), uint64_t{kComms} * kOpsPerComm)
      << "reported " << sink.reported() << ", ring drops " << sink.ring_drops();
  EXPECT_GT(sink.reported(), 0u);
  EXPECT_EQ(rec.ops_in_use(), 0u);
}

}  // namespace
}  // namespace ncclwatch::plugin

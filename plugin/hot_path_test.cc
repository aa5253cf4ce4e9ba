#include "plugin/hot_path.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "plugin/recorder.h"

namespace ncclwatch::plugin {
namespace {

TEST(OpPoolTest, ClaimsUntilFullThenDropsAndCounts) {
  OpPool pool(64);
  ASSERT_EQ(pool.capacity(), 64u);
  std::vector<OpSlot*> slots;
  for (int i = 0; i < 64; ++i) {
    OpSlot* s = pool.Claim(1);
    ASSERT_NE(s, nullptr) << i;
    slots.push_back(s);
  }
  EXPECT_EQ(pool.Claim(1), nullptr);
  EXPECT_EQ(pool.dropped(), 1u);
  EXPECT_EQ(pool.InUse(), 64u);
  EXPECT_TRUE(pool.Release(slots[3], 1));
  // The freed slot is the one the next claim gets, in one step.
  EXPECT_EQ(pool.Claim(2), slots[3]);
  EXPECT_EQ(pool.dropped(), 1u);
  EXPECT_EQ(pool.Claim(1), nullptr);
  EXPECT_EQ(pool.dropped(), 2u);
  // A slot with two references is freed by the second release only.
  EXPECT_FALSE(pool.Release(slots[3], 1));
  EXPECT_TRUE(pool.Release(slots[3], 1));
  EXPECT_EQ(pool.InUse(), 63u);
}

TEST(OpPoolTest, FreedSlotsAreReusedLastInFirstOutAndNewOnesOnlyWhenNoneIsFree) {
  OpPool pool(128);
  OpSlot* a = pool.Claim(1);
  OpSlot* b = pool.Claim(1);
  ASSERT_NE(a, b);
  EXPECT_EQ(pool.used(), 2u);
  pool.Release(a, 1);
  pool.Release(b, 1);
  EXPECT_EQ(pool.Claim(1), b);
  EXPECT_EQ(pool.Claim(1), a);
  EXPECT_EQ(pool.used(), 2u);  // no fresh slot was needed
  EXPECT_NE(pool.Claim(1), nullptr);
  EXPECT_EQ(pool.used(), 3u);
}

TEST(OpPoolTest, HandlesAreToldApartByAddressAndForeignOnesIgnored) {
  OpPool pool(64);
  OpSlot* s = pool.Claim(1);
  auto d = pool.Decode(s);
  EXPECT_EQ(d.type, OpPool::Decoded::kOp);
  EXPECT_EQ(d.slot, s);
  d = pool.Decode(&s->channels[5]);
  EXPECT_EQ(d.type, OpPool::Decoded::kChannel);
  EXPECT_EQ(d.slot, s);
  EXPECT_EQ(d.channel, 5);
  d = pool.Decode(reinterpret_cast<char*>(&s->channels[63]) + 1);
  EXPECT_EQ(d.type, OpPool::Decoded::kPhase);
  EXPECT_EQ(d.channel, 63);
  int foreign = 0;
  EXPECT_EQ(pool.Decode(&foreign).type, OpPool::Decoded::kNone);
  EXPECT_EQ(pool.Decode(&s->refs + 1).type, OpPool::Decoded::kNone);  // inside, not a handle
  EXPECT_EQ(pool.Decode(reinterpret_cast<char*>(s) + 1).type, OpPool::Decoded::kNone);
}

// Many threads claim and release at once: no slot is ever handed to two holders, and every slot
// comes back.
TEST(OpPoolTest, ConcurrentClaimsNeverShareASlot) {
  OpPool pool(256);
  constexpr int kThreads = 4;
  constexpr int kRounds = 100000;
  std::atomic<int> overlaps{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      std::vector<OpSlot*> held;
      for (int i = 0; i < kRounds; ++i) {
        if (OpSlot* s = pool.Claim(1)) {
          // count is free for the holder to use: a second holder would see our mark.
          if (s->count.exchange(1, std::memory_order_relaxed) != 0) overlaps.fetch_add(1);
          held.push_back(s);
        }
        if (held.size() > 40 || (i % 3 == 0 && !held.empty())) {
          OpSlot* s = held.back();
          held.pop_back();
          s->count.store(0, std::memory_order_relaxed);
          pool.Release(s, 1);
        }
      }
      for (OpSlot* s : held) {
        s->count.store(0, std::memory_order_relaxed);
        pool.Release(s, 1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(pool.InUse(), 0u);
}

TEST(CompletionRingTest, FifoAndExactDropAccounting) {
  CompletionRing ring(4);
  for (uint64_t i = 0; i < 6; ++i) {
    Completion c;
    c.seq = i;
    ring.Push(c);
  }
  EXPECT_EQ(ring.dropped(), 2u);
  Completion out;
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(ring.Pop(&out));
    EXPECT_EQ(out.seq, i);
  }
  EXPECT_FALSE(ring.Pop(&out));
}

TEST(CompletionRingTest, ConcurrentProducersLoseNothingUncounted) {
  CompletionRing ring(1024);
  constexpr int kProducers = 4;
  constexpr uint64_t kPerProducer = 50000;
  std::atomic<bool> done{false};
  uint64_t popped = 0, checksum = 0;
  std::thread consumer([&] {
    Completion c;
    for (;;) {
      bool producers_done = done.load();  // read before the final drain
      while (ring.Pop(&c)) {
        ++popped;
        checksum += c.seq;
      }
      if (producers_done) break;
    }
  });
  std::vector<std::thread> producers;
  std::atomic<uint64_t> pushed_sum{0};
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (uint64_t i = 0; i < kPerProducer; ++i) {
        Completion c;
        c.seq = p * kPerProducer + i;
        if (ring.Push(c)) pushed_sum.fetch_add(c.seq);
      }
    });
  }
  for (auto& t : producers) t.join();
  done = true;
  consumer.join();
  EXPECT_EQ(popped + ring.dropped(), kProducers * kPerProducer);
  EXPECT_EQ(checksum, pushed_sum.load());
}

class RecorderTest : public ::testing::Test {
 protected:
  RecorderTest() : recorder_(64, 64) {
    comm_ = recorder_.InitComm(CommIdentity{0xabc, "world", 1, 8, 2, 0});
  }
  OpDescr AllReduce(uint64_t seq, uint8_t channels) {
    return OpDescr{false, "AllReduce", seq, "ncclFloat32", 1024, "RING", "SIMPLE", -1, channels};
  }
  Recorder recorder_;
  CommState* comm_;
};

TEST_F(RecorderTest, ChildrenAfterParentStopCompleteTheOperation) {
  void* op = recorder_.StartOp(comm_, AllReduce(7, 2));
  ASSERT_NE(op, nullptr);
  recorder_.StopEvent(op);  // "enqueued": the kernel reference keeps the slot
  EXPECT_EQ(recorder_.ops_in_use(), 1u);
  void* ch0 = recorder_.StartKernelChannel(op, 0, 1000);
  void* ch1 = recorder_.StartKernelChannel(op, 1, 1100);
  ASSERT_NE(ch0, nullptr);
  ASSERT_NE(ch1, nullptr);
  recorder_.RecordKernelChannelStop(ch0, 6000);  // 5000 ns
  recorder_.StopEvent(ch0);
  Completion c;
  EXPECT_FALSE(comm_->ring().Pop(&c));           // one channel still running
  recorder_.RecordKernelChannelStop(ch1, 8100);  // 7000 ns: the longest channel
  recorder_.StopEvent(ch1);
  ASSERT_TRUE(comm_->ring().Pop(&c));
  EXPECT_STREQ(c.func, "AllReduce");
  EXPECT_EQ(c.seq, 7u);
  EXPECT_STREQ(c.datatype, "ncclFloat32");
  EXPECT_EQ(c.count, 1024u);
  EXPECT_EQ(c.gpu_start_ns, 1000u);
  EXPECT_EQ(c.gpu_stop_ns, 8100u);
  EXPECT_EQ(c.exec_ns, 7000u);
  EXPECT_EQ(recorder_.ops_in_use(), 0u);
}

TEST_F(RecorderTest, ExtraOrForeignChannelsAreRejectedAndCounted) {
  void* op = recorder_.StartOp(comm_, AllReduce(0, 1));
  void* ch = recorder_.StartKernelChannel(op, 0, 10);
  EXPECT_EQ(recorder_.StartKernelChannel(op, 1, 10), nullptr);  // beyond n_channels
  EXPECT_EQ(recorder_.StartKernelChannel(nullptr, 0, 10), nullptr);
  EXPECT_EQ(recorder_.StartKernelChannel(ch, 0, 10), nullptr);  // a channel is no parent
  EXPECT_EQ(recorder_.StartKernelChannel(op, 200, 10), nullptr);
  EXPECT_EQ(recorder_.StartKernelChannel(op, 0, 10), nullptr);  // its one channel again
  // An operation announced without channels takes none (its slot may already be reused).
  void* no_channels = recorder_.StartOp(comm_, AllReduce(1, 0));
  EXPECT_EQ(recorder_.StartKernelChannel(no_channels, 0, 10), nullptr);
  recorder_.StopEvent(no_channels);
  EXPECT_EQ(recorder_.channel_events_orphaned(), 6u);
  EXPECT_EQ(recorder_.events_dropped(), 0u);
  recorder_.RecordKernelChannelStop(ch, 20);
  recorder_.StopEvent(ch);
  recorder_.StopEvent(op);
  EXPECT_EQ(recorder_.ops_in_use(), 0u);
}

TEST_F(RecorderTest, RepeatedChannelIdIsRefusedAndDoesNotCorruptTiming) {
  void* op = recorder_.StartOp(comm_, AllReduce(0, 2));
  recorder_.StopEvent(op);
  void* ch0 = recorder_.StartKernelChannel(op, 0, 100);
  EXPECT_EQ(recorder_.StartKernelChannel(op, 0, 1), nullptr);  // same channel again
  void* ch1 = recorder_.StartKernelChannel(op, 1, 200);
  recorder_.RecordKernelChannelStop(ch0, 400);
  recorder_.StopEvent(ch0);
  recorder_.RecordKernelChannelStop(ch1, 300);
  recorder_.StopEvent(ch1);
  Completion c;
  ASSERT_TRUE(comm_->ring().Pop(&c));
  EXPECT_EQ(c.gpu_start_ns, 100u);
  EXPECT_EQ(c.gpu_stop_ns, 400u);
  EXPECT_EQ(c.exec_ns, 300u);
  EXPECT_EQ(recorder_.channel_events_orphaned(), 1u);
  EXPECT_EQ(recorder_.ops_in_use(), 0u);

  // A reused slot must not pick up the previous operation's channel timestamps.
  void* again = recorder_.StartOp(comm_, AllReduce(1, 1));
  recorder_.StopEvent(again);
  void* only = recorder_.StartKernelChannel(again, 1, 1000);
  recorder_.RecordKernelChannelStop(only, 1500);
  recorder_.StopEvent(only);
  ASSERT_TRUE(comm_->ring().Pop(&c));
  EXPECT_EQ(c.gpu_start_ns, 1000u);
  EXPECT_EQ(c.exec_ns, 500u);
}

TEST_F(RecorderTest, OperationsWithoutGpuTimesAreCountedUntimed) {
  void* no_channels = recorder_.StartOp(comm_, AllReduce(0, 0));
  recorder_.StopEvent(no_channels);
  void* op = recorder_.StartOp(comm_, AllReduce(1, 1));
  recorder_.StopEvent(op);
  void* ch = recorder_.StartKernelChannel(op, 0, 10);
  recorder_.StopEvent(ch);  // no KernelChStop state arrived
  EXPECT_EQ(comm_->untimed(), 2u);
  Completion c;
  EXPECT_FALSE(comm_->ring().Pop(&c));
  EXPECT_EQ(recorder_.ops_in_use(), 0u);
}

// A KernelCh stop seconds after its start, for an operation the host enqueued a moment ago: the
// timestamps cannot be true. Counted, never measured; a plausible long kernel still is.
TEST_F(RecorderTest, AKernelLongerThanItsOperationLivedIsCountedNotMeasured) {
  void* op = recorder_.StartOp(comm_, AllReduce(0, 1));
  recorder_.StopEvent(op);
  void* ch = recorder_.StartKernelChannel(op, 0, 1'000'000);
  recorder_.RecordKernelChannelStop(ch, 1'000'000 + 5'000'000'000ull);  // "5 s"
  recorder_.StopEvent(ch);
  Completion c;
  ASSERT_TRUE(comm_->ring().Pop(&c));  // passed on marked, with its start only
  EXPECT_TRUE(c.bogus);
  EXPECT_EQ(c.gpu_start_ns, 1'000'000u);
  EXPECT_EQ(c.gpu_stop_ns, 1'000'000u);
  EXPECT_EQ(comm_->bogus(), 1u);
  EXPECT_EQ(comm_->untimed(), 0u);
  EXPECT_EQ(recorder_.ops_in_use(), 0u);

  // 9 ms is below what is checked; the next operation is measured as usual.
  void* ok = recorder_.StartOp(comm_, AllReduce(1, 1));
  recorder_.StopEvent(ok);
  void* ok_ch = recorder_.StartKernelChannel(ok, 0, 1'000'000);
  recorder_.RecordKernelChannelStop(ok_ch, 10'000'000);
  recorder_.StopEvent(ok_ch);
  ASSERT_TRUE(comm_->ring().Pop(&c));
  EXPECT_FALSE(c.bogus);
  EXPECT_EQ(c.exec_ns, 9'000'000u);
  EXPECT_EQ(comm_->bogus(), 1u);
}

TEST_F(RecorderTest, NullContextAndFullPoolDropWithoutCrashing) {
  EXPECT_EQ(recorder_.StartOp(nullptr, AllReduce(0, 1)), nullptr);
  recorder_.StopEvent(nullptr);
  recorder_.RecordKernelChannelStop(nullptr, 5);
  std::vector<void*> ops;
  for (int i = 0; i < 64; ++i) ops.push_back(recorder_.StartOp(comm_, AllReduce(i, 1)));
  EXPECT_EQ(recorder_.StartOp(comm_, AllReduce(64, 1)), nullptr);
  EXPECT_EQ(recorder_.events_dropped(), 1u);
}

TEST_F(RecorderTest, InFlightListingShowsProgress) {
  void* op = recorder_.StartOp(comm_, AllReduce(3, 2));
  recorder_.StopEvent(op);
  void* ch = recorder_.StartKernelChannel(op, 0, 10);
  std::vector<InFlightView> views;
  recorder_.ListInFlight(&views);
  ASSERT_EQ(views.size(), 1u);
  EXPECT_EQ(views[0].comm, comm_);
  EXPECT_EQ(views[0].seq, 3u);
  EXPECT_EQ(views[0].channels, 2u);
  EXPECT_EQ(views[0].channels_started, 1u);
  EXPECT_EQ(views[0].channels_done, 0u);
  EXPECT_TRUE(recorder_.Referenced(comm_));
  recorder_.RecordKernelChannelStop(ch, 20);
  recorder_.StopEvent(ch);
  void* ch1 = recorder_.StartKernelChannel(op, 1, 10);
  recorder_.RecordKernelChannelStop(ch1, 20);
  recorder_.StopEvent(ch1);
  views.clear();
  recorder_.ListInFlight(&views);
  EXPECT_TRUE(views.empty());
  EXPECT_FALSE(recorder_.Referenced(comm_));
}

}  // namespace
}  // namespace ncclwatch::plugin

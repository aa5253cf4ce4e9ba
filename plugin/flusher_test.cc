#include "plugin/flusher.h"

#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "gtest/gtest.h"
#include "plugin/compactor.h"
#include "proto/samples.h"

namespace ncclwatch::plugin {
namespace {

class MemorySink : public ReportSink {
 public:
  void Submit(ncclwatch::v1::RankReport report) override { reports.push_back(std::move(report)); }
  bool Drain(std::chrono::milliseconds) override { return true; }
  uint64_t dropped() const override { return 0; }
  std::vector<ncclwatch::v1::RankReport> reports;
};

class FlusherTest : public ::testing::Test {
 protected:
  FlusherTest()
      : recorder_(256, 1024),
        flusher_(Config(), recorder_, ProcessIdentity{"job-1", "host-a", 42, 7ull << 32}, sink_) {
    comm_ = recorder_.InitComm(
        CommIdentity{0x1234, "world", 3, 4, 2, 1, "GPU-12345678-0000-0000-0000-000000000001"});
  }
  static PluginConfig Config() {
    PluginConfig c;
    c.max_samples = 8;
    return c;
  }
  // Runs one complete operation with the given GPU start and duration on `channels` channels.
  void RunOp(const char* func, uint64_t seq, uint64_t count, uint64_t start, uint64_t dur,
             bool p2p = false, int peer = -1, CommState* comm = nullptr) {
    OpDescr d{p2p, func, seq, "ncclFloat32", count, "RING", "LL", peer, 2};
    void* op = recorder_.StartOp(comm != nullptr ? comm : comm_, d);
    recorder_.StopEvent(op);
    for (uint8_t ch = 0; ch < 2; ++ch) {
      void* h = recorder_.StartKernelChannel(op, ch, start);
      recorder_.RecordKernelChannelStop(h, start + dur);
      recorder_.StopEvent(h);
    }
  }
  MemorySink sink_;
  Recorder recorder_;
  Flusher flusher_;
  CommState* comm_;
};

TEST_F(FlusherTest, CompactsOneIntervalIntoOneReport) {
  // Two 8 KiB AllReduces of 10 and 40 µs: busBw = 8192*2*3/4 / t.
  RunOp("AllReduce", 0, 2048, 1'000'000, 10'000);
  RunOp("AllReduce", 1, 2048, 2'000'000, 40'000);
  RunOp("Send", 0, 256, 3'000'000, 5'000, true, 0);
  flusher_.RunOnce(true);
  ASSERT_EQ(sink_.reports.size(), 1u);
  const ncclwatch::v1::RankReport r = sink_.reports[0];  // a copy: the vector grows below
  EXPECT_EQ(r.identity().job_id(), "job-1");
  EXPECT_EQ(r.identity().comm_hash(), 0x1234u);
  EXPECT_EQ(r.identity().rank(), 3);
  EXPECT_EQ(r.identity().nranks(), 4);
  EXPECT_EQ(r.identity().cuda_device(), 1);
  EXPECT_EQ(r.identity().gpu_uuid(), "GPU-12345678-0000-0000-0000-000000000001");
  EXPECT_EQ(r.identity().pod(), "");  // the agent's to set
  EXPECT_FALSE(r.identity().has_global_rank()) << "the launcher set no rank";
  EXPECT_FALSE(r.identity().has_local_rank());
  EXPECT_EQ(r.report_id() >> 32, 7u);
  ASSERT_EQ(r.stats_size(), 2);
  auto find = [&](const std::string& op) -> const ncclwatch::v1::OpStats& {
    for (const auto& s : r.stats()) {
      if (s.op() == op) return s;
    }
    ADD_FAILURE() << "no stats for " << op;
    return r.stats(0);
  };
  const auto& ar = find("AllReduce");
  EXPECT_EQ(ar.op(), "AllReduce");
  EXPECT_EQ(ar.algo_proto(), "RING_LL");
  EXPECT_EQ(ar.message_size(), "8-9KB");
  EXPECT_EQ(ar.count(), 2u);
  EXPECT_EQ(ar.bytes(), 16384u);
  EXPECT_DOUBLE_EQ(ar.exec_time_us_sum(), 50.0);
  EXPECT_DOUBLE_EQ(ar.exec_time_us_min(), 10.0);
  EXPECT_DOUBLE_EQ(ar.exec_time_us_max(), 40.0);
  // 10 µs -> bucket [8,16) = 4; 40 µs -> [32,64) = 6.
  ASSERT_EQ(ar.exec_time_hist_size(), 7);
  EXPECT_EQ(ar.exec_time_hist(4), 1u);
  EXPECT_EQ(ar.exec_time_hist(6), 1u);
  double bus10 = 8192 * 1.5 / 1e9 / 10e-6, bus40 = 8192 * 1.5 / 1e9 / 40e-6;
  EXPECT_NEAR(std::exp(ar.bus_bw_gbs_log_sum() / ar.bw_samples()), std::sqrt(bus10 * bus40), 1e-9);
  const auto& send = find("Send");
  EXPECT_TRUE(send.p2p());
  EXPECT_EQ(send.peer(), 0);
  EXPECT_EQ(send.algo_proto(), "");
  EXPECT_EQ(send.message_size(), "1-2KB");
  // Collectives are sampled (stride 1), and so is the Send (exchange 0 from rank 3 to rank 0:
  // its pick is a multiple of kExchangeStrideFactor x stride 1 x f 1 for 4 ranks), in a column of
  // its own with its peer and its size bucket's floor.
  ASSERT_EQ(ExchangePick(0, 3, 0) % kExchangeStrideFactor, 0u);
  std::vector<Sample> samples;
  int sends = 0;
  ForEachSample(r, [&](const ncclwatch::v1::SampleColumn& col, const Sample& s) {
    if (col.op() == "Send") {
      ++sends;
      EXPECT_TRUE(col.has_peer());
      EXPECT_EQ(col.peer(), 0);
      EXPECT_EQ(col.algo_proto(), "");
      EXPECT_EQ(col.bytes(), 1024u);
      EXPECT_EQ(s.seq, 0u);
      EXPECT_EQ(s.duration_ns, 5'000u);
      return;
    }
    EXPECT_FALSE(col.has_peer());
    EXPECT_EQ(col.op(), "AllReduce");
    EXPECT_EQ(col.algo_proto(), "RING_LL");
    EXPECT_EQ(col.bytes(), 8192u);
    EXPECT_EQ(col.channels(), 2u);
    samples.push_back(s);
  });
  EXPECT_EQ(sends, 1);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[1].seq, 1u);
  EXPECT_EQ(samples[1].gpu_start_ns, 2'000'000u);
  EXPECT_EQ(samples[1].duration_ns, 40'000u);
  EXPECT_EQ(r.sample_stride(), 1u);
  EXPECT_TRUE(r.has_clock());
  EXPECT_FALSE(r.final());

  // The next interval starts empty but still reports (a heartbeat).
  flusher_.RunOnce(true);
  ASSERT_EQ(sink_.reports.size(), 2u);
  EXPECT_EQ(sink_.reports[1].stats_size(), 0);
  EXPECT_NE(sink_.reports[1].report_id(), r.report_id());
}

TEST_F(FlusherTest, StrideDoublesToStayUnderTheSampleCapAndStaysNested) {
  for (uint64_t seq = 0; seq < 30; ++seq) RunOp("AllReduce", seq, 1024, seq * 1000, 500);
  flusher_.RunOnce(true);
  const auto& r = sink_.reports.back();
  // 30 collectives, cap 8: stride 4 keeps seqs 0,4,...,28 = 8 records.
  EXPECT_EQ(r.sample_stride(), 4u);
  ASSERT_EQ(SampleCount(r), 8u);
  ForEachSample(r, [](const auto&, const Sample& s) { EXPECT_EQ(s.seq % 4, 0u); });
  EXPECT_EQ(r.drops().samples_capped(), 22u);
}

TEST_F(FlusherTest, PointToPointSamplesHaveACapOfTheirOwn) {
  // 40 Sends to rank 0, those whose pick is a multiple of kExchangeStrideFactor sampled, would
  // pass the cap of 8 and, sharing it, thin the AllReduces too. Their own stride doubles instead;
  // the collectives' stays 1.
  int candidates = 0;
  for (uint64_t n = 0; n < 40; ++n) {
    candidates += ExchangePick(n, 3, 0) % kExchangeStrideFactor == 0 ? 1 : 0;
  }
  ASSERT_GT(candidates, 8);
  for (uint64_t i = 0; i < 40; ++i) RunOp("Send", 0, 256, 1'000'000 + i * 10'000, 1'000, true, 0);
  for (uint64_t seq = 0; seq < 4; ++seq)
    RunOp("AllReduce", seq, 1024, 2'000'000 + seq * 10'000, 500);
  flusher_.RunOnce(true);
  const auto& r = sink_.reports.back();
  EXPECT_EQ(r.sample_stride(), 1u);
  int collectives = 0, exchanges = 0;
  ForEachSample(r, [&](const ncclwatch::v1::SampleColumn& col, const Sample&) {
    (col.has_peer() ? exchanges : collectives)++;
  });
  EXPECT_EQ(collectives, 4);
  EXPECT_GT(exchanges, 0);
  EXPECT_LE(exchanges, 8);
  EXPECT_EQ(r.drops().samples_capped(), static_cast<uint64_t>(candidates - exchanges));
}

TEST_F(FlusherTest, OwnTimeSpansTheCommunicatorsOfOneGpu) {
  // comm_ (GPU 1) and `dp` (also GPU 1) interleave; `other` runs on GPU 2, another clock.
  CommState* dp = recorder_.InitComm(CommIdentity{0x5678, "dp", 0, 4, 2, 1, ""});
  CommState* other = recorder_.InitComm(CommIdentity{0x9abc, "gpu2", 0, 2, 2, 2, ""});
  RunOp("AllReduce", 0, 1024, 1'000'000, 100'000);                   // ends 1.1 ms
  RunOp("AllReduce", 0, 1024, 1'300'000, 50'000, false, -1, dp);     // 200 µs after it
  ASSERT_EQ(ExchangePick(0, 0, 2) % kExchangeStrideFactor, 0u);      // the Send below is sampled
  RunOp("Send", 0, 1024, 1'400'000, 10'000, true, 2, dp);            // p2p: 50 µs after the last
  RunOp("AllReduce", 1, 1024, 1'450'000, 100'000);                   // 40 µs after the Send
  RunOp("AllReduce", 0, 1024, 1'450'000, 10'000, false, -1, other);  // first on GPU 2
  RunOp("AllReduce", 1, 1024, 1'470'000, 10'000, false, -1, other);  // 10 µs after it
  flusher_.RunOnce(true);
  using Key = std::tuple<uint64_t, std::string, uint64_t>;  // (comm_hash, op, seq)
  std::map<Key, int64_t> own;
  for (const auto& r : sink_.reports) {
    ForEachSample(r, [&](const ncclwatch::v1::SampleColumn& col, const Sample& s) {
      own[{r.identity().comm_hash(), col.op(), s.seq}] = s.own_time_ns;
    });
  }
  EXPECT_EQ(own, (std::map<Key, int64_t>{{{0x1234, "AllReduce", 0}, -1},
                                         {{0x1234, "AllReduce", 1}, 40'000},
                                         {{0x5678, "AllReduce", 0}, 200'000},
                                         {{0x5678, "Send", 0}, 50'000},
                                         {{0x9abc, "AllReduce", 0}, -1},
                                         {{0x9abc, "AllReduce", 1}, 10'000}}));
}

TEST_F(FlusherTest, PointToPointIsNumberedPerPeerAndDirectionAndSampledAlikeAtBothEnds) {
  // 16 ranks: the p2p stride is 2 kExchangeStrideFactor times the collectives' (f = 16 / 8 = 2).
  // Rank 3 exchanges with ranks 5 and 6, both directions, interleaved; each (peer, direction)
  // counts from 0.
  CommState* ep = recorder_.InitComm(CommIdentity{0x4242, "ep", 3, 16, 2, 1, ""});
  uint64_t t = 1'000'000;
  const uint64_t every = 2 * kExchangeStrideFactor;
  const int steps = static_cast<int>(4 * kExchangeStrideFactor);  // a few samples a pair
  for (int step = 0; step < steps; ++step) {
    for (int peer : {5, 6}) {
      RunOp("Send", 999, 1024, t += 10'000, 1'000, true, peer, ep);  // NCCL's seq is ignored
      RunOp("Recv", 999, 1024, t += 10'000, 1'000, true, peer, ep);
    }
  }
  RunOp("Send", 0, 1024, t += 10'000, 1'000, true, 3, ep);   // to itself: never sampled
  RunOp("Send", 0, 1024, t += 10'000, 1'000, true, 16, ep);  // no such rank: never sampled
  flusher_.RunOnce(true);
  std::map<std::pair<std::string, int>, std::vector<uint64_t>> seqs;  // (op, peer) -> seqs
  for (const auto& r : sink_.reports) {
    if (r.identity().comm_hash() != 0x4242) continue;
    ForEachSample(r, [&](const ncclwatch::v1::SampleColumn& col, const Sample& s) {
      ASSERT_TRUE(col.has_peer());
      seqs[{col.op(), col.peer()}].push_back(s.seq);
    });
  }
  // Sampled when ExchangePick(seq, 3, peer) % every == 0, in both directions alike. Rank 5's own
  // plugin picks the same exchanges (ExchangePickTest).
  size_t expected = 0;
  for (int peer : {5, 6}) {
    std::vector<uint64_t> picked;
    for (uint64_t n = 0; n < static_cast<uint64_t>(steps); ++n) {
      if (ExchangePick(n, 3, peer) % every == 0) picked.push_back(n);
    }
    expected += 2 * picked.size();
    EXPECT_EQ(seqs[std::make_pair("Send", peer)], picked) << "peer " << peer;
    EXPECT_EQ(seqs[std::make_pair("Recv", peer)], picked) << "peer " << peer;
  }
  ASSERT_GT(expected, 0u);
  ASSERT_LE(expected, 8u);  // under the cap: none thinned
  EXPECT_EQ(seqs.size(), 4u);
}

// The exchange sampling number: the same at both ends and in both directions, about one in four
// picked with a stride of 4, and not periodic in the exchange's number (a pipeline exchanges with a
// neighbour once per microbatch: every 4th of a pair would be the same microbatch each step).
TEST(ExchangePickTest, SymmetricUniformAndNotFollowingTheSchedule) {
  int picked = 0;
  std::set<uint64_t> residues;  // n mod 4 of the picked numbers of one pair
  for (uint64_t n = 0; n < 4096; ++n) {
    EXPECT_EQ(ExchangePick(n, 2, 7), ExchangePick(n, 7, 2));
    if (ExchangePick(n, 2, 7) % 4 == 0) {
      ++picked;
      residues.insert(n % 4);
    }
  }
  EXPECT_GT(picked, 900);  // 1024 expected; 4 sigma is 111
  EXPECT_LT(picked, 1150);
  EXPECT_EQ(residues.size(), 4u);
  // Other pairs pick other numbers: the sampled exchanges of one step are spread over pairs.
  int same = 0;
  for (uint64_t n = 0; n < 4096; ++n) {
    same += (ExchangePick(n, 2, 7) % 4 == 0) == (ExchangePick(n, 2, 8) % 4 == 0) ? 1 : 0;
  }
  EXPECT_LT(same, 3000);  // independent: 62.5% agree (2560); identical: all 4096
}

// A KernelCh stop NCCL never delivered: the operation stays in the plugin as if in flight. Once
// an operation of the communicator enqueued well after it has completed, it cannot be running
// (NCCL runs a communicator's operations in order): counted as lost, not listed, so that lost
// telemetry does not look like a hang.
TEST_F(FlusherTest, AnOperationOvertakenByALaterCompletionIsLostNotInFlight) {
  void* op = recorder_.StartOp(
      comm_, OpDescr{false, "AllReduce", 7, "ncclInt8", 64, "RING", "SIMPLE", -1, 2});
  recorder_.StopEvent(op);
  for (uint8_t ch = 0; ch < 2; ++ch) {
    void* h = recorder_.StartKernelChannel(op, ch, 1'000);
    if (ch == 0) {  // channel 1's stop never arrives
      recorder_.RecordKernelChannelStop(h, 2'000);
      recorder_.StopEvent(h);
    }
  }
  flusher_.RunOnce(true);
  EXPECT_EQ(sink_.reports.back().in_flight_count(), 1u);  // nothing says otherwise yet
  EXPECT_EQ(sink_.reports.back().drops().completions_lost(), 0u);
  // An operation enqueued a second later completes.
  comm_->NoteCompleted(CoarseMonotonicNs() + 1'000'000'000);
  flusher_.RunOnce(true);
  const auto& r = sink_.reports.back();
  EXPECT_EQ(r.in_flight_count(), 0u);
  EXPECT_EQ(r.in_flight_size(), 0);
  EXPECT_EQ(r.drops().completions_lost(), 1u);
}

TEST_F(FlusherTest, ReportsInFlightAndFinalReport) {
  void* op = recorder_.StartOp(
      comm_, OpDescr{false, "AllGather", 5, "ncclInt8", 64, "RING", "SIMPLE", -1, 2});
  recorder_.StopEvent(op);
  recorder_.StartKernelChannel(op, 0, 100);
  flusher_.FinalizeComm(comm_);
  ASSERT_EQ(sink_.reports.size(), 1u);
  const auto& r = sink_.reports[0];
  EXPECT_TRUE(r.final());
  EXPECT_EQ(r.in_flight_count(), 1u);
  ASSERT_EQ(r.in_flight_size(), 1);
  EXPECT_EQ(r.in_flight(0).op(), "AllGather");
  EXPECT_EQ(r.in_flight(0).seq(), 5u);
  EXPECT_EQ(r.in_flight(0).channels(), 2u);
  EXPECT_EQ(r.in_flight(0).channels_started(), 1u);
  EXPECT_TRUE(recorder_.Comms().empty());
}

TEST(FlusherIdentityTest, ReportsCarryTheTrainingsOwnRanks) {
  MemorySink sink;
  Recorder recorder(16, 64);
  ProcessIdentity identity{"job-1", "host-a", 42, 7ull << 32};
  identity.global_rank = 5;
  identity.local_rank = 1;
  Flusher flusher(PluginConfig(), recorder, identity, sink);
  recorder.InitComm(CommIdentity{0x99, "tp2", 1, 4, 1, 1, ""});
  flusher.RunOnce(true);
  ASSERT_FALSE(sink.reports.empty());
  EXPECT_EQ(sink.reports[0].identity().rank(), 1) << "the communicator's rank";
  EXPECT_EQ(sink.reports[0].identity().global_rank(), 5) << "the training's";
  EXPECT_EQ(sink.reports[0].identity().local_rank(), 1);
}

}  // namespace
}  // namespace ncclwatch::plugin

#include "proto/samples.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ncclwatch {
namespace {

TEST(SampleColumnsTest, RoundTripsInAnyOrderAndGroupsByColumnKey) {
  ncclwatch::v1::RankReport r;
  SampleColumnWriter w(&r);
  std::vector<Sample> in = {{0, 1'000'000'000'000, 50},
                            {4, 1'000'000'500'000, 70},
                            {2, 999'999'000'000, 60}};  // out of order on purpose
  for (const Sample& s : in) w.Add("AllReduce", "RING_LL", 4096, 2, s);
  w.Add("AllGather", "RING_LL", 4096, 2, {9, 5, 6});
  w.Add("AllReduce", "RING_LL", 8192, 2, {8, 7, 8});  // another size: another column
  ASSERT_EQ(r.sample_columns_size(), 3);
  EXPECT_TRUE(SampleColumnsWellFormed(r));
  EXPECT_EQ(SampleCount(r), 5u);
  std::vector<Sample> out;
  std::vector<std::string> ops;
  ForEachSample(r, [&](const ncclwatch::v1::SampleColumn& c, const Sample& s) {
    out.push_back(s);
    ops.push_back(c.op() + "/" + std::to_string(c.bytes()));
  });
  ASSERT_EQ(out.size(), 5u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i].seq, in[i].seq);
    EXPECT_EQ(out[i].gpu_start_ns, in[i].gpu_start_ns);
    EXPECT_EQ(out[i].duration_ns, in[i].duration_ns);
  }
  EXPECT_EQ(ops[3], "AllGather/4096");
  EXPECT_EQ(out[4].seq, 8u);
  EXPECT_EQ(ops[4], "AllReduce/8192");
}

TEST(SampleColumnsTest, PointToPointColumnsCarryTheirPeer) {
  ncclwatch::v1::RankReport r;
  SampleColumnWriter w(&r);
  w.Add("Send", "", 1024, 1, {0, 100, 10}, /*peer=*/3);
  w.Add("Send", "", 1024, 1, {1, 200, 10}, /*peer=*/5);  // another peer: another column
  w.Add("Send", "", 1024, 1, {2, 300, 10}, /*peer=*/3);
  w.Add("AllReduce", "RING_LL", 1024, 1, {0, 400, 10});
  ASSERT_EQ(r.sample_columns_size(), 1);      // the AllReduce
  ASSERT_EQ(r.p2p_sample_columns_size(), 2);  // a field of their own
  EXPECT_EQ(SampleCount(r), 4u);
  std::vector<std::string> seen;
  ForEachSample(r, [&](const ncclwatch::v1::SampleColumn& c, const Sample& s) {
    seen.push_back(c.op() + (c.has_peer() ? ">" + std::to_string(c.peer()) : "") + "#" +
                   std::to_string(s.seq));
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"AllReduce#0", "Send>3#0", "Send>3#2", "Send>5#1"}));
}

TEST(SampleColumnsTest, ConsecutiveSamplesCostAboutNineBytes) {
  ncclwatch::v1::RankReport r;
  SampleColumnWriter w(&r);
  for (uint64_t seq = 0; seq < 1000; ++seq) {
    w.Add("AllReduce", "RING_SIMPLE", 1 << 25, 16,
          {seq, 1'763'000'000'000'000'000 + seq * 20'000'000, 3'000'000 + seq % 1000});
  }
  // About 8 bytes for seq, start and duration, and 1 for the unknown (-1) own time.
  size_t bytes = r.ByteSizeLong();
  EXPECT_LT(bytes, 1000u * 11) << bytes;
}

TEST(SampleColumnsTest, OwnTimeRoundTripsAndCostsAFewBytesMore) {
  ncclwatch::v1::RankReport r;
  SampleColumnWriter w(&r);
  for (uint64_t seq = 0; seq < 1000; ++seq) {
    const int64_t own = seq == 0 ? -1 : 5'000'000 + static_cast<int64_t>(seq % 997) * 1000;
    w.Add("AllReduce", "RING_SIMPLE", 1 << 25, 16,
          {seq, 1'763'000'000'000'000'000 + seq * 20'000'000, 3'000'000 + seq % 1000, own});
  }
  ASSERT_TRUE(SampleColumnsWellFormed(r));
  uint64_t seen = 0;
  ForEachSample(r, [&](const ncclwatch::v1::SampleColumn&, const Sample& s) {
    const int64_t want = s.seq == 0 ? -1 : 5'000'000 + static_cast<int64_t>(s.seq % 997) * 1000;
    EXPECT_EQ(s.own_time_ns, want) << s.seq;
    ++seen;
  });
  EXPECT_EQ(seen, 1000u);
  // A 5 ms own time is a 4-byte zigzag varint.
  EXPECT_LT(r.ByteSizeLong(), 1000u * 14) << r.ByteSizeLong();
}

TEST(SampleColumnsTest, ColumnsWithoutOwnTimeReadAsUnknown) {
  ncclwatch::v1::RankReport r;
  auto* c = r.add_sample_columns();  // as a plugin that predates own_time_ns writes it
  c->set_op("AllReduce");
  c->add_seq_delta(4);
  c->add_gpu_start_delta_ns(100);
  c->add_duration_ns(7);
  ASSERT_TRUE(SampleColumnsWellFormed(r));
  int seen = 0;
  ForEachSample(r, [&](const ncclwatch::v1::SampleColumn&, const Sample& s) {
    EXPECT_EQ(s.seq, 4u);
    EXPECT_EQ(s.own_time_ns, -1);
    ++seen;
  });
  EXPECT_EQ(seen, 1);
  c->add_own_time_ns(-7);  // a negative own time other than -1 is read as unknown
  ASSERT_TRUE(SampleColumnsWellFormed(r));
  ForEachSample(r, [&](const ncclwatch::v1::SampleColumn&, const Sample& s) {
    EXPECT_EQ(s.own_time_ns, -1);
  });
  c->add_own_time_ns(5);  // longer than the other arrays
  EXPECT_FALSE(SampleColumnsWellFormed(r));
}

TEST(SampleColumnsTest, MismatchedColumnsAreMalformed) {
  ncclwatch::v1::RankReport r;
  auto* c = r.add_sample_columns();
  c->add_seq_delta(1);
  c->add_gpu_start_delta_ns(1);
  EXPECT_FALSE(SampleColumnsWellFormed(r));
}

}  // namespace
}  // namespace ncclwatch

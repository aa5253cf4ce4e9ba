#include "common/op_math.h"

#include <cmath>

#include "gtest/gtest.h"

namespace ncclwatch {
namespace {

TEST(OpMathTest, InspectorSizeBuckets) {
  EXPECT_EQ(MessageSizeBucket(0), "0B");
  EXPECT_EQ(MessageSizeBucket(1), "1-2B");
  EXPECT_EQ(MessageSizeBucket(1023), "1023-1024B");
  EXPECT_EQ(MessageSizeBucket(1024), "1-2KB");
  EXPECT_EQ(MessageSizeBucket(8192), "8-9KB");
  EXPECT_EQ(MessageSizeBucket(9215), "8-9KB");
  EXPECT_EQ(MessageSizeBucket(512ull << 20), "512-513MB");
  EXPECT_EQ(MessageSizeBucket(4ull << 30), "4-5GB");
  EXPECT_EQ(MessageSizeBucket(3000ull << 40), "3000-3001TB");  // TB is the largest unit
  EXPECT_EQ(MessageSizeBucketFloor(9215), 8192u);
  EXPECT_EQ(MessageSizeBucketFloor(1000), 1000u);
}

TEST(OpMathTest, MessageBytes) {
  EXPECT_EQ(MessageBytes("ncclFloat32", 1000), 4000u);
  EXPECT_EQ(MessageBytes("ncclBfloat16", 10), 20u);
  EXPECT_EQ(MessageBytes("ncclInt8", 77), 77u);  // AllGather/Broadcast arrive as bytes
  EXPECT_EQ(MessageBytes("Unknown", 5), 5u);     // ncclUint8
}

TEST(OpMathTest, BusBandwidthFollowsNcclTests) {
  // 1 GB AllReduce on 8 ranks in 100 ms: algBw 10 GB/s, busBw 10 * 2*7/8 = 17.5 GB/s.
  Bandwidth ar = ComputeBandwidth("AllReduce", 8, 1'000'000'000, 100'000'000);
  EXPECT_DOUBLE_EQ(ar.alg_gbs, 10.0);
  EXPECT_DOUBLE_EQ(ar.bus_gbs, 17.5);
  // AllGather: S is per-rank, traffic S*n, factor (n-1)/n.
  Bandwidth ag = ComputeBandwidth("AllGather", 4, 250'000'000, 100'000'000);
  EXPECT_DOUBLE_EQ(ag.alg_gbs, 10.0);
  EXPECT_DOUBLE_EQ(ag.bus_gbs, 7.5);
  Bandwidth send = ComputeBandwidth("Send", 2, 1'000'000, 1'000'000);
  EXPECT_DOUBLE_EQ(send.bus_gbs, 1.0);
  EXPECT_DOUBLE_EQ(ComputeBandwidth("AllReduce", 8, 1000, 0).bus_gbs, 0.0);
  EXPECT_DOUBLE_EQ(ComputeBandwidth("Invalid", 8, 1000, 10).bus_gbs, 0.0);
}

TEST(OpMathTest, ExecTimeBuckets) {
  EXPECT_EQ(ExecTimeBucket(0.5), 0);
  EXPECT_EQ(ExecTimeBucket(1.0), 1);
  EXPECT_EQ(ExecTimeBucket(1.99), 1);
  EXPECT_EQ(ExecTimeBucket(2.0), 2);
  EXPECT_EQ(ExecTimeBucket(1000.0), 10);  // [512, 1024)
  EXPECT_EQ(ExecTimeBucket(1e30), kExecHistBuckets - 1);
  EXPECT_EQ(ExecTimeBucket(std::nan("")), 0);
}

}  // namespace
}  // namespace ncclwatch

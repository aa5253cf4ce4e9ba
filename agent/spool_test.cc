#include "agent/spool.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace ncclwatch::agent {
namespace {

class SpoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ncclwatch-spool-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static ncclwatch::v1::NodeBatchBytes Batch(uint64_t seq, int reports, size_t payload = 100) {
    ncclwatch::v1::NodeBatchBytes b;
    b.set_agent_id("node-a-1234");
    b.set_batch_seq(seq);
    for (int i = 0; i < reports; ++i) {
      ncclwatch::v1::RankReport r;
      r.set_report_id(seq * 1000 + i);
      r.mutable_identity()->set_job_id(std::string(payload, 'j'));
      r.SerializeToString(b.add_reports());
    }
    return b;
  }
  std::string dir_;
};

TEST_F(SpoolTest, WhatIsNotAcknowledgedComesBackInOrderAfterARestart) {
  {
    MetricRegistry metrics;
    auto spool = Spool::Open(dir_, 1 << 30, metrics);
    ASSERT_TRUE(spool.ok()) << spool.status();
    auto a = (*spool)->Add(Batch(1, 2));
    auto b = (*spool)->Add(Batch(2, 2));
    auto c = (*spool)->Add(Batch(3, 2));
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    (*spool)->Remove(*b);  // acknowledged
    EXPECT_EQ((*spool)->batches(), 2u);
  }
  MetricRegistry metrics;
  auto reopened = Spool::Open(dir_, 1 << 30, metrics);
  ASSERT_TRUE(reopened.ok());
  auto recovered = (*reopened)->TakeRecovered();
  ASSERT_EQ(recovered.size(), 2u);
  EXPECT_EQ((*reopened)->Read(recovered[0].name)->batch_seq(), 1u);
  auto third = (*reopened)->Read(recovered[1].name);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->batch_seq(), 3u);
  ncclwatch::v1::NodeBatch decoded;  // what the aggregator will read
  ASSERT_TRUE(decoded.ParseFromString(third->SerializeAsString()));
  EXPECT_EQ(decoded.reports(1).report_id(), 3001u);
  EXPECT_EQ(recovered[1].reports, 2);
  EXPECT_TRUE((*reopened)->TakeRecovered().empty());  // handed out once
  (*reopened)->Remove(recovered[0].name);
  (*reopened)->Remove(recovered[1].name);
  EXPECT_EQ((*reopened)->bytes(), 0);
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

TEST_F(SpoolTest, AFullSpoolDropsTheOldestBatchesAndCountsThem) {
  MetricRegistry metrics;
  const auto size = static_cast<int64_t>(Batch(1, 10, 1000).ByteSizeLong());
  auto spool = Spool::Open(dir_, 3 * size + size / 2, metrics);  // room for three
  ASSERT_TRUE(spool.ok());
  for (uint64_t seq = 1; seq <= 5; ++seq) ASSERT_TRUE((*spool)->Add(Batch(seq, 10, 1000)).ok());
  EXPECT_EQ((*spool)->batches(), 3u);
  EXPECT_LE((*spool)->bytes(), 3 * size + size / 2);
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("ncclwatch_agent_spool_dropped_batches_total 2"), std::string::npos) << text;
  EXPECT_NE(text.find("ncclwatch_agent_spool_dropped_reports_total 20"), std::string::npos) << text;
  MetricRegistry again;
  auto reopened = Spool::Open(dir_, 1 << 30, again);
  auto recovered = (*reopened)->TakeRecovered();
  ASSERT_EQ(recovered.size(), 3u);
  EXPECT_EQ((*reopened)->Read(recovered[0].name)->batch_seq(), 3u);  // 1 and 2 were the oldest
}

TEST_F(SpoolTest, ABatchLargerThanTheWholeSpoolIsRefusedAndNothingIsDropped) {
  MetricRegistry metrics;
  auto spool = Spool::Open(dir_, 64 << 10, metrics);
  ASSERT_TRUE(spool.ok());
  ASSERT_TRUE((*spool)->Add(Batch(1, 1)).ok());
  auto big = (*spool)->Add(Batch(2, 100, 1000));  // ~100 KB
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*spool)->batches(), 1u);
  EXPECT_LE((*spool)->bytes(), 64 << 10);
}

TEST_F(SpoolTest, UnreadableAndHalfWrittenFilesAreNeverReplayed) {
  {
    MetricRegistry metrics;
    auto spool = Spool::Open(dir_, 1 << 30, metrics);
    ASSERT_TRUE((*spool)->Add(Batch(1, 1)).ok());
  }
  std::ofstream(dir_ + "/00000000000000000002-00000000000000000000.batch") << "not a batch";
  std::ofstream(dir_ + "/.00000000000000000003-00000000000000000000.batch.tmp") << "partial";
  MetricRegistry metrics;
  auto spool = Spool::Open(dir_, 1 << 30, metrics);
  ASSERT_TRUE(spool.ok());
  EXPECT_EQ((*spool)->TakeRecovered().size(), 1u);
  EXPECT_NE(metrics.Render().find("ncclwatch_agent_spool_corrupt_files_total 1"),
            std::string::npos);
  EXPECT_TRUE(
      std::filesystem::exists(dir_ + "/00000000000000000002-00000000000000000000.batch.corrupt"));
  EXPECT_FALSE(
      std::filesystem::exists(dir_ + "/.00000000000000000003-00000000000000000000.batch.tmp"));
}

TEST_F(SpoolTest, OpenFailsClearlyWhereNoDirectoryCanBe) {
  MetricRegistry metrics;
  auto spool = Spool::Open("/proc/ncclwatch-no-spool-here", 1 << 30, metrics);
  ASSERT_FALSE(spool.ok());
  EXPECT_NE(spool.status().message().find("cannot create spool"), std::string::npos);
}

}  // namespace
}  // namespace ncclwatch::agent

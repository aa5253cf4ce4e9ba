#include "agent/spool.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace ncclwatch::agent {
namespace {

using ::ncclwatch::testutil::IsOk;

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
    ASSERT_THAT(spool, IsOk());
    auto a = (*spool)->Add(Batch(1, 2));
    auto b = (*spool)->Add(Batch(2, 2));
    auto c = (*spool)->Add(Batch(3, 2));
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    (*spool)->Remove(*b);  // acknowledged
    EXPECT_EQ((*spool)->batches(), 2u);
  }
  MetricRegistry metrics;
  auto reopened = Spool::Open(dir_, 1 << 30, metrics);
  ASSERT_THAT(reopened, IsOk());
  auto recovered = (*reopened)->TakeRecovered();
  ASSERT_EQ(recovered.size(), 2u);
  EXPECT_EQ((*reopened)->Read(recovered[0].name)->batch_seq(), 1u);
  auto third = (*reopened)->Read(recovered[1].name);
  ASSERT_THAT(third, IsOk());
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
  ASSERT_THAT(spool, IsOk());
  for (uint64_t seq = 1; seq <= 5; ++seq) ASSERT_THAT((*spool)->Add(Batch(seq, 10, 1000)), IsOk());
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
  ASSERT_THAT(spool, IsOk());
  ASSERT_THAT((*spool)->Add(Batch(1, 1)), IsOk());
  auto big = (*spool)->Add(Batch(2, 100, 1000));  // ~100 KB
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*spool)->batches(), 1u);
  EXPECT_LE((*spool)->bytes(), 64 << 10);
}

TEST_F(SpoolTest, UnreadableAndHalfWrittenFilesAreNeverReplayed) {
  {
    MetricRegistry metrics;
    auto spool = Spool::Open(dir_, 1 << 30, metrics);
    ASSERT_THAT((*spool)->Add(Batch(1, 1)), IsOk());
  }
  std::ofstream(dir_ + "/00000000000000000002-00000000000000000000.batch") << "not a batch";
  std::ofstream(dir_ + "/.00000000000000000003-00000000000000000000.batch.tmp") << "partial";
  MetricRegistry metrics;
  auto spool = Spool::Open(dir_, 1 << 30, metrics);
  ASSERT_THAT(spool, IsOk());
  EXPECT_EQ((*spool)->TakeRecovered().size(), 1u);
  EXPECT_NE(metrics.Render().find("ncclwatch_agent_spool_corrupt_files_total 1"),
            std::string::npos);
  EXPECT_TRUE(
      std::filesystem::exists(dir_ + "/00000000000000000002-00000000000000000000.batch.corrupt"));
  EXPECT_FALSE(
      std::filesystem::exists(dir_ + "/.00000000000000000003-00000000000000000000.batch.tmp"));
}

// A spool file cut short at a field boundary is still a valid, shorter batch, and a flipped bit
// inside a report's bytes still parses: protobuf alone had replayed both as if whole. Each file
// carries its length and CRC-32C; a damaged one is moved aside and counted, at start-up and at
// push time alike, and a file of an agent before the header is still read.
TEST_F(SpoolTest, FilesCutShortOrWithFlippedBitsAreCaughtAndCounted) {
  std::vector<std::string> names;
  {
    MetricRegistry metrics;
    auto spool = Spool::Open(dir_, 1 << 30, metrics);
    ASSERT_THAT(spool, IsOk());
    for (uint64_t seq = 1; seq <= 4; ++seq) names.push_back(*(*spool)->Add(Batch(seq, 3)));
  }
  auto bytes_of = [&](const std::string& name) {
    std::ifstream in(dir_ + "/" + name, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ + "/" + name, std::ios::binary | std::ios::trunc) << bytes;
  };
  // Batch 1: cut after its second report (a field boundary: what is left parses).
  const std::string one = bytes_of(names[0]);
  const size_t report_bytes = Batch(1, 3).reports(0).size() + 3;  // tag, length, bytes
  write(names[0], one.substr(0, one.size() - report_bytes));
  // Batch 2: one bit flipped in the middle of a report.
  std::string two = bytes_of(names[1]);
  two[two.size() - 20] ^= 0x04;
  write(names[1], two);
  // Batch 3: as an agent before the header wrote it.
  write(names[2], Batch(3, 3).SerializeAsString());
  MetricRegistry metrics;
  auto spool = Spool::Open(dir_, 1 << 30, metrics);
  ASSERT_THAT(spool, IsOk());
  auto recovered = (*spool)->TakeRecovered();
  ASSERT_EQ(recovered.size(), 2u);
  EXPECT_EQ((*spool)->Read(recovered[0].name)->batch_seq(), 3u);
  EXPECT_EQ((*spool)->Read(recovered[0].name)->reports_size(), 3);
  EXPECT_NE(metrics.Render().find("ncclwatch_agent_spool_corrupt_files_total 2"),
            std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/" + names[0] + ".corrupt"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/" + names[1] + ".corrupt"));
  // Batch 4 is damaged after the start, before it is sent: Read says so and counts it.
  std::string four = bytes_of(names[3]);
  four[four.size() - 5] ^= 0x01;
  write(names[3], four);
  auto read = (*spool)->Read(names[3]);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss) << read.status();
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("ncclwatch_agent_spool_corrupt_files_total 3"), std::string::npos) << text;
  EXPECT_NE(text.find("ncclwatch_agent_spool_dropped_reports_total 3"), std::string::npos) << text;
  EXPECT_EQ((*spool)->batches(), 1u);
}

// A spool that could not be written is ready again once it has drained (it had stayed unready
// until the next batch was written, however long that took).
TEST_F(SpoolTest, ASpoolThatCouldNotBeWrittenIsWritableAgainOnceDrained) {
  MetricRegistry metrics;
  auto spool = Spool::Open(dir_, 1 << 30, metrics);
  ASSERT_THAT(spool, IsOk());
  auto first = (*spool)->Add(Batch(1, 1));
  ASSERT_THAT(first, IsOk());
  std::filesystem::rename(dir_, dir_ + ".away");  // the disk goes away under the spool
  EXPECT_FALSE((*spool)->Add(Batch(2, 1)).ok());
  EXPECT_FALSE((*spool)->writable());
  std::filesystem::rename(dir_ + ".away", dir_);
  (*spool)->Remove(*first);  // acknowledged: the spool is empty
  EXPECT_TRUE((*spool)->writable());
}

TEST_F(SpoolTest, OpenFailsClearlyWhereNoDirectoryCanBe) {
  MetricRegistry metrics;
  auto spool = Spool::Open("/proc/ncclwatch-no-spool-here", 1 << 30, metrics);
  ASSERT_FALSE(spool.ok());
  EXPECT_NE(spool.status().message().find("cannot create spool"), std::string::npos);
}

}  // namespace
}  // namespace ncclwatch::agent

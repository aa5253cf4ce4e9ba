#include "aggregator/store.h"

#include <cstdlib>
#include <filesystem>

#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ncclwatch-store-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

ncclwatch::v1::NodeBatch Batch(const std::string& agent, uint64_t seq) {
  ncclwatch::v1::NodeBatch b;
  b.set_agent_id(agent);
  b.set_batch_seq(seq);
  b.add_reports()->set_report_id(seq * 10);
  return b;
}

TEST_F(StoreTest, DeduplicatesByAgentAndSequenceAcrossRestarts) {
  {
    auto store = Store::Open(dir_);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_TRUE(*(*store)->PutBatchIfNew(Batch("a", 1)));
    EXPECT_TRUE(*(*store)->PutBatchIfNew(Batch("a", 2)));
    EXPECT_TRUE(*(*store)->PutBatchIfNew(Batch("b", 1)));
    EXPECT_FALSE(*(*store)->PutBatchIfNew(Batch("a", 1)));
    // An agent id that is a prefix of another must not collide.
    EXPECT_TRUE(*(*store)->PutBatchIfNew(Batch("ab", 1)));
  }
  auto reopened = Store::Open(dir_);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ(*(*reopened)->CountBatches(), 4u);
  EXPECT_FALSE(*(*reopened)->PutBatchIfNew(Batch("a", 2)));
}

TEST_F(StoreTest, EventsComeBackInTimeOrder) {
  auto store = Store::Open(dir_);
  ASSERT_TRUE(store.ok());
  for (int64_t t : {300, 100, 200}) {
    ncclwatch::v1::Event e;
    e.set_time_unix_ns(t);
    e.set_summary(std::to_string(t));
    ASSERT_TRUE((*store)->PutEvent(e).ok());
  }
  auto events = (*store)->ListEvents(150, 10);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].summary(), "200");
  EXPECT_EQ((*events)[1].summary(), "300");
}

TEST_F(StoreTest, OpenFailsClearlyOnAnUnusableDirectory) {
  auto store = Store::Open("/proc/ncclwatch-cannot-create-here");
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(store.status().message().find("cannot open RocksDB"), std::string::npos);
}

TEST(Be64Test, RoundTripsAndSortsNumerically) {
  EXPECT_EQ(DecodeBe64(EncodeBe64(0x0102030405060708ull).data()), 0x0102030405060708ull);
  EXPECT_LT(EncodeBe64(255), EncodeBe64(256));
}

}  // namespace
}  // namespace ncclwatch::aggregator

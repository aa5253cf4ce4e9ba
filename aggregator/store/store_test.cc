#include "aggregator/store/store.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/metadata.h"
#include "tests/crashfs/full_disk_fs.h"

namespace ncclwatch::aggregator {
namespace {

using ::ncclwatch::testutil::IsOk;

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

// A file system whose write-ahead log stops syncing when told to (a disk that went bad).
class FailingSyncFileSystem : public rocksdb::FileSystemWrapper {
 public:
  FailingSyncFileSystem() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "FailingSyncFileSystem"; }
  std::atomic<bool> fail{false};

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = target()->NewWritableFile(f, o, r, d);
    if (s.ok() && f.ends_with(".log")) *r = std::make_unique<File>(std::move(*r), &fail);
    return s;
  }

 private:
  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> f, std::atomic<bool>* fail)
        : FSWritableFileOwnerWrapper(std::move(f)), fail_(fail) {}
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
      if (*fail_) return rocksdb::IOStatus::IOError("injected: the disk does not sync");
      return FSWritableFileOwnerWrapper::Sync(o, d);
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
      if (*fail_) return rocksdb::IOStatus::IOError("injected: the disk does not sync");
      return FSWritableFileOwnerWrapper::Fsync(o, d);
    }

   private:
    std::atomic<bool>* fail_;
  };
};

TEST_F(StoreTest, ABatchWhoseSyncFailsIsNotAcknowledgedAndNeitherIsAnyLaterOne) {
  auto fs = std::make_shared<FailingSyncFileSystem>();
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  auto store = Store::Open(dir_, env.get());
  ASSERT_THAT(store, IsOk());
  ASSERT_TRUE(*(*store)->PutBatchIfNew(Batch("a", 1), 1));
  fs->fail = true;
  absl::StatusOr<bool> failed = (*store)->PutBatchIfNew(Batch("a", 2), 2);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("sync"), std::string::npos) << failed.status();
  // The disk is back, but what was written unsynced may be gone: the store takes no more batches
  // (nor tells a retry of batch 2 that it is a duplicate) until the aggregator restarts.
  fs->fail = false;
  EXPECT_FALSE((*store)->PutBatchIfNew(Batch("a", 2), 3).ok());
  EXPECT_FALSE((*store)->PutBatchIfNew(Batch("a", 3), 4).ok());
}

// A full disk fails the write that registers a new series. Once there is room again, the series
// is registered by its next write, later series take later ids, and the store opens again with
// all of them (it had refused to start for good: the failed id was a gap in the index).
TEST_F(StoreTest, ASeriesWhoseWriteFailedOnAFullDiskIsKeptAndTheStoreStillOpens) {
  auto fs = std::make_shared<ncclwatch::testing::FullDiskFileSystem>();
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  {
    auto store = Store::Open(dir_, env.get());
    ASSERT_THAT(store, IsOk());
    ASSERT_THAT((*store)->AppendPoints({{"a", {}, 1, 1'000}}), IsOk());
    fs->full = true;
    absl::Status failed = (*store)->AppendPoints({{"b", {{"rank", "3"}}, 2, 2'000}});
    ASSERT_FALSE(failed.ok());
    EXPECT_NE(failed.message().find("space"), std::string::npos) << failed;
    // RocksDB takes no write after a failed one until it resumes, which fails while the disk is
    // still full.
    EXPECT_TRUE((*store)->WritesStopped());
    EXPECT_FALSE((*store)->AppendPoints({{"c", {}, 4, 4'000}}).ok());
    absl::Status not_yet = (*store)->ResumeIfStopped();
    EXPECT_EQ(not_yet.code(), absl::StatusCode::kResourceExhausted) << not_yet;
    EXPECT_NE(not_yet.message().find("MiB are free"), std::string::npos) << not_yet;
    EXPECT_TRUE((*store)->WritesStopped());
    fs->full = false;
    absl::Status resumed = (*store)->ResumeIfStopped();
    ASSERT_THAT(resumed, IsOk()) << resumed;
    EXPECT_FALSE((*store)->WritesStopped());
    ASSERT_THAT((*store)->AppendPoints({{"c", {}, 4, 4'000}}), IsOk());
    ASSERT_THAT((*store)->AppendPoints({{"b", {{"rank", "3"}}, 3, 3'000}}), IsOk());
    ASSERT_THAT((*store)->AppendPoints({{"e", {}, 6, 6'000}}),
                IsOk());  // first seen after the fault
  }
  auto store = Store::Open(dir_, env.get());
  ASSERT_THAT(store, IsOk());
  EXPECT_EQ((*store)->SeriesEntriesSkipped(), 0u);
  std::map<std::string, uint64_t> ids;
  for (const StoredSeries& s : (*store)->Series()) ids[s.name] = s.id;
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_LT(ids["a"], ids["b"]);
  EXPECT_LT(ids["b"], ids["c"]);
  EXPECT_LT(ids["c"], ids["e"]);
  auto b = (*store)->ReadPoints(ids["b"], 0, 10'000);
  ASSERT_THAT(b, IsOk());
  ASSERT_EQ(b->size(), 1u);
  EXPECT_EQ((*b)[0].value, 3);
  // A new series after the restart takes an id above every stored one.
  ASSERT_THAT((*store)->AppendPoints({{"d", {}, 5, 5'000}}), IsOk());
  for (const StoredSeries& s : (*store)->Series()) ids[s.name] = s.id;
  EXPECT_GT(ids["d"], ids["e"]);
}

// An unreadable series index entry costs that series' history, not the aggregator's start.
// The disk fills between a batch's write and its sync: the sync's own record finds no room. It
// had been taken for a failed fsync (what was written may be lost), sticky until a restart: every
// push failed after the disk had room again. Now the sync is owed, and made once the store resumes;
// the batch is not acknowledged before, not even as a duplicate of its retry.
TEST_F(StoreTest, ASyncThatFindsNoRoomIsMadeOnceTheStoreResumesNotARestart) {
  auto fs = std::make_shared<ncclwatch::testing::FullDiskFileSystem>();
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  auto store = Store::Open(dir_, env.get());
  ASSERT_THAT(store, IsOk());
  Store::PendingWrite pending;
  ASSERT_TRUE(*(*store)->WriteBatchIfNew(Batch("a", 1), 1, nullptr, &pending));
  (*store)->ReleaseBatchWrite(pending);
  fs->full = true;
  absl::Status sync = (*store)->SyncBatchWrites();
  ASSERT_FALSE(sync.ok());
  EXPECT_NE(sync.message().find("space"), std::string::npos) << sync;
  EXPECT_TRUE((*store)->SyncOwed());
  // The retry of batch 1 is no duplicate to acknowledge while the sync is owed.
  EXPECT_FALSE((*store)->PutBatchIfNew(Batch("a", 1), 2).ok());
  fs->full = false;
  ASSERT_THAT((*store)->ResumeIfStopped(), IsOk());
  absl::StatusOr<bool> retry = (*store)->PutBatchIfNew(Batch("a", 1), 3);
  ASSERT_THAT(retry, IsOk());
  EXPECT_FALSE(*retry) << "stored before: a duplicate, now durable";
  EXPECT_FALSE((*store)->SyncOwed());
  absl::StatusOr<bool> next = (*store)->PutBatchIfNew(Batch("a", 2), 4);
  ASSERT_THAT(next, IsOk());
  EXPECT_TRUE(*next);
}

// The index forgets a series once all its points have expired (an ended job's), on disk too; it
// had kept every series ever seen, in memory, for good.
TEST_F(StoreTest, TheIndexForgetsSeriesWhosePointsHaveAllExpired) {
  constexpr int64_t kDay = 86'400'000;
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  {
    auto store = Store::Open(dir_);
    ASSERT_THAT(store, IsOk());
    ASSERT_THAT((*store)->AppendPoints({{"ended", {{"job", "j1"}}, 1, now_ms - 20 * kDay},
                                        {"ended", {{"job", "j1"}}, 2, now_ms - 19 * kDay},
                                        {"live", {{"job", "j2"}}, 3, now_ms - 20 * kDay},
                                        {"live", {{"job", "j2"}}, 4, now_ms}}),
                IsOk());
    EXPECT_EQ((*store)->SeriesIndexed(), 2u);
    // A retention of 15 days: "ended" had its last point 19 days ago.
    auto forgotten = (*store)->ForgetSeriesBefore(now_ms - 15 * kDay);
    ASSERT_THAT(forgotten, IsOk());
    EXPECT_EQ(*forgotten, 1u);
    EXPECT_EQ((*store)->SeriesForgotten(), 1u);
  }
  auto store = Store::Open(dir_);
  ASSERT_THAT(store, IsOk());
  std::vector<StoredSeries> series = (*store)->Series();
  ASSERT_EQ(series.size(), 1u) << "forgotten on disk too";
  EXPECT_EQ(series[0].name, "live");
  const uint64_t live_id = series[0].id;
  // Nothing more to forget; the series that comes back is a new one, with a new id.
  EXPECT_EQ(*(*store)->ForgetSeriesBefore(now_ms - 15 * kDay), 0u);
  ASSERT_THAT((*store)->AppendPoints({{"ended", {{"job", "j1"}}, 5, now_ms}}), IsOk());
  for (const StoredSeries& s : (*store)->Series()) {
    if (s.name == "ended") {
      EXPECT_GT(s.id, live_id);
    }
  }
  EXPECT_EQ((*store)->SeriesIndexed(), 2u);
}

// The disk fills at every write in turn, from the store's opening on: it opens or fails to, and
// once there is room it takes pushes again, or (when the log failed before anything was written to
// it, which RocksDB cannot resume) says a restart is needed. A fill right after the opening had
// killed the aggregator at its next push (RocksDB's assertion on the failed log writer, SIGABRT).
TEST_F(StoreTest, ADiskThatFillsAtAnyWriteFromTheOpeningOnNeverCrashesTheStore) {
  {
    auto store = Store::Open(dir_);
    ASSERT_THAT(store, IsOk());
    for (uint64_t seq = 1; seq <= 3; ++seq)
      ASSERT_THAT((*store)->PutBatchIfNew(Batch("a", seq), 1), IsOk());
    ASSERT_THAT((*store)->AppendPoints({{"x", {}, 1, 1'000}}), IsOk());
  }
  int opened = 0, resumed = 0, need_restart = 0;
  for (int room = 0; room < 48; ++room) {
    const std::string copy = dir_ + "-" + std::to_string(room);
    std::filesystem::copy(dir_, copy);
    auto fs = std::make_shared<ncclwatch::testing::CountdownFileSystem>(room);
    std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
    {
      auto store = Store::Open(copy, env.get());
      if (store.ok()) {
        ++opened;
        for (uint64_t seq = 4; seq < 10; ++seq) {
          (void)(*store)->PutBatchIfNew(Batch("a", seq), 2);
          (void)(*store)->AppendPoints({{"x", {}, 2, 2'000}});
        }
        fs->room = 1 << 30;  // room again
        absl::Status s = (*store)->ResumeIfStopped();
        if ((*store)->NeedsRestart()) {
          ++need_restart;
          EXPECT_FALSE(s.ok());
          EXPECT_NE(s.message().find("restart"), std::string::npos) << s;
        } else {
          ASSERT_THAT(s, IsOk()) << "room " << room << ": " << s;
          absl::StatusOr<bool> next = (*store)->PutBatchIfNew(Batch("a", 20), 3);
          ASSERT_THAT(next, IsOk()) << "room " << room << ": " << next.status();
          ++resumed;
        }
      }
    }
    std::filesystem::remove_all(copy);
  }
  std::printf("opened %d of 48 times; resumed %d, a restart needed %d\n", opened, resumed,
              need_restart);
  EXPECT_GT(opened, 0);
  EXPECT_GT(resumed, 0);
}

// The disk fills right after the store opened, and again while it resumes, at every write of the
// resume in turn: the store never crashes, and either takes pushes once there is room or says
// that a restart is needed (the log it resumed onto failed before anything was written to it).
TEST_F(StoreTest, AResumeOnADiskThatFillsAgainNeverCrashesAndSaysWhenARestartIsNeeded) {
  {
    auto store = Store::Open(dir_);
    ASSERT_THAT(store, IsOk());
    ASSERT_THAT((*store)->PutBatchIfNew(Batch("a", 1), 1), IsOk());
  }
  int resumed = 0, need_restart = 0;
  for (int room = 0; room < 24; ++room) {
    const std::string copy = dir_ + "-" + std::to_string(room);
    std::filesystem::copy(dir_, copy);
    auto fs = std::make_shared<ncclwatch::testing::CountdownFileSystem>(1 << 30);
    std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
    {
      auto store = Store::Open(copy, env.get());
      ASSERT_THAT(store, IsOk());
      ASSERT_THAT((*store)->PutBatchIfNew(Batch("a", 2), 2), IsOk());
      fs->room = 0;  // full
      EXPECT_FALSE((*store)->PutBatchIfNew(Batch("a", 3), 3).ok());
      fs->room = room;  // a little room, and full again during the resume
      (void)(*store)->ResumeIfStopped();
      fs->room = 1 << 30;
      absl::Status s = (*store)->ResumeIfStopped();
      if ((*store)->NeedsRestart()) {
        ++need_restart;
        EXPECT_NE(s.message().find("restart"), std::string::npos) << s;
      } else if (s.ok()) {
        absl::StatusOr<bool> next = (*store)->PutBatchIfNew(Batch("a", 4), 4);
        EXPECT_THAT(next, IsOk()) << "room " << room << ": " << next.status();
        ++resumed;
      } else {
        ADD_FAILURE() << "room " << room << ": neither resumed nor a restart asked for: " << s;
      }
    }
    std::filesystem::remove_all(copy);
  }
  std::printf("resumed %d of 24 times, a restart asked for %d times\n", resumed, need_restart);
}

TEST_F(StoreTest, ADamagedRecordOfListeningStartsSaysSoAndIsStartedOver) {
  {
    auto store = Store::Open(dir_);
    ASSERT_THAT(store, IsOk());
    ASSERT_THAT((*store)->RecordListeningStart(1'000), IsOk());
  }
  {
    std::vector<rocksdb::ColumnFamilyDescriptor> families = {
        {rocksdb::kDefaultColumnFamilyName, {}}, {"batches", {}}};
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    ASSERT_THAT(rocksdb::DB::Open({}, dir_, families, &handles, &db), IsOk());
    ASSERT_THAT(db->Put({}, "Mlistening_starts", std::string("\x01\x02\x03", 3)), IsOk());
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
    delete db;
  }
  auto store = Store::Open(dir_);
  ASSERT_THAT(store, IsOk());
  EXPECT_EQ((*store)->ListeningStarts().status().code(), absl::StatusCode::kDataLoss);
  ASSERT_THAT((*store)->RecordListeningStart(2'000), IsOk());
  const auto starts = (*store)->ListeningStarts();
  ASSERT_THAT(starts, IsOk());
  EXPECT_EQ(*starts, std::vector<int64_t>{2'000});
}

TEST_F(StoreTest, AMalformedSeriesIndexEntryIsSkippedAndCounted) {
  {
    auto store = Store::Open(dir_);
    ASSERT_THAT(store, IsOk());
    ASSERT_THAT((*store)->AppendPoints({{"a", {}, 1, 1'000}, {"b", {}, 2, 1'000}}), IsOk());
  }
  {
    std::vector<rocksdb::ColumnFamilyDescriptor> families = {
        {rocksdb::kDefaultColumnFamilyName, {}}, {"batches", {}}};
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    ASSERT_THAT(rocksdb::DB::Open({}, dir_, families, &handles, &db), IsOk());
    // Series 2's entry (id -> identity), the newest, now holds a name and half a label.
    ASSERT_THAT(db->Put({}, std::string("S") + EncodeBe64(2), std::string("x\0y", 3)), IsOk());
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
    delete db;
  }
  auto store = Store::Open(dir_);
  ASSERT_THAT(store, IsOk());
  EXPECT_EQ((*store)->SeriesEntriesSkipped(), 1u);
  ASSERT_EQ((*store)->Series().size(), 1u);
  EXPECT_EQ((*store)->Series()[0].name, "a");
  // The skipped id is not given out again: a new series would inherit the lost one's points.
  ASSERT_THAT((*store)->AppendPoints({{"c", {}, 3, 3'000}}), IsOk());
  const std::vector<StoredSeries> series = (*store)->Series();
  ASSERT_EQ(series.size(), 2u);
  EXPECT_EQ(series[1].name, "c");
  EXPECT_GT(series[1].id, 2u);
  auto points = (*store)->ReadPoints(series[1].id, 0, 10'000);
  ASSERT_THAT(points, IsOk());
  ASSERT_EQ(points->size(), 1u);
  EXPECT_EQ((*points)[0].value, 3);
}

// The largest write-ahead log file in `dir` ("" if none).
std::string LargestWal(const std::string& dir) {
  std::string largest;
  uintmax_t size = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".log" && e.file_size() > size) {
      size = e.file_size();
      largest = e.path();
    }
  }
  return largest;
}

// Overwrites `n` bytes of `path` at `offset` with their complement (bit rot, never a no-op).
void Damage(const std::string& path, uintmax_t offset, size_t n) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  std::string bytes(n, '\0');
  f.seekg(static_cast<std::streamoff>(offset));
  f.read(bytes.data(), static_cast<std::streamsize>(n));
  for (char& c : bytes) c = static_cast<char>(~c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(n));
}

// Batch sequence numbers of `agent` in the store, in arrival order.
std::vector<uint64_t> StoredSeqs(const Store& store) {
  std::vector<uint64_t> seqs;
  EXPECT_THAT(store.ReplayBatches(0, [&](const ncclwatch::v1::NodeBatch& b,
                                         int64_t) { seqs.push_back(b.batch_seq()); }),
              IsOk());
  return seqs;
}

TEST_F(StoreTest, ADamagedWriteAheadLogIsSaidAtOpenAndEveryBatchLostIsCounted) {
  // 12 acknowledged batches of ~12 KiB as compressed, all in the log: ~5 of its 32 KiB blocks.
  std::mt19937_64 random(7);
  {
    auto store = Store::Open(dir_);
    ASSERT_THAT(store, IsOk());
    for (uint64_t seq = 1; seq <= 12; ++seq) {
      ncclwatch::v1::NodeBatch b = Batch("node-a", seq);
      constexpr std::string_view kDigits =
          "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_";
      std::string noise(16 << 10, '\0');
      for (char& c : noise) c = kDigits[random() % kDigits.size()];
      b.mutable_reports(0)->mutable_identity()->set_job_id(noise);
      ASSERT_TRUE(*(*store)->PutBatchIfNew(b, static_cast<int64_t>(seq)));
    }
  }
  const std::string wal = LargestWal(dir_);
  ASSERT_FALSE(wal.empty());
  ASSERT_GT(std::filesystem::file_size(wal), 100u << 10);
  Damage(wal, std::filesystem::file_size(wal) / 2, 64);

  auto store = Store::Open(dir_);
  ASSERT_THAT(store, IsOk());
  const std::vector<uint64_t> held = StoredSeqs(**store);
  ASSERT_LT(held.size(), 12u) << "the damage hit no batch";
  ASSERT_GT(held.size(), 0u);
  // Said at once (RocksDB's LOG had been the only place it was written).
  EXPECT_GT((*store)->WalDamage(), 0u);
  // What RocksDB could not read is lost (the damaged records; in a log RocksDB compressed, as
  // earlier versions had it, the rest of the file too). The batches lost are counted once their
  // agent's next batch shows the hole.
  const uint64_t at_open = (*store)->BatchesMissing();
  EXPECT_TRUE(*(*store)->PutBatchIfNew(Batch("node-a", 13), 13));
  EXPECT_EQ((*store)->BatchesMissing(), 12 - held.size());
  EXPECT_LE(at_open, 12 - held.size());
}

TEST_F(StoreTest, ABatchThatSkipsPastItsAgentsNewestCountsTheOnesSkippedAsMissing) {
  auto store = Store::Open(dir_);
  ASSERT_THAT(store, IsOk());
  ASSERT_TRUE(*(*store)->PutBatchIfNew(Batch("a", 1), 1));
  ASSERT_TRUE(*(*store)->PutBatchIfNew(Batch("a", 2), 2));
  EXPECT_EQ((*store)->BatchesMissing(), 0u);
  ASSERT_TRUE(*(*store)->PutBatchIfNew(Batch("a", 6), 3));  // 3, 4 and 5 never came
  EXPECT_EQ((*store)->BatchesMissing(), 3u);
  ASSERT_TRUE(*(*store)->PutBatchIfNew(Batch("b", 4), 4));   // a first batch skips nothing known
  ASSERT_FALSE(*(*store)->PutBatchIfNew(Batch("a", 2), 5));  // a duplicate
  EXPECT_EQ((*store)->BatchesMissing(), 3u);
}

TEST_F(StoreTest, ConcurrentPushesOfDifferentBatchesAreAllStored) {
#if defined(__SANITIZE_THREAD__)
  // RocksDB (Debian's, linked statically, not built with TSan) hands a write group's batches and
  // its memtable between threads through atomics TSan cannot see; the ASan build runs this.
  GTEST_SKIP() << "concurrent RocksDB writers are checked in the ASan build";
#endif
  auto store = Store::Open(dir_);
  ASSERT_THAT(store, IsOk());
  std::vector<std::thread> pushers;
  std::atomic<int> stored{0};
  for (int t = 0; t < 8; ++t) {
    pushers.emplace_back([&, t] {
      for (uint64_t seq = 1; seq <= 50; ++seq) {
        absl::StatusOr<bool> put = (*store)->PutBatchIfNew(Batch(absl::StrCat("agent-", t), seq),
                                                           static_cast<int64_t>(seq * 100 + t));
        if (put.ok() && *put) ++stored;
      }
    });
  }
  for (auto& p : pushers) p.join();
  EXPECT_EQ(stored.load(), 400);
  EXPECT_EQ(*(*store)->CountBatches(), 400u);
}

TEST_F(StoreTest, ReplayStartBoundsTheReplayedBytesToTheNewestBatches) {
  constexpr int64_t kSecond = 1'000'000'000;
  {
    auto store = Store::Open(dir_);
    ASSERT_THAT(store, IsOk());
    // 200 batches, one a second, each 20 KB of noise (about 15 KB compressed).
    uint64_t x = 88172645463325252ull;
    for (uint64_t i = 1; i <= 200; ++i) {
      ncclwatch::v1::NodeBatch b = Batch("a", i);
      std::string noise(20'000, '\0');
      for (char& c : noise) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c = static_cast<char>('0' + x % 64);  // text: 6 bits a byte
      }
      b.set_node(noise);
      ASSERT_TRUE(*(*store)->PutBatchIfNew(b, static_cast<int64_t>(i) * kSecond));
    }
  }
  auto store = Store::Open(dir_);  // as at a start-up: the batches are in table files
  ASSERT_THAT(store, IsOk());
  const int64_t end = 200 * kSecond;
  EXPECT_EQ((*store)->ReplayStart(0, end, 0), 0);          // no bound
  EXPECT_EQ((*store)->ReplayStart(0, end, 100 << 20), 0);  // the whole window fits
  // 1 MiB holds about 70 of them: the replay starts about 130 s in.
  const int64_t from = (*store)->ReplayStart(0, end, 1 << 20);
  EXPECT_GT(from, 100 * kSecond);
  EXPECT_LT(from, 175 * kSecond);
  int replayed = 0;
  ASSERT_THAT((*store)->ReplayBatches(from, [&](const auto&, int64_t) { ++replayed; }), IsOk());
  EXPECT_GT(replayed, 25);
  EXPECT_LT(replayed, 100);
}

TEST_F(StoreTest, DeduplicatesByAgentAndSequenceAcrossRestarts) {
  {
    auto store = Store::Open(dir_);
    ASSERT_THAT(store, IsOk());
    EXPECT_TRUE(*(*store)->PutBatchIfNew(Batch("a", 1), 100));
    EXPECT_TRUE(*(*store)->PutBatchIfNew(Batch("a", 2), 200));
    EXPECT_TRUE(*(*store)->PutBatchIfNew(Batch("b", 1), 100));
    EXPECT_FALSE(*(*store)->PutBatchIfNew(Batch("a", 1), 100));
    // An agent id that is a prefix of another must not collide.
    EXPECT_TRUE(*(*store)->PutBatchIfNew(Batch("ab", 1), 100));
  }
  auto reopened = Store::Open(dir_);
  ASSERT_THAT(reopened, IsOk());
  EXPECT_EQ(*(*reopened)->CountBatches(), 4u);
  EXPECT_FALSE(*(*reopened)->PutBatchIfNew(Batch("a", 2), 200));
}

// A sequence number above an agent's newest stored one is taken without a lookup; what that
// newest one is must come from the store after a restart, whatever the agent pushes first, and
// agent ids that extend one another must not share it.
TEST_F(StoreTest, AfterARestartEveryStoredSequenceNumberIsStillADuplicate) {
  {
    auto store = Store::Open(dir_);
    ASSERT_THAT(store, IsOk());
    for (uint64_t seq = 1; seq <= 5; ++seq) {
      EXPECT_TRUE(*(*store)->PutBatchIfNew(Batch("node-1", seq), 100 * seq));
    }
    EXPECT_TRUE(*(*store)->PutBatchIfNew(Batch("node-10", 9), 100));
    EXPECT_TRUE(*(*store)->PutBatchIfNew(Batch("node-1", 7), 700));  // 6 never came
  }
  auto store = Store::Open(dir_);
  ASSERT_THAT(store, IsOk());
  // The agent replays from an older batch first: every stored one is a duplicate, above it too.
  EXPECT_FALSE(*(*store)->PutBatchIfNew(Batch("node-1", 3), 300));
  EXPECT_FALSE(*(*store)->PutBatchIfNew(Batch("node-1", 4), 400));
  EXPECT_FALSE(*(*store)->PutBatchIfNew(Batch("node-1", 7), 700));
  // The gap below the newest is still new, once.
  EXPECT_TRUE(*(*store)->PutBatchIfNew(Batch("node-1", 6), 600));
  EXPECT_FALSE(*(*store)->PutBatchIfNew(Batch("node-1", 6), 600));
  EXPECT_TRUE(*(*store)->PutBatchIfNew(Batch("node-1", 8), 800));
  EXPECT_FALSE(*(*store)->PutBatchIfNew(Batch("node-1", 8), 800));
  // "node-10"'s batch 9 is not node-1's: node-1's 9 is new, node-10's is not.
  EXPECT_TRUE(*(*store)->PutBatchIfNew(Batch("node-1", 9), 900));
  EXPECT_FALSE(*(*store)->PutBatchIfNew(Batch("node-10", 9), 900));
  // An agent the store has never seen starts at 1.
  EXPECT_TRUE(*(*store)->PutBatchIfNew(Batch("node-2", 1), 100));
  EXPECT_EQ(*(*store)->CountBatches(), 11u);
}

// An agent id may hold a NUL, which ends the id in the index's keys: "node" followed by NUL and
// "z" sorts among "node"'s keys. It must not make "node"'s stored batches look new after a restart.
TEST_F(StoreTest, AnAgentIdWithANulDoesNotHideAnotherAgentsBatches) {
  const std::string odd("node\0z", 6);
  {
    auto store = Store::Open(dir_);
    ASSERT_THAT(store, IsOk());
    for (uint64_t seq = 1; seq <= 3; ++seq) {
      EXPECT_TRUE(*(*store)->PutBatchIfNew(Batch("node", seq), 100 * seq));
    }
    EXPECT_TRUE(*(*store)->PutBatchIfNew(Batch(odd, 5), 500));
  }
  auto store = Store::Open(dir_);
  ASSERT_THAT(store, IsOk());
  EXPECT_FALSE(*(*store)->PutBatchIfNew(Batch("node", 2), 200));
  EXPECT_FALSE(*(*store)->PutBatchIfNew(Batch("node", 3), 300));
  EXPECT_TRUE(*(*store)->PutBatchIfNew(Batch("node", 4), 400));
  EXPECT_FALSE(*(*store)->PutBatchIfNew(Batch(odd, 5), 500));
  EXPECT_TRUE(*(*store)->PutBatchIfNew(Batch(odd, 6), 600));
  EXPECT_EQ(*(*store)->CountBatches(), 6u);
}

TEST_F(StoreTest, TheSameBatchPushedConcurrentlyIsStoredOnceAndNewToExactlyOnePush) {
  // An agent whose push timed out retries while the first push is still being synced: both reach
  // PutBatchIfNew at once. Each of 64 batches goes to 4 threads released together.
  auto store = Store::Open(dir_);
  ASSERT_THAT(store, IsOk());
  constexpr int kBatches = 64;
  constexpr int kThreads = 4;
  std::atomic<int> new_answers[kBatches] = {};
  std::atomic<int> errors{0};
  for (int b = 0; b < kBatches; ++b) {
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, b] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) std::this_thread::yield();
        absl::StatusOr<bool> fresh = (*store)->PutBatchIfNew(Batch("a", b + 1), 1'000 + b);
        if (!fresh.ok()) errors.fetch_add(1);
        if (fresh.ok() && *fresh) new_answers[b].fetch_add(1);
      });
    }
    for (auto& t : threads) t.join();
  }
  EXPECT_EQ(errors.load(), 0);
  for (int b = 0; b < kBatches; ++b) EXPECT_EQ(new_answers[b].load(), 1) << "batch " << b + 1;
  EXPECT_EQ(*(*store)->CountBatches(), static_cast<uint64_t>(kBatches));
  int replayed = 0;
  ASSERT_THAT(
      (*store)->ReplayBatches(0, [&](const ncclwatch::v1::NodeBatch&, int64_t) { ++replayed; }),
      IsOk());
  EXPECT_EQ(replayed, kBatches) << "every batch once in the log that replays feed the detectors";
}

TEST_F(StoreTest, EventsComeBackInTimeOrder) {
  auto store = Store::Open(dir_);
  ASSERT_THAT(store, IsOk());
  for (int64_t t : {300, 100, 200}) {
    ncclwatch::v1::Event e;
    e.set_time_unix_ns(t);
    e.set_summary(std::to_string(t));
    ASSERT_THAT((*store)->PutEvent(e), IsOk());
  }
  auto events = (*store)->ListEvents(150, 10);
  ASSERT_THAT(events, IsOk());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].summary(), "200");
  EXPECT_EQ((*events)[1].summary(), "300");
}

TEST_F(StoreTest, OpenFailsClearlyOnAnUnusableDirectory) {
  auto store = Store::Open("/proc/ncclwatch-cannot-create-here");
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(store.status().message().find("cannot open RocksDB"), std::string::npos);
}

TEST_F(StoreTest, ReplaysBatchesInArrivalOrderFromAGivenTime) {
  {
    auto store = Store::Open(dir_);
    ASSERT_THAT(store, IsOk());
    ASSERT_TRUE(*(*store)->PutBatchIfNew(Batch("b", 7), 3'000));
    ASSERT_TRUE(*(*store)->PutBatchIfNew(Batch("a", 1), 1'000));
    ASSERT_TRUE(*(*store)->PutBatchIfNew(Batch("a", 2), 2'000));
  }
  auto store = Store::Open(dir_);
  ASSERT_THAT(store, IsOk());
  std::vector<std::pair<uint64_t, int64_t>> seen;
  ASSERT_THAT(
      (*store)->ReplayBatches(2'000, [&](const ncclwatch::v1::NodeBatch& b,
                                         int64_t at) { seen.emplace_back(b.batch_seq(), at); }),
      IsOk());
  EXPECT_EQ(seen, (std::vector<std::pair<uint64_t, int64_t>>{{2, 2'000}, {7, 3'000}}));
}

// Each batch is compressed once, as it is written; the log's values read back whole, those a
// store wrote before (plain NodeBatch bytes) as well, and damaged ones say so instead of parsing.
TEST_F(StoreTest, TheBatchLogKeepsBatchesCompressedAndReadsBackOldPlainOnes) {
  ncclwatch::v1::NodeBatch big = Batch("new", 1);
  for (int i = 0; i < 200; ++i) {
    auto* r = big.add_reports();
    r->mutable_identity()->set_job_id("a-job-of-many-reports");
    r->mutable_identity()->set_rank(i);
    r->set_report_id(static_cast<uint64_t>(i));
  }
  {
    auto store = Store::Open(dir_);
    ASSERT_THAT(store, IsOk());
    ASSERT_TRUE(*(*store)->PutBatchIfNew(big, 2'000));
  }
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {{rocksdb::kDefaultColumnFamilyName, {}},
                                                           {"batches", {}}};
  StoreKey old_key;  // earlier than the new batch
  old_key.kind = StoreKey::Kind::kBatchLog;
  old_key.time = 1'000;
  const std::string key = EncodeStoreKey(old_key);
  {
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    ASSERT_THAT(rocksdb::DB::Open({}, dir_, families, &handles, &db), IsOk());
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator({}, handles[1]));
    it->SeekToFirst();
    ASSERT_TRUE(it->Valid());
    const std::string logged = it->value().ToString();
    EXPECT_EQ(logged[0], '\0');
    EXPECT_LT(logged.size(), big.ByteSizeLong() / 3) << "the batch is not kept compressed";
    // What a store wrote before: the batch's plain bytes, earlier in time.
    it.reset();
    ASSERT_THAT(db->Put({}, handles[1], key, Batch("old", 1).SerializeAsString()), IsOk());
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
    delete db;
  }
  {
    auto store = Store::Open(dir_);
    ASSERT_THAT(store, IsOk());
    std::vector<std::pair<std::string, int>> seen;
    ASSERT_THAT((*store)->ReplayBatches(0,
                                        [&](const ncclwatch::v1::NodeBatch& b, int64_t) {
                                          seen.emplace_back(b.agent_id(), b.reports_size());
                                        }),
                IsOk());
    EXPECT_EQ(seen, (std::vector<std::pair<std::string, int>>{{"old", 1}, {"new", 201}}));
  }
  // A compressed value whose bytes were damaged: skipped and counted, not a crash, a wrong batch
  // or a replay (a start-up) that stops there.
  {
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    ASSERT_THAT(rocksdb::DB::Open({}, dir_, families, &handles, &db), IsOk());
    for (const std::string& damaged :
         {std::string("\0\x28\xb5\x2f\xfd\xff\xff", 7), std::string(1, '\0'),
          std::string("\0not a zstd frame", 17)}) {
      ASSERT_THAT(db->Put({}, handles[1], key, damaged), IsOk());
      for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
      delete db;
      {
        auto store = Store::Open(dir_);
        ASSERT_THAT(store, IsOk());
        std::vector<std::string> seen;
        ASSERT_THAT((*store)->ReplayBatches(0, [&](const ncclwatch::v1::NodeBatch& b,
                                                   int64_t) { seen.push_back(b.agent_id()); }),
                    IsOk());
        EXPECT_EQ(seen, std::vector<std::string>{"new"}) << "the damaged batch was not skipped";
        EXPECT_EQ((*store)->BatchLogDamaged(), 1u);
      }
      handles.clear();
      ASSERT_THAT(rocksdb::DB::Open({}, dir_, families, &handles, &db), IsOk());
    }
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
    delete db;
  }
}

TEST_F(StoreTest, PointsAndTheSeriesIndexSurviveARestart) {
  const LabelPairs rank0 = {{"job_id", "j"}, {"rank", "0"}};
  const LabelPairs rank1 = {{"job_id", "j"}, {"rank", "1"}};
  {
    auto store = Store::Open(dir_);
    ASSERT_THAT(store, IsOk());
    std::vector<SeriesPoint> points;
    for (int64_t t = 1'000; t <= 10'000; t += 1'000) {
      points.push_back({"bw", rank0, t / 1000.0, t});
      points.push_back({"bw", rank1, -1.0 * t, t});
    }
    ASSERT_THAT((*store)->AppendPoints(points), IsOk());
    ASSERT_THAT((*store)->AppendPoints({{"bw", rank0, 55.5, 5'000}}), IsOk());  // overwrite
  }
  auto store = Store::Open(dir_);
  ASSERT_THAT(store, IsOk());
  const std::vector<StoredSeries> series = (*store)->Series();
  ASSERT_EQ(series.size(), 2u);
  EXPECT_EQ(series[0].name, "bw");
  EXPECT_EQ(series[0].labels, rank0);
  EXPECT_EQ(series[1].labels, rank1);
  auto points = (*store)->ReadPoints(series[0].id, 3'000, 6'000);
  ASSERT_THAT(points, IsOk());
  ASSERT_EQ(points->size(), 4u);
  EXPECT_EQ((*points)[0].time_ms, 3'000);
  EXPECT_DOUBLE_EQ((*points)[2].value, 55.5);
  EXPECT_EQ((*points)[3].time_ms, 6'000);
  // A new series after the restart gets the next id; the other series' points stay apart.
  ASSERT_THAT((*store)->AppendPoints({{"bw", {{"job_id", "k"}}, 1, 1'000}}), IsOk());
  EXPECT_EQ((*store)->Series().back().id, 3u);
  EXPECT_EQ((*store)->ReadPoints(series[1].id, 0, 100'000)->size(), 10u);
}

TEST_F(StoreTest, RetentionDropsOldDataButKeepsTheIndex) {
  auto store = Store::Open(dir_);
  ASSERT_THAT(store, IsOk());
  ASSERT_THAT((*store)->AppendPoints({{"bw", {}, 1, 1'000}, {"bw", {}, 9, 9'000}}), IsOk());
  ASSERT_TRUE(*(*store)->PutBatchIfNew(Batch("a", 1), 1'000'000'000));
  ASSERT_TRUE(*(*store)->PutBatchIfNew(Batch("a", 2), 9'000'000'000));
  ncclwatch::v1::Event old_event;
  old_event.set_time_unix_ns(1'000'000'000);
  ASSERT_THAT((*store)->PutEvent(old_event), IsOk());
  (*store)->SetRetentionCutoff(5'000'000'000);  // 5 s after the epoch
  ASSERT_THAT((*store)->Compact(), IsOk());
  // The batch log has a window of its own (--batch-log-retention), dropped apart.
  EXPECT_EQ(*(*store)->CountBatches(), 2u);
  ASSERT_THAT((*store)->DropBatchesBefore(5'000'000'000), IsOk());
  auto points = (*store)->ReadPoints(1, 0, 100'000);
  ASSERT_EQ(points->size(), 1u);
  EXPECT_EQ((*points)[0].time_ms, 9'000);
  EXPECT_EQ(*(*store)->CountBatches(), 1u);
  EXPECT_TRUE((*store)->ListEvents(0, 10)->empty());
  EXPECT_EQ((*store)->Series().size(), 1u);
  // The expired batch's dedup entry went with it; the kept one still deduplicates.
  EXPECT_FALSE(*(*store)->PutBatchIfNew(Batch("a", 2), 10'000'000'000));
}

// The log's table files, by level, of the store in `dir` (opened apart, read-only).
std::vector<int> BatchLogFilesPerLevel(const std::string& dir) {
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {{rocksdb::kDefaultColumnFamilyName, {}},
                                                           {"batches", {}}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly({}, dir, families, &handles, &db);
  EXPECT_THAT(s, IsOk()) << s.ToString();
  if (!s.ok()) return {};
  rocksdb::ColumnFamilyMetaData meta;
  db->GetColumnFamilyMetaData(handles[1], &meta);
  std::vector<int> out;
  for (const auto& level : meta.levels) out.push_back(static_cast<int>(level.files.size()));
  while (!out.empty() && out.back() == 0) out.pop_back();
  for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
  delete db;
  return out;
}

TEST_F(StoreTest, TheBatchLogIsDroppedByAgeAndMeasuredApart) {
  // Three sessions: reopening leaves each one's batches in a table file of their own, which
  // DiskSizes counts. The first session's file is then moved below level 0 by a compaction, as a
  // store written before the log stopped being compacted has it.
  for (uint64_t first : {1, 101, 201}) {
    auto store = Store::Open(dir_);
    ASSERT_THAT(store, IsOk());
    for (uint64_t seq = first; seq < first + 100; ++seq) {
      ASSERT_TRUE(*(*store)->PutBatchIfNew(Batch("a", seq), static_cast<int64_t>(seq) * 1'000));
    }
    ASSERT_THAT((*store)->AppendPoints({{"ncclwatch_hang", {}, 1, 1'000}}), IsOk());
    store->reset();
    if (first != 1) continue;
    std::vector<rocksdb::ColumnFamilyDescriptor> families = {
        {rocksdb::kDefaultColumnFamilyName, {}}, {"batches", {}}};
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    ASSERT_THAT(rocksdb::DB::Open({}, dir_, families, &handles, &db), IsOk());
    ASSERT_THAT(db->Flush({}, handles[1]), IsOk());
    ASSERT_THAT(db->CompactRange({}, handles[1], nullptr, nullptr), IsOk());
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
    delete db;
  }
  auto store = Store::Open(dir_);
  ASSERT_THAT(store, IsOk());
  // Flushed files stay in level 0: nothing merged them since.
  const std::vector<int> files = BatchLogFilesPerLevel(dir_);
  ASSERT_GE(files.size(), 2u);
  EXPECT_EQ(files[0], 2);
  EXPECT_EQ(files.back(), 1);
  const Store::Sizes before = (*store)->DiskSizes();
  EXPECT_GT(before.batch_log_bytes, 0u);
  EXPECT_GT(before.history_bytes, 0u);

  // Inside the second session: the first session's file goes (by key range, below level 0), the
  // second's stays on disk but is read only from the cutoff on.
  ASSERT_THAT((*store)->DropBatchesBefore(150'500), IsOk());
  EXPECT_EQ(BatchLogFilesPerLevel(dir_), std::vector<int>{2});
  const Store::Sizes after_first = (*store)->DiskSizes();
  EXPECT_LT(after_first.batch_log_bytes, before.batch_log_bytes);
  std::vector<uint64_t> seqs;
  ASSERT_THAT((*store)->ReplayBatches(0, [&](const ncclwatch::v1::NodeBatch& b,
                                             int64_t) { seqs.push_back(b.batch_seq()); }),
              IsOk());
  ASSERT_EQ(seqs.size(), 150u);
  EXPECT_EQ(seqs.front(), 151u);
  EXPECT_EQ(*(*store)->CountBatches(), 150u);
  EXPECT_EQ((*store)->DiskSizes().history_bytes, before.history_bytes);

  // Past the second session: its level-0 file goes, the newest stays whole.
  ASSERT_THAT((*store)->DropBatchesBefore(200'500), IsOk());
  EXPECT_EQ(BatchLogFilesPerLevel(dir_), std::vector<int>{1});
  EXPECT_LT((*store)->DiskSizes().batch_log_bytes, after_first.batch_log_bytes);
  EXPECT_GT((*store)->DiskSizes().batch_log_bytes, 0u);
  EXPECT_EQ(*(*store)->CountBatches(), 100u);
  // A dropped batch's dedup entry stays in the history: a late replay of it is still known.
  EXPECT_FALSE(*(*store)->PutBatchIfNew(Batch("a", 3), 300'000));
}

TEST_F(StoreTest, LastEventTimeIsTheNewestEvent) {
  auto store = Store::Open(dir_);
  ASSERT_THAT(store, IsOk());
  EXPECT_EQ(*(*store)->LastEventTime(), 0);
  for (int64_t t : {300, 100, 200}) {
    ncclwatch::v1::Event e;
    e.set_time_unix_ns(t);
    ASSERT_THAT((*store)->PutEvent(e), IsOk());
  }
  ASSERT_THAT((*store)->AppendPoints({{"x", {}, 1, 1}}),
              IsOk());  // keys after 'E' do not confuse it
  EXPECT_EQ(*(*store)->LastEventTime(), 300);
}

TEST(Be64Test, RoundTripsAndSortsNumerically) {
  EXPECT_EQ(DecodeBe64(EncodeBe64(0x0102030405060708ull).data()), 0x0102030405060708ull);
  EXPECT_LT(EncodeBe64(255), EncodeBe64(256));
}

TEST(StoreKeyTest, EveryLayoutRoundTripsAndMalformedKeysSayWhatIsWrong) {
  const std::vector<StoreKey> keys = {
      {.kind = StoreKey::Kind::kBatchLog, .time = 1'700'000'000'000'000'000, .counter = 5},
      {.kind = StoreKey::Kind::kEvent, .time = 42, .counter = 0},
      {.kind = StoreKey::Kind::kBatchIndex, .counter = 17, .text = std::string("node\0odd", 9)},
      {.kind = StoreKey::Kind::kSeriesByIdentity, .text = SeriesIdentity("m", {{"a", "1"}})},
      {.kind = StoreKey::Kind::kSeriesById, .id = 9},
      {.kind = StoreKey::Kind::kSeriesDay, .id = 9},
      {.kind = StoreKey::Kind::kPoint, .time = 1234, .id = 3},
      {.kind = StoreKey::Kind::kMeta, .text = "downsampled_until_ms"},
  };
  for (const StoreKey& key : keys) {
    const std::string bytes = EncodeStoreKey(key);
    absl::StatusOr<StoreKey> back = DecodeStoreKey(bytes);
    ASSERT_THAT(back, IsOk());
    EXPECT_EQ(back->kind, key.kind);
    EXPECT_EQ(back->time, key.time);
    EXPECT_EQ(back->counter, key.counter);
    EXPECT_EQ(back->id, key.id);
    EXPECT_EQ(back->text, key.text);
  }
  // An agent id with a '\0' in it still decodes: the batch_seq is the last 8 bytes.
  EXPECT_EQ(DecodeStoreKey(EncodeStoreKey(keys[2]))->text, std::string("node\0odd", 9));

  const auto error = [](std::string_view key) {
    absl::StatusOr<StoreKey> decoded = DecodeStoreKey(key);
    return decoded.ok() ? std::string("ok") : std::string(decoded.status().message());
  };
  EXPECT_EQ(error(""), "empty store key");
  EXPECT_EQ(error("L123"), "store key 'L' of 4 bytes: want 17 (tag, be64 time, be64 n)");
  EXPECT_EQ(error(std::string("Bagent") + EncodeBe64(1)),  // no '\0' before the sequence
            "store key 'B' of 14 bytes: want tag, agent id, '\\0', be64 batch_seq");
  EXPECT_EQ(error("S" + EncodeBe64(1) + "x"),
            "store key 'S' of 10 bytes: want 9 (tag, be64 series id)");
  EXPECT_EQ(error("N"), "store key 'N' of 1 bytes: want a name after the tag");
  EXPECT_EQ(error("\x7f"), "store key with unknown tag byte 0x7f");

  std::string name;
  LabelPairs labels;
  ASSERT_TRUE(ParseSeriesIdentity(SeriesIdentity("m", {{"a", "1"}, {"b", ""}}), &name, &labels));
  EXPECT_EQ(name, "m");
  EXPECT_EQ(labels, (LabelPairs{{"a", "1"}, {"b", ""}}));
  EXPECT_FALSE(ParseSeriesIdentity(std::string("m\0a", 3), &name, &labels))
      << "label without value";
}

}  // namespace
}  // namespace ncclwatch::aggregator

namespace ncclwatch::aggregator {
namespace {

TEST_F(StoreTest, OldPointsBecomeOneMeanPerBucketAndNewOnesStay) {
  auto store = Store::Open(dir_);
  ASSERT_THAT(store, IsOk());
  std::vector<SeriesPoint> points;
  for (int64_t t = 0; t < 20 * 60'000; t += 1'000) {  // 20 min of 1 s points, value = minute
    points.push_back({"bw", {{"rank", "0"}}, static_cast<double>(t / 60'000), t});
    points.push_back({"bw", {{"rank", "1"}}, 1.0, t});
  }
  ASSERT_THAT((*store)->AppendPoints(points), IsOk());
  auto removed = (*store)->Downsample(10 * 60'000, 5 * 60'000);
  ASSERT_THAT(removed, IsOk());
  EXPECT_EQ(*removed, 2u * (600 - 2));  // per series: 600 points in 10 min become 2
  auto rank0 = (*store)->ReadPoints(1, 0, 20 * 60'000);
  ASSERT_EQ(rank0->size(), 2u + 600u);
  EXPECT_EQ((*rank0)[0].time_ms, 0);
  EXPECT_DOUBLE_EQ((*rank0)[0].value, 2.0);  // minutes 0..4
  EXPECT_EQ((*rank0)[1].time_ms, 5 * 60'000);
  EXPECT_DOUBLE_EQ((*rank0)[1].value, 7.0);     // minutes 5..9
  EXPECT_EQ((*rank0)[2].time_ms, 10 * 60'000);  // untouched from here
  // Idempotent, and it resumes where it stopped after a restart.
  EXPECT_EQ(*(*store)->Downsample(10 * 60'000, 5 * 60'000), 0u);
  store->reset();
  auto reopened = Store::Open(dir_);
  ASSERT_THAT(reopened, IsOk());
  EXPECT_EQ(*(*reopened)->Downsample(10 * 60'000 + 1, 5 * 60'000), 0u);  // no whole new bucket
  EXPECT_EQ(*(*reopened)->Downsample(15 * 60'000, 5 * 60'000), 2u * (300 - 1));
  EXPECT_EQ((*reopened)->ReadPoints(2, 0, 20 * 60'000)->size(), 3u + 300u);
}

// Downsampling looks only at the series with a point in its window (their newest point is no
// older than its start): it had read every series of the index, an ended job's too, each hour.
TEST_F(StoreTest, DownsamplingLooksOnlyAtSeriesWithPointsInItsWindow) {
  constexpr int64_t kDay = 86'400'000;
  auto store = Store::Open(dir_);
  ASSERT_THAT(store, IsOk());
  std::vector<SeriesPoint> points;
  for (int64_t t = 0; t < 10 * 60'000; t += 1'000) {
    points.push_back({"ended", {}, 1.0, t});             // day 0 only
    points.push_back({"live", {}, 2.0, 10 * kDay + t});  // day 10
  }
  ASSERT_THAT((*store)->AppendPoints(points), IsOk());
  // The first pass has no start: both series.
  ASSERT_THAT((*store)->Downsample(10 * kDay, 5 * 60'000), IsOk());
  EXPECT_EQ((*store)->DownsampleVisited(), 2u);
  // The next window starts on day 10: "ended" has no point there.
  auto removed = (*store)->Downsample(10 * kDay + 10 * 60'000, 5 * 60'000);
  ASSERT_THAT(removed, IsOk());
  EXPECT_EQ(*removed, 2u * (300 - 1));
  EXPECT_EQ((*store)->DownsampleVisited(), 1u);
}

}  // namespace
}  // namespace ncclwatch::aggregator

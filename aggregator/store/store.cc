#include "aggregator/store/store.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "proto/validate.h"
#include "rocksdb/cache.h"
#include "rocksdb/compaction_filter.h"
#include "rocksdb/convenience.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/listener.h"
#include "rocksdb/metadata.h"
#include "rocksdb/options.h"
#include "rocksdb/slice_transform.h"
#include "rocksdb/table.h"
#include "rocksdb/wal_filter.h"
#include "rocksdb/write_batch.h"
#include "zstd.h"

namespace ncclwatch::aggregator {
namespace {

absl::Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  // Damaged bytes (a checksum mismatch) do not heal by retrying: DataLoss, which a start-up
  // answers by repairing the store (AggregatorServer, --repair-damaged-store).
  if (s.IsCorruption()) return absl::DataLossError(absl::StrCat(what, ": ", s.ToString()));
  return absl::UnavailableError(absl::StrCat(what, ": ", s.ToString()));
}

// Agents whose newest batch_seq is remembered (Store::newest_seq_): a 100,000-GPU fleet has
// ~12,500 nodes. Beyond it (a flood of invented ids) the memory is forgotten and re-read.
constexpr size_t kMaxKnownAgents = 1 << 16;

constexpr int64_t kDayMs = 86'400'000;

std::string BatchKey(const std::string& agent_id, uint64_t seq) {
  return EncodeStoreKey({.kind = StoreKey::Kind::kBatchIndex, .counter = seq, .text = agent_id});
}

std::string PointKey(uint64_t id, int64_t time_ms) {
  return EncodeStoreKey(
      {.kind = StoreKey::Kind::kPoint, .time = static_cast<uint64_t>(time_ms), .id = id});
}

// The batch log's values. A batch is compressed on its own, once, as it is written (zstd's
// first fast level, -1), into a value that starts with a zero byte, which no serialised protobuf
// message does (field number 0 is invalid): stores written before hold plain NodeBatch bytes and
// read back as they are. Neither the write-ahead log nor the log's table files compress again:
// RocksDB had compressed every batch twice at level 3 (its log record, then its table block), 11%
// of the aggregator's CPU at 4,096 ranks. On the ~16 KiB batches of 8 ranks, level -1 compresses
// 5.6:1 at ~1 GB/s, level 1 5.6:1 at ~0.8 GB/s and level 3 5.7:1 at ~0.7 GB/s (2026-11-30).
constexpr char kCompressedBatch = '\0';
constexpr int kBatchCompressionLevel = -1;

struct ZstdContexts {
  ZSTD_CCtx* compress = ZSTD_createCCtx();
  ZSTD_DCtx* decompress = ZSTD_createDCtx();
  ~ZstdContexts() {
    ZSTD_freeCCtx(compress);
    ZSTD_freeDCtx(decompress);
  }
};
ZstdContexts& ThreadZstd() {
  thread_local ZstdContexts contexts;
  return contexts;
}

absl::Status CompressBatch(std::string_view raw, std::string* value) {
  if (ThreadZstd().compress == nullptr) return absl::ResourceExhaustedError("no zstd context");
  value->resize(1 + ZSTD_compressBound(raw.size()));
  (*value)[0] = kCompressedBatch;
  const size_t n = ZSTD_compressCCtx(ThreadZstd().compress, value->data() + 1, value->size() - 1,
                                     raw.data(), raw.size(), kBatchCompressionLevel);
  if (ZSTD_isError(n)) {
    return absl::InternalError(absl::StrCat("cannot compress batch: ", ZSTD_getErrorName(n)));
  }
  value->resize(1 + n);
  return absl::OkStatus();
}

// `*buffer` holds the decompressed bytes between calls.
absl::Status ParseLoggedBatch(std::string_view value, std::string* buffer,
                              ncclwatch::v1::NodeBatch* batch) {
  std::string_view bytes = value;
  if (!value.empty() && value[0] == kCompressedBatch) {
    const std::string_view frame = value.substr(1);
    const unsigned long long size = ZSTD_getFrameContentSize(frame.data(), frame.size());
    if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN ||
        size > static_cast<unsigned long long>(kMaxBatchBytes)) {
      return absl::DataLossError("damaged compressed batch in the log (its size is unreadable)");
    }
    if (ThreadZstd().decompress == nullptr) return absl::ResourceExhaustedError("no zstd context");
    buffer->resize(size);
    const size_t n = ZSTD_decompressDCtx(ThreadZstd().decompress, buffer->data(), buffer->size(),
                                         frame.data(), frame.size());
    if (ZSTD_isError(n) || n != size) {
      return absl::DataLossError(absl::StrCat("damaged compressed batch in the log: ",
                                              ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short"));
    }
    bytes = *buffer;
  }
  if (!batch->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::DataLossError("malformed batch in the log");
  }
  return absl::OkStatus();
}

}  // namespace

// Drops batches, their dedup entries, events and points older than the cutoff while RocksDB
// compacts; the series index is kept.
class Store::RetentionFilter : public rocksdb::CompactionFilter {
 public:
  bool Filter(int /*level*/, const rocksdb::Slice& key, const rocksdb::Slice& value,
              std::string* /*new_value*/, bool* /*value_changed*/) const override {
    const int64_t cutoff = cutoff_ns_.load(std::memory_order_relaxed);
    if (cutoff <= 0 || key.empty()) return false;
    // Batch index entries carry no time: their value is the batch's 'L' key.
    absl::StatusOr<StoreKey> decoded =
        DecodeStoreKey(key[0] == 'B' ? value.ToStringView() : key.ToStringView());
    if (!decoded.ok()) return false;  // keep what we cannot read
    switch (decoded->kind) {
      case StoreKey::Kind::kBatchLog:
      case StoreKey::Kind::kEvent:
        return static_cast<int64_t>(decoded->time) < cutoff;
      case StoreKey::Kind::kPoint:
        // time_ms * 1e6 < cutoff, without overflowing for any time.
        return decoded->time < static_cast<uint64_t>((cutoff + 999'999) / 1'000'000);
      default:
        return false;
    }
  }
  const char* Name() const override { return "ncclwatch.RetentionFilter"; }
  void SetCutoff(int64_t ns) { cutoff_ns_.store(ns, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> cutoff_ns_{0};
};

// Told by RocksDB when it stops taking writes after a failed one (a full disk, an I/O error).
// RocksDB's own recovery from a full disk waits for a fixed reserve of free space and polls for it
// silently; the store resumes on the aggregator's schedule instead (ResumeIfStopped), and says so.
class Store::WriteStopListener : public rocksdb::EventListener {
 public:
  void OnBackgroundError(rocksdb::BackgroundErrorReason /*reason*/,
                         rocksdb::Status* error) override {
    if (!stopped_.exchange(true)) {
      LogError(
          "store: RocksDB stopped taking writes: %s; pushes fail until it resumes (tried "
          "every 5 s)",
          error->ToString());
    }
  }
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason /*reason*/, rocksdb::Status /*error*/,
                            bool* auto_recovery) override {
    *auto_recovery = false;
  }
  bool stopped() const { return stopped_.load(); }
  void Resumed() { stopped_.store(false); }
  void Stopped() { stopped_.store(true); }

 private:
  std::atomic<bool> stopped_{false};
};

// Watches the write-ahead log as RocksDB replays it at start-up. Records that cannot be read (bad
// bytes) are skipped, not the end of the replay (kSkipAnyCorruptedRecords): every record is one
// group of independent writes (batches with their index entries, points), so what follows a
// damaged record is as good as before it, and stopping there would lose it too. Each record
// carries the sequence number of its first write and its count of writes, and numbers run on
// without a hole from record to record: a hole is what the skipped records held.
class Store::WalGapFilter : public rocksdb::WalFilter {
 public:
  WalProcessingOption LogRecordFound(unsigned long long /*log_number*/,
                                     const std::string& log_file_name,
                                     const rocksdb::WriteBatch& batch,
                                     rocksdb::WriteBatch* /*new_batch*/,
                                     bool* /*batch_changed*/) override {
    const std::string& rep = batch.Data();
    if (rep.size() < 12) return WalProcessingOption::kContinueProcessing;
    uint64_t seq = 0;
    uint32_t count = 0;
    std::memcpy(&seq, rep.data(), 8);  // little-endian, as RocksDB writes it on every platform
    std::memcpy(&count, rep.data() + 8, 4);
    if (next_seq_ != 0 && seq > next_seq_) {
      lost_writes_ += seq - next_seq_;
      ++holes_;
      LogError(
          "store: the write-ahead log %s is damaged: %d writes before sequence number %d could "
          "not be read and are lost; the rest of the log is recovered",
          log_file_name, seq - next_seq_, seq);
    }
    next_seq_ = std::max(next_seq_, seq + count);
    // The batches of each agent: one that follows a hole and skips sequence numbers past the
    // agent's batch before it lost the ones skipped in the hole.
    AgentBatches agents(*this);
    if (!batch.Iterate(&agents).ok()) {
      LogWarning("store: a write-ahead log record of %s could not be walked", log_file_name);
    }
    return WalProcessingOption::kContinueProcessing;
  }
  const char* Name() const override { return "ncclwatch.WalGapFilter"; }
  uint64_t lost_writes() const { return lost_writes_; }
  uint64_t lost_batches() const { return lost_batches_; }
  void Recovered() { last_batch_ = {}; }  // what remains is needed no more

 private:
  struct Seen {
    uint64_t seq = 0;
    uint64_t holes = 0;  // holes_ when it was seen
  };
  class AgentBatches : public rocksdb::WriteBatch::Handler {
   public:
    explicit AgentBatches(WalGapFilter& f) : f_(f) {}
    rocksdb::Status PutCF(uint32_t cf, const rocksdb::Slice& key,
                          const rocksdb::Slice& /*value*/) override {
      if (cf != 0 || !key.starts_with("B")) return rocksdb::Status::OK();
      absl::StatusOr<StoreKey> k = DecodeStoreKey(key.ToStringView());
      if (!k.ok()) return rocksdb::Status::OK();
      Seen& last = f_.last_batch_[k->text];
      if (last.seq != 0 && last.holes != f_.holes_ && k->counter > last.seq + 1) {
        f_.lost_batches_ += k->counter - last.seq - 1;
        LogError("store: batches %d to %d of agent %s were in the damaged part of the log: lost",
                 last.seq + 1, k->counter - 1, absl::CHexEscape(k->text));
      }
      last = {std::max(last.seq, k->counter), f_.holes_};
      return rocksdb::Status::OK();
    }
    rocksdb::Status DeleteCF(uint32_t, const rocksdb::Slice&) override {
      return rocksdb::Status::OK();
    }

   private:
    WalGapFilter& f_;
  };

  uint64_t next_seq_ = 0;  // the first sequence number after the last record read
  uint64_t lost_writes_ = 0;
  uint64_t holes_ = 0;
  uint64_t lost_batches_ = 0;
  absl::flat_hash_map<std::string, Seen> last_batch_;  // per agent id
};

// RocksDB's own log (LOG in the data directory), also telling the aggregator's log what RocksDB
// warns of while it opens the store: what it dropped of a damaged write-ahead log is said only
// there ("<file>: dropping N bytes; Corruption: ..."), and a damaged compressed record loses the
// rest of its file without another word. Counts the damage reported.
class Store::RecoveryLogger : public rocksdb::Logger {
 public:
  explicit RecoveryLogger(std::shared_ptr<rocksdb::Logger> inner)
      : Logger(inner->GetInfoLogLevel()), inner_(std::move(inner)) {}
  using Logger::Logv;
  void Logv(const char* format, va_list ap) override { inner_->Logv(format, ap); }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (opening_.load(std::memory_order_relaxed) && level >= rocksdb::InfoLogLevel::WARN_LEVEL) {
      va_list copy;
      va_copy(copy, ap);
      char line[512];
      vsnprintf(line, sizeof(line), format, copy);
      va_end(copy);
      const std::string_view text(line);
      if (text.find("Corruption") != std::string_view::npos) {
        damage_.fetch_add(1, std::memory_order_relaxed);
        LogError("store: RocksDB found damage opening the store: %s", text);
      } else {
        LogWarning("store: RocksDB: %s", text);
      }
    }
    inner_->Logv(level, format, ap);
  }
  size_t GetLogFileSize() const override { return inner_->GetLogFileSize(); }
  void Flush() override { inner_->Flush(); }
  void SetInfoLogLevel(const rocksdb::InfoLogLevel level) override {
    Logger::SetInfoLogLevel(level);
    inner_->SetInfoLogLevel(level);
  }
  void Opened() { opening_.store(false, std::memory_order_relaxed); }
  uint64_t damage() const { return damage_.load(std::memory_order_relaxed); }

 private:
  std::shared_ptr<rocksdb::Logger> inner_;
  std::atomic<bool> opening_{true};
  std::atomic<uint64_t> damage_{0};
};

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& dir, rocksdb::Env* env,
                                                   bool sync_batches) {
  auto filter = std::make_unique<RetentionFilter>();
  const std::vector<rocksdb::CompressionType> supported = rocksdb::GetSupportedCompressions();
  auto has = [&](rocksdb::CompressionType t) {
    return std::find(supported.begin(), supported.end(), t) != supported.end();
  };
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.IncreaseParallelism(2);
  // The batch log dominates what is written, and its values come compressed (CompressBatch): the
  // write-ahead log is not compressed again. (Logs written compressed before are still read.)
  // The history column family fills slowly: flush it before old log files pile up for it.
  db_options.max_total_wal_size = 256 << 20;
  if (env != nullptr) db_options.env = env;
  auto stops = std::make_shared<WriteStopListener>();
  db_options.listeners.push_back(stops);
  std::shared_ptr<rocksdb::Logger> rocks_log;
  if (rocksdb::Status made = rocksdb::CreateLoggerFromOptions(dir, db_options, &rocks_log);
      !made.ok()) {
    return FromRocks(made, absl::StrCat("cannot open RocksDB's log in ", dir));
  }
  auto recovery_log = std::make_shared<RecoveryLogger>(std::move(rocks_log));
  db_options.info_log = recovery_log;
  auto wal_gaps = std::make_unique<WalGapFilter>();
  db_options.wal_recovery_mode = rocksdb::WALRecoveryMode::kSkipAnyCorruptedRecords;
  db_options.wal_filter = wal_gaps.get();

  // Bounded memory whatever the data on disk: at most two 32 MiB memtables per column family, and
  // block caches that also hold the index and filter blocks of every table file (RocksDB otherwise
  // keeps those outside any limit, growing with the number of files): 32 MiB for the history, 8 MiB
  // for the batch log, apart, so that the log's fast-growing files cannot push out the blocks every
  // push reads. A push looks its batch up in the history's deduplication index ('B' keys), and
  // a new batch is not there: a bloom filter (10 bits a key) answers most such misses from memory
  // (at 16,384 ranks, without it and with one shared cache, those lookups read table files and grew
  // to a quarter of the aggregator's CPU within two minutes). Since then only an agent's first
  // push after a start and its replays are looked up (Store::newest_seq_). The batch log is only
  // scanned, in 64 KiB blocks (fewer index entries).
  rocksdb::BlockBasedTableOptions history_table;
  history_table.block_cache = rocksdb::NewLRUCache(32 << 20);
  history_table.cache_index_and_filter_blocks = true;
  history_table.pin_l0_filter_and_index_blocks_in_cache = true;
  history_table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  std::shared_ptr<rocksdb::TableFactory> history_factory(
      rocksdb::NewBlockBasedTableFactory(history_table));
  rocksdb::BlockBasedTableOptions log_table;
  log_table.block_cache = rocksdb::NewLRUCache(8 << 20);
  log_table.cache_index_and_filter_blocks = true;
  log_table.block_size = 64 << 10;
  std::shared_ptr<rocksdb::TableFactory> log_factory(rocksdb::NewBlockBasedTableFactory(log_table));

  rocksdb::ColumnFamilyOptions history;
  history.compaction_filter = filter.get();
  // A new point usually lands right after its series' previous one: the memtable remembers the
  // last insert position per series prefix ('P' + id) and starts there.
  history.memtable_insert_with_hint_prefix_extractor.reset(rocksdb::NewFixedPrefixTransform(9));
  history.write_buffer_size = 32 << 20;
  history.max_write_buffer_number = 2;
  history.table_factory = history_factory;
  if (has(rocksdb::kLZ4Compression)) history.compression = rocksdb::kLZ4Compression;
  if (has(rocksdb::kZSTD)) history.bottommost_compression = rocksdb::kZSTD;

  // The batch log: appended in time order, read back only by replay and traces, dropped by age.
  // Never compacted: its flushed files stay in level 0, each a stretch of arrival time, and leave
  // whole and oldest first (DropBatchesBefore). Merging them into lower levels rewrote the whole
  // log once more (decompress, merge, recompress): at 16,384 ranks that began after ~3 minutes
  // and cost 3.5 us per rank-second. RocksDB applies no level-0 write stall with compactions off.
  rocksdb::ColumnFamilyOptions batches;
  batches.disable_auto_compactions = true;
  batches.write_buffer_size = 32 << 20;
  batches.max_write_buffer_number = 2;
  batches.table_factory = log_factory;
  batches.compression = rocksdb::kNoCompression;  // its values come compressed

  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, history}, {"batches", batches}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(db_options, dir, families, &handles, &db);
  if (!s.ok()) return FromRocks(s, absl::StrCat("cannot open RocksDB in ", dir));
  std::unique_ptr<Store> store(new Store(db, std::move(handles), std::move(filter), sync_batches));
  store->stops_ = std::move(stops);
  recovery_log->Opened();
  store->wal_damage_ = recovery_log->damage();
  store->wal_lost_writes_ = wal_gaps->lost_writes();
  store->batches_missing_ = wal_gaps->lost_batches();
  wal_gaps->Recovered();
  if (store->wal_damage_ > 0) {
    LogError(
        "store: the write-ahead log was damaged in %d place(s): what RocksDB could not read past "
        "is "
        "lost; each batch lost is counted (ncclwatch_aggregator_batches_missing_total) and named "
        "when its agent's next batch arrives",
        store->wal_damage_);
  }
  store->wal_gaps_ = std::move(wal_gaps);
  store->dir_ = dir;
  if (absl::Status loaded = store->LoadSeriesIndex(); !loaded.ok()) return loaded;
  if (absl::Status marked = store->MarkLogInUse(); !marked.ok()) return marked;
  return store;
}

absl::Status Store::Repair(const std::string& dir, rocksdb::Env* env) {
  rocksdb::DBOptions db_options;
  if (env != nullptr) db_options.env = env;
  // The batch log keeps its own column family (and its compactions off, as Open sets them).
  rocksdb::ColumnFamilyOptions batches;
  batches.disable_auto_compactions = true;
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()}, {"batches", batches}};
  return FromRocks(rocksdb::RepairDB(dir, db_options, families),
                   absl::StrCat("cannot repair the store in ", dir));
}

Store::Store(rocksdb::DB* db, std::vector<rocksdb::ColumnFamilyHandle*> handles,
             std::unique_ptr<RetentionFilter> filter, bool sync_batches)
    : filter_(std::move(filter)),
      db_(db),
      handles_(std::move(handles)),
      batches_(handles_.at(1)),
      sync_batches_(sync_batches) {}

Store::~Store() {
  for (rocksdb::ColumnFamilyHandle* h : handles_) db_->DestroyColumnFamilyHandle(h);
}
void Store::DbDeleter::operator()(rocksdb::DB* db) const { delete db; }

absl::Status Store::LoadSeriesIndex() {
  ncclwatch::MutexLock lock(&series_mu_);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  // The day of each series' newest point; a series without one (written before it was recorded)
  // counts as written today.
  absl::flat_hash_map<uint64_t, uint32_t> days;
  for (it->Seek("D"); it->Valid() && it->key().starts_with("D"); it->Next()) {
    absl::StatusOr<StoreKey> key = DecodeStoreKey(it->key().ToStringView());
    if (key.ok() && it->value().size() == 8) {
      days[key->id] = static_cast<uint32_t>(DecodeBe64(it->value().data()));
    }
  }
  if (!it->status().ok()) return FromRocks(it->status(), "series day scan");
  const uint32_t today = static_cast<uint32_t>(absl::ToUnixMillis(absl::Now()) / kDayMs);
  // Ids ascend with the keys but may skip: an id is taken in memory before the write that
  // records it, and a write that failed (a full disk) leaves its ids unused for good.
  for (it->Seek("S"); it->Valid() && it->key().starts_with("S"); it->Next()) {
    absl::StatusOr<StoreKey> key = DecodeStoreKey(it->key().ToStringView());
    StoredSeries s;
    // Even a skipped entry's id is never given to another series (it would inherit its points).
    if (key.ok()) next_series_id_ = std::max(next_series_id_, key->id + 1);
    if (!key.ok() || key->id == 0 ||
        !ParseSeriesIdentity(it->value().ToStringView(), &s.name, &s.labels)) {
      // One unreadable entry loses one series' history, not the aggregator.
      ++series_entries_skipped_;
      LogWarning("store: series index entry %s is malformed; its series is skipped",
                 absl::CHexEscape(absl::string_view(it->key().data(), it->key().size())));
      continue;
    }
    s.id = key->id;
    const auto day = days.find(s.id);
    series_ids_[it->value().ToString()] = {
        .id = s.id, .durable = true, .day = day == days.end() ? today : day->second};
    series_.push_back(std::move(s));
  }
  return FromRocks(it->status(), "series index scan");
}

absl::StatusOr<bool> Store::PutBatchIfNew(const ncclwatch::v1::NodeBatch& batch,
                                          int64_t received_ns, const std::string* source) {
  for (;;) {
    PendingWrite pending;
    absl::StatusOr<bool> is_new = WriteBatchIfNew(batch, received_ns, source, &pending);
    if (pending.busy != nullptr) {
      // The same batch, pushed twice at once: see how the other write ended, then check again.
      pending.busy->WaitForNotification();
      continue;
    }
    if (is_new.ok() && (*is_new || SyncOwed())) {
      if (absl::Status synced = SyncBatchWrites(); !synced.ok()) is_new = synced;
    }
    ReleaseBatchWrite(pending);
    return is_new;
  }
}

absl::StatusOr<bool> Store::WriteBatchIfNew(const ncclwatch::v1::NodeBatch& batch,
                                            int64_t received_ns, const std::string* source,
                                            PendingWrite* pending, std::string_view wire) {
  {
    // After a failed sync, what was written unsynced may be lost: no batch is taken, nor one
    // already in the log called a duplicate, until a restart recovers the log.
    ncclwatch::MutexLock lock(&sync_mu_);
    if (!sync_failed_.ok()) return sync_failed_;
  }
  std::string key = BatchKey(batch.agent_id(), batch.batch_seq());
  {
    ncclwatch::MutexLock lock(&put_mu_);
    if (auto it = writing_.find(key); it != writing_.end()) {
      pending->busy = it->second;
      return absl::UnavailableError(absl::StrCat("batch ", batch.batch_seq(), " of agent ",
                                                 batch.agent_id(),
                                                 " is being stored by another push; retry"));
    }
    absl::StatusOr<uint64_t> newest_stored = NewestSeqLocked(batch.agent_id());
    if (!newest_stored.ok()) return newest_stored.status();
    if (batch.batch_seq() <= *newest_stored) {  // a replay, or an agent that started over
      std::string existing;
      rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, &existing);
      if (s.ok()) return false;
      if (!s.IsNotFound()) return FromRocks(s, "batch lookup");
    }
    pending->done = std::make_shared<ncclwatch::Notification>();
    writing_.emplace(key, pending->done);
  }
  pending->key = std::move(key);
  // Not kept between batches: one hostile 64 MiB batch would stay held by every gRPC thread.
  // The bytes received, when given: encoding the parsed batch again cost a tenth of the gRPC
  // threads' time at 16,384 ranks, for the same bytes.
  std::string raw(wire);
  if (wire.empty() && !batch.AppendToString(&raw)) {
    return absl::InternalError("cannot serialise batch");
  }
  if (source != nullptr) {
    ncclwatch::v1::NodeBatch only_source;
    only_source.set_source(*source);
    only_source.AppendToString(&raw);
  }
  std::string value;
  if (absl::Status compressed = CompressBatch(raw, &value); !compressed.ok()) return compressed;
  const std::string log_key = EncodeStoreKey({.kind = StoreKey::Kind::kBatchLog,
                                              .time = static_cast<uint64_t>(received_ns),
                                              .counter = counter_.fetch_add(1)});
  rocksdb::WriteBatch write;
  write.Put(batches_, log_key, value);
  write.Put(pending->key, log_key);
  rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &write);
  if (!s.ok()) return FromRocks(s, "batch write");
  uint64_t before = 0;  // the agent's newest stored batch before this one, if known
  {
    // Only raised where the newest is known: an entry forgotten meanwhile (kMaxKnownAgents) is
    // read from the store again, never started from this batch, which may lie below it.
    ncclwatch::MutexLock lock(&put_mu_);
    if (auto newest = newest_seq_.find(batch.agent_id()); newest != newest_seq_.end()) {
      before = newest->second;
      newest->second = std::max(newest->second, batch.batch_seq());
    }
  }
  if (before > 0 && before != std::numeric_limits<uint64_t>::max() &&
      batch.batch_seq() > before + 1) {
    const uint64_t skipped = batch.batch_seq() - before - 1;
    batches_missing_.fetch_add(skipped, std::memory_order_relaxed);
    const int64_t now = absl::GetCurrentTimeNanos();
    int64_t logged = missing_logged_ns_.load(std::memory_order_relaxed);
    if (now - logged >= 60'000'000'000 &&
        missing_logged_ns_.compare_exchange_strong(logged, now, std::memory_order_relaxed)) {
      LogWarning(
          "store: agent %s sent batch %d after %d: %d batches of it are not in the store (lost "
          "to a damaged log here, or never delivered: set aside or dropped by the agent, which "
          "counts those); ncclwatch_aggregator_batches_missing_total counts every one, this is "
          "logged at most once a minute",
          absl::CHexEscape(batch.agent_id()), batch.batch_seq(), before, skipped);
    }
  }
  return true;
}

absl::StatusOr<uint64_t> Store::NewestSeqLocked(const std::string& agent_id) {
  // An agent id with a NUL in it would make its index keys ambiguous with another's ('\0' ends
  // the id in the key): such a push is always looked up.
  if (agent_id.find('\0') != std::string::npos) return std::numeric_limits<uint64_t>::max();
  if (auto known = newest_seq_.find(agent_id); known != newest_seq_.end()) return known->second;
  absl::StatusOr<uint64_t> stored = NewestStoredSeq(agent_id);
  if (!stored.ok()) return stored;
  if (newest_seq_.size() >= kMaxKnownAgents) newest_seq_.clear();
  newest_seq_.emplace(agent_id, *stored);
  return stored;
}

absl::StatusOr<uint64_t> Store::NewestStoredSeq(const std::string& agent_id) const {
  const std::string prefix = EncodeStoreKey({.kind = StoreKey::Kind::kBatchIndex, .text = agent_id})
                                 .substr(0, 1 + agent_id.size() + 1);  // 'B', agent id, '\0'
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  it->SeekForPrev(BatchKey(agent_id, std::numeric_limits<uint64_t>::max()));
  if (!it->status().ok()) return FromRocks(it->status(), "batch lookup");
  if (!it->Valid() || !it->key().starts_with(prefix)) return 0;
  // Another id that extends this one after a NUL: unknown, so every push is looked up.
  if (it->key().size() != prefix.size() + 8) return std::numeric_limits<uint64_t>::max();
  absl::StatusOr<StoreKey> stored = DecodeStoreKey(it->key().ToStringView());
  if (!stored.ok())
    return absl::DataLossError(absl::StrCat("batch index: ", stored.status().message()));
  return stored->counter;
}

absl::Status Store::SyncBatchWrites() {
  if (!sync_batches_) return absl::OkStatus();
  // A synced write of one small bookkeeping key: it syncs the write-ahead log, and with it every
  // batch written to it before (SyncWAL() would too, but not on every Env: in-memory ones lack it).
  rocksdb::WriteOptions synced;
  synced.sync = true;
  const rocksdb::Status s = db_->Put(synced, "Mbatch_log_synced", "");
  if (s.IsNoSpace()) {
    // No room for the sync's own record (or RocksDB stopped taking writes for want of room): no
    // sync was tried, so what was written before is intact, only not yet durable. Owed: the
    // batches answered next, duplicates too, wait for a sync that succeeds once the store has
    // resumed. (Sticky, this had left the aggregator failing every push until a restart.)
    sync_owed_.store(true, std::memory_order_relaxed);
    return FromRocks(s, "batch log sync");
  }
  ncclwatch::MutexLock lock(&sync_mu_);
  if (!s.ok() && sync_failed_.ok()) {
    sync_failed_ = FromRocks(s, "batch log sync (restart the aggregator)");
  }
  if (s.ok()) sync_owed_.store(false, std::memory_order_relaxed);
  return sync_failed_;
}

void Store::ReleaseBatchWrite(PendingWrite& pending) {
  if (pending.done == nullptr) return;
  {
    ncclwatch::MutexLock lock(&put_mu_);
    writing_.erase(pending.key);
  }
  pending.done->Notify();
  pending.done.reset();
}

absl::Status Store::ReplayBatches(
    int64_t since_ns, const std::function<void(const ncclwatch::v1::NodeBatch&, int64_t)>& fn,
    int64_t until_ns) const {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), batches_));
  const int64_t from = std::max({since_ns, batch_cutoff_ns_.load(), int64_t{0}});
  std::string buffer;
  uint64_t damaged = 0;
  std::string first_damage;
  for (it->Seek(EncodeStoreKey(
           {.kind = StoreKey::Kind::kBatchLog, .time = static_cast<uint64_t>(from)}));
       it->Valid() && it->key().starts_with("L"); it->Next()) {
    absl::StatusOr<StoreKey> key = DecodeStoreKey(it->key().ToStringView());
    if (!key.ok()) return absl::DataLossError(absl::StrCat("batch log: ", key.status().message()));
    if (static_cast<int64_t>(key->time) > until_ns) break;
    ncclwatch::v1::NodeBatch batch;
    if (absl::Status parsed = ParseLoggedBatch(it->value().ToStringView(), &buffer, &batch);
        !parsed.ok()) {
      // One unreadable batch costs that batch, not the replay (nor a start-up) of the others.
      if (damaged++ == 0)
        first_damage = absl::StrCat(parsed.message(), ", received at ", key->time);
      continue;
    }
    fn(batch, static_cast<int64_t>(key->time));
  }
  if (damaged > 0) {
    batch_log_damaged_.fetch_add(damaged, std::memory_order_relaxed);
    LogWarning(
        "store: %d batches in the batch log could not be read and were skipped (the "
        "first: %s); counted in ncclwatch_aggregator_store_batch_log_damaged_total",
        damaged, first_damage);
  }
  return FromRocks(it->status(), "batch log scan");
}

int64_t Store::ReplayStart(int64_t since_ns, int64_t until_ns, uint64_t max_bytes) const {
  if (max_bytes == 0 || since_ns >= until_ns) return since_ns;
  const std::string end = EncodeStoreKey(
      {.kind = StoreKey::Kind::kBatchLog, .time = static_cast<uint64_t>(until_ns) + 1});
  auto bytes_from = [&](int64_t t) {
    const std::string begin =
        EncodeStoreKey({.kind = StoreKey::Kind::kBatchLog, .time = static_cast<uint64_t>(t)});
    const rocksdb::Range range(begin, end);
    rocksdb::SizeApproximationOptions o;
    o.include_memtables = true;
    o.include_files = true;
    uint64_t size = 0;
    if (!db_->GetApproximateSizes(o, batches_, &range, 1, &size).ok()) return uint64_t{0};
    return size;
  };
  if (bytes_from(since_ns) <= max_bytes) return since_ns;
  // bytes_from falls with t: the earliest t (to 10 ms) whose window fits.
  int64_t too_much = since_ns, fits = until_ns;
  while (fits - too_much > 10'000'000) {
    const int64_t mid = too_much + (fits - too_much) / 2;
    (bytes_from(mid) > max_bytes ? too_much : fits) = mid;
  }
  return fits;
}

absl::StatusOr<uint64_t> Store::CountBatches() const {
  uint64_t n = 0;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), batches_));
  for (it->Seek(EncodeStoreKey({.kind = StoreKey::Kind::kBatchLog,
      .time = static_cast<uint64_t>(batch_cutoff_ns_.load())}));
       it->Valid() && it->key().starts_with("L"); it->Next()) {
    ++n;
  }
  rocksdb::Status s = it->status();
  if (!s.ok()) return FromRocks(s, "batch scan");
  return n;
}

namespace {
constexpr char kListeningStartsKey[] = "Mlistening_starts";  // be64 times, oldest first
}  // namespace

absl::Status Store::RecordListeningStart(int64_t time_ns) {
  ncclwatch::MutexLock lock(&listening_mu_);
  absl::StatusOr<std::vector<int64_t>> starts = ListeningStarts();
  if (absl::IsDataLoss(starts.status())) {
    // Damaged bytes: what they said is lost (a replay judges those moments as if the aggregator
    // had listened all along); the record starts over rather than failing every later start.
    LogWarning("store: %s; starting the record of listening starts over",
               starts.status().message());
    starts = std::vector<int64_t>();
  }
  if (!starts.ok()) return starts.status();
  starts->push_back(time_ns);
  std::sort(starts->begin(), starts->end());
  const size_t keep = std::min(starts->size(), kMaxListeningStarts);
  std::string value;
  value.reserve(keep * 8);
  for (size_t i = starts->size() - keep; i < starts->size(); ++i) {
    value += EncodeBe64(static_cast<uint64_t>((*starts)[i]));
  }
  return FromRocks(db_->Put(rocksdb::WriteOptions(), kListeningStartsKey, value),
                   "listening start write");
}

absl::StatusOr<std::vector<int64_t>> Store::ListeningStarts() const {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kListeningStartsKey, &value);
  if (s.IsNotFound()) return std::vector<int64_t>();
  if (!s.ok()) return FromRocks(s, "listening starts read");
  if (value.size() % 8 != 0) {
    return absl::DataLossError(absl::StrCat("listening starts: ", value.size(),
                                            " bytes, not a whole number of 8-byte times"));
  }
  std::vector<int64_t> starts;
  starts.reserve(value.size() / 8);
  for (size_t i = 0; i < value.size(); i += 8) {
    starts.push_back(static_cast<int64_t>(DecodeBe64(value.data() + i)));
  }
  return starts;
}

absl::Status Store::PutEvent(const ncclwatch::v1::Event& event) {
  const std::string key = EncodeStoreKey({.kind = StoreKey::Kind::kEvent,
                                          .time = event.time_unix_ns(),
                                          .counter = counter_.fetch_add(1)});
  return FromRocks(db_->Put(rocksdb::WriteOptions(), key, event.SerializeAsString()),
                   "event write");
}

absl::StatusOr<std::vector<ncclwatch::v1::Event>> Store::ListEvents(int64_t since_unix_ns,
                                                                    size_t limit) const {
  std::vector<ncclwatch::v1::Event> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(EncodeStoreKey(
           {.kind = StoreKey::Kind::kEvent, .time = static_cast<uint64_t>(since_unix_ns)}));
       it->Valid() && it->key().starts_with("E") && out.size() < limit; it->Next()) {
    ncclwatch::v1::Event e;
    if (e.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      out.push_back(std::move(e));
    }
  }
  rocksdb::Status s = it->status();
  if (!s.ok()) return FromRocks(s, "event scan");
  return out;
}

absl::StatusOr<int64_t> Store::LastEventTime() const {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  it->SeekForPrev("F");  // the last key before the next tag
  if (it->Valid() && it->key().starts_with("E")) {
    absl::StatusOr<StoreKey> key = DecodeStoreKey(it->key().ToStringView());
    if (!key.ok()) return absl::DataLossError(absl::StrCat("event log: ", key.status().message()));
    return static_cast<int64_t>(key->time);
  }
  rocksdb::Status s = it->status();
  if (!s.ok()) return FromRocks(s, "event scan");
  return 0;
}

absl::Status Store::AppendPoints(const std::vector<SeriesPoint>& points) {
  rocksdb::WriteBatch write(points.size() * 40);
  std::string identity;  // reused: no allocation per point once grown
  char key[17] = {'P'};
  // Series whose index entries this write carries: durable once it succeeds. Until then every
  // write with a point of theirs carries the entries again, so that a failed write (a full disk)
  // loses no series, and a write racing this one never leaves points without their index entry.
  std::vector<std::string> recorded;
  {
    ncclwatch::MutexLock lock(&series_mu_);
    const uint64_t write_number = ++series_writes_;
    for (const SeriesPoint& p : points) {
      identity.clear();
      AppendSeriesIdentity(p.name, p.labels, &identity);
      auto it = series_ids_.find(identity);
      if (it == series_ids_.end()) {
        const uint64_t id = next_series_id_++;
        it = series_ids_.emplace(identity, SeriesSlot{id, false}).first;
        series_.push_back({id, p.name, p.labels});
      }
      const uint64_t id = it->second.id;
      // The day of the series' newest point, recorded once a day at most: what lets the index
      // forget a series whose points have all expired (ForgetSeriesBefore).
      const uint32_t day = static_cast<uint32_t>(std::max<int64_t>(p.time_ms, 0) / kDayMs);
      if (day > it->second.day) {
        it->second.day = day;
        write.Put(EncodeStoreKey({.kind = StoreKey::Kind::kSeriesDay, .id = id}), EncodeBe64(day));
      }
      if (!it->second.durable && it->second.carried_by != write_number) {
        it->second.carried_by = write_number;
        write.Put(EncodeStoreKey({.kind = StoreKey::Kind::kSeriesByIdentity, .text = identity}),
                  EncodeBe64(id));
        write.Put(EncodeStoreKey({.kind = StoreKey::Kind::kSeriesById, .id = id}), identity);
        recorded.push_back(identity);
      }
      PutBe64(key + 1, id);
      PutBe64(key + 9, static_cast<uint64_t>(p.time_ms));
      write.Put(rocksdb::Slice(key, sizeof key),
                rocksdb::Slice(reinterpret_cast<const char*>(&p.value), sizeof p.value));
    }
  }
  absl::Status written = FromRocks(db_->Write(rocksdb::WriteOptions(), &write), "points write");
  if (written.ok() && !recorded.empty()) {
    ncclwatch::MutexLock lock(&series_mu_);
    for (const std::string& r : recorded) series_ids_[r].durable = true;
  }
  return written;
}

uint64_t Store::SeriesEntriesSkipped() const {
  ncclwatch::MutexLock lock(&series_mu_);
  return series_entries_skipped_;
}

std::vector<StoredSeries> Store::Series() const {
  ncclwatch::MutexLock lock(&series_mu_);
  return series_;
}

uint64_t Store::SeriesForgotten() const {
  ncclwatch::MutexLock lock(&series_mu_);
  return series_forgotten_;
}

size_t Store::SeriesIndexed() const {
  ncclwatch::MutexLock lock(&series_mu_);
  return series_ids_.size();
}

absl::StatusOr<uint64_t> Store::ForgetSeriesBefore(int64_t cutoff_ms) {
  const int64_t cutoff_day = std::max<int64_t>(cutoff_ms, 0) / kDayMs;  // days wholly before go
  ncclwatch::MutexLock lock(&series_mu_);
  rocksdb::WriteBatch forget;
  absl::flat_hash_set<uint64_t> ids;
  for (auto it = series_ids_.begin(); it != series_ids_.end();) {
    if (static_cast<int64_t>(it->second.day) >= cutoff_day) {
      ++it;
      continue;
    }
    const uint64_t id = it->second.id;
    forget.Delete(EncodeStoreKey({.kind = StoreKey::Kind::kSeriesByIdentity, .text = it->first}));
    forget.Delete(EncodeStoreKey({.kind = StoreKey::Kind::kSeriesById, .id = id}));
    forget.Delete(EncodeStoreKey({.kind = StoreKey::Kind::kSeriesDay, .id = id}));
    ids.insert(id);
    series_ids_.erase(it++);
  }
  if (ids.empty()) return 0;
  std::erase_if(series_, [&](const StoredSeries& s) { return ids.contains(s.id); });
  // Written under the lock: a write that brings one of these series back (a new id) is put
  // together after it, so its new index entries land after these deletions.
  if (absl::Status s = FromRocks(db_->Write(rocksdb::WriteOptions(), &forget), "series forget");
      !s.ok()) {
    return s;  // forgotten in memory; the entries left on disk go at the next start
  }
  series_forgotten_ += ids.size();
  return ids.size();
}

absl::StatusOr<std::vector<Point>> Store::ReadPoints(uint64_t id, int64_t start_ms,
                                                     int64_t end_ms) const {
  std::vector<Point> out;
  const std::string prefix = absl::StrCat("P", EncodeBe64(id));
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(PointKey(id, std::max<int64_t>(start_ms, 0))); it->Valid(); it->Next()) {
    if (!it->key().starts_with(prefix)) break;
    absl::StatusOr<StoreKey> key = DecodeStoreKey(it->key().ToStringView());
    if (!key.ok()) break;
    const auto t = static_cast<int64_t>(key->time);
    if (t > end_ms) break;
    Point p{t, 0};
    if (it->value().size() == sizeof(double)) std::memcpy(&p.value, it->value().data(), 8);
    out.push_back(p);
  }
  rocksdb::Status s = it->status();
  if (!s.ok()) return FromRocks(s, "points scan");
  return out;
}

absl::StatusOr<uint64_t> Store::Downsample(int64_t before_ms, int64_t step_ms) {
  if (step_ms <= 0) return absl::InvalidArgumentError("downsampling step must be positive");
  const std::string progress_key = "Mdownsampled_until_ms";
  std::string progress;
  int64_t from_ms = 0;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), progress_key, &progress);
  if (s.ok() && progress.size() == 8) from_ms = static_cast<int64_t>(DecodeBe64(progress.data()));
  if (!s.ok() && !s.IsNotFound()) return FromRocks(s, "downsampling progress");
  before_ms -= before_ms % step_ms;  // whole buckets only
  if (before_ms <= from_ms) return 0;
  uint64_t removed = 0;
  // Only the series with a point in the window: those whose newest point is no older than its
  // start (an ended job's are not looked at again), by id alone (not a copy of the index).
  std::vector<uint64_t> ids;
  {
    const int64_t from_day = std::max<int64_t>(from_ms, 0) / kDayMs;
    ncclwatch::MutexLock lock(&series_mu_);
    for (const auto& [identity, slot] : series_ids_) {
      if (static_cast<int64_t>(slot.day) >= from_day) ids.push_back(slot.id);
    }
  }
  std::sort(ids.begin(), ids.end());  // in key order
  downsample_visited_.store(ids.size(), std::memory_order_relaxed);
  for (const uint64_t id : ids) {
    const StoredSeries series{.id = id};
    absl::StatusOr<std::vector<Point>> points = ReadPoints(series.id, from_ms, before_ms - 1);
    if (!points.ok()) return points.status();
    rocksdb::WriteBatch write;
    for (size_t i = 0; i < points->size();) {
      const int64_t bucket = (*points)[i].time_ms - (*points)[i].time_ms % step_ms;
      double sum = 0;
      size_t n = 0;
      for (; i < points->size() && (*points)[i].time_ms < bucket + step_ms; ++i, ++n) {
        sum += (*points)[i].value;
        write.Delete(PointKey(series.id, (*points)[i].time_ms));
      }
      const double mean = sum / static_cast<double>(n);
      write.Put(PointKey(series.id, bucket),
                rocksdb::Slice(reinterpret_cast<const char*>(&mean), sizeof mean));
      removed += n - 1;
    }
    if (write.Count() > 0) {
      if (absl::Status w = FromRocks(db_->Write(rocksdb::WriteOptions(), &write), "downsampling");
          !w.ok()) {
        return w;
      }
    }
  }
  s = db_->Put(rocksdb::WriteOptions(), progress_key, EncodeBe64(static_cast<uint64_t>(before_ms)));
  if (!s.ok()) return FromRocks(s, "downsampling progress");
  return removed;
}

void Store::SetRetentionCutoff(int64_t cutoff_ns) { filter_->SetCutoff(cutoff_ns); }

absl::Status Store::SetHistoryRewritePeriod(int64_t seconds) {
  return FromRocks(
      db_->SetOptions(handles_.at(0), {{"periodic_compaction_seconds", absl::StrCat(seconds)}}),
      "setting the history's rewrite period");
}

absl::Status Store::DropBatchesBefore(int64_t cutoff_ns) {
  if (cutoff_ns <= 0) return absl::OkStatus();
  int64_t before = batch_cutoff_ns_.load();
  while (before < cutoff_ns && !batch_cutoff_ns_.compare_exchange_weak(before, cutoff_ns)) {
  }
  const std::string begin = "L";
  const std::string end =
      EncodeStoreKey({.kind = StoreKey::Kind::kBatchLog, .time = static_cast<uint64_t>(cutoff_ns)});
  const rocksdb::Slice b(begin), e(end);
  // Files below level 0 come from stores written before the log stopped being compacted: older
  // than anything in level 0, they go by key range.
  if (absl::Status s = FromRocks(rocksdb::DeleteFilesInRange(db_.get(), batches_, &b, &e),
                                 "batch log file deletion");
      !s.ok()) {
    return s;
  }
  // Level 0, oldest file first, while the oldest holds nothing received after the cutoff. RocksDB
  // deletes a level-0 file only when it is the oldest and no lower level has files left.
  for (;;) {
    rocksdb::ColumnFamilyMetaData meta;
    db_->GetColumnFamilyMetaData(batches_, &meta);
    if (meta.levels.empty() || meta.levels[0].files.empty()) return absl::OkStatus();
    for (size_t level = 1; level < meta.levels.size(); ++level) {
      if (!meta.levels[level].files.empty()) return absl::OkStatus();
    }
    const auto& files = meta.levels[0].files;
    const rocksdb::SstFileMetaData& oldest = *std::min_element(
        files.begin(), files.end(),
        [](const auto& a, const auto& b) { return a.largest_seqno < b.largest_seqno; });
    absl::StatusOr<StoreKey> largest = DecodeStoreKey(oldest.largestkey);
    if (!largest.ok() || largest->kind != StoreKey::Kind::kBatchLog ||
        static_cast<int64_t>(largest->time) >= cutoff_ns) {
      return absl::OkStatus();
    }
    if (oldest.being_compacted) return absl::OkStatus();
    if (rocksdb::Status s = db_->DeleteFile(oldest.name); !s.ok()) {
      return FromRocks(s, absl::StrCat("batch log file deletion (", oldest.name, ")"));
    }
  }
}

Store::Sizes Store::DiskSizes() const {
  Sizes out;
  uint64_t v = 0;
  if (db_->GetIntProperty(batches_, "rocksdb.total-sst-files-size", &v)) out.batch_log_bytes = v;
  if (db_->GetIntProperty(handles_.at(0), "rocksdb.total-sst-files-size", &v)) {
    out.history_bytes = v;
  }
  return out;
}

bool Store::WritesStopped() const { return stops_->stopped(); }

absl::Status Store::ResumeIfStopped() {
  if (!stops_->stopped()) return absl::OkStatus();
  if (log_unusable_.load(std::memory_order_relaxed)) {
    return absl::FailedPreconditionError(
        "RocksDB cannot resume (a resume failed, or the write-ahead log failed before anything "
        "was written to it): only a restart of the aggregator reopens the store");
  }
  // Resuming flushes the memtables; one that fails on a still-full disk leaves RocksDB
  // unrecoverable until a restart, so it is tried only with room for both column families'.
  constexpr uint64_t kRoomToResume = 160 << 20;
  uint64_t free_bytes = 0;
  if (rocksdb::Status s = db_->GetEnv()->GetFreeSpace(dir_, &free_bytes);
      s.ok() && free_bytes < kRoomToResume) {
    return absl::ResourceExhaustedError(absl::StrCat("RocksDB takes no writes until ",
                                                     kRoomToResume >> 20, " MiB are free in ", dir_,
                                                     " (", free_bytes >> 20, " MiB now)"));
  }
  // Cleared first: a write that fails again while RocksDB resumes sets it again.
  stops_->Resumed();
  rocksdb::Status s = db_->Resume();
  if (!s.ok()) {
    // RocksDB keeps a resume that failed (its flush found no room after all: the disk filled
    // again since the check above) as its error for good: no later resume gets past it.
    stops_->Stopped();
    log_unusable_.store(true, std::memory_order_relaxed);
    return FromRocks(s,
                     "RocksDB could not resume (only a restart of the aggregator reopens the "
                     "store)");
  }
  // The new write-ahead log gets a record at once (see MarkLogInUse).
  if (absl::Status marked = MarkLogInUse(); !marked.ok()) return marked;
  LogInfo("store: RocksDB takes writes again");
  return absl::OkStatus();
}

absl::Status Store::MarkLogInUse() {
  // RocksDB resumes from a failed log write by flushing the memtables, and only a flush that
  // switches to a new write-ahead log replaces the log writer that failed; it switches only when
  // something was written to the current log. A failure on a log nothing was written to (the disk
  // filled right after the store opened, or resumed) left the failed writer in place: the next
  // write died on RocksDB's check of it (an assertion: SIGABRT), or failed for good. So the store
  // writes one small record to every new log, and when even that fails, says that only a restart
  // (which reopens the store) gets it going again.
  const rocksdb::Status s = db_->Put(rocksdb::WriteOptions(), "Mlog_in_use_unix_ns",
                                     EncodeBe64(absl::GetCurrentTimeNanos()));
  if (s.ok()) return absl::OkStatus();
  log_unusable_.store(true, std::memory_order_relaxed);
  return FromRocks(s,
                   "the write-ahead log failed before anything was written to it; only a "
                   "restart of the aggregator reopens it");
}

absl::Status Store::Compact() {
  // The history only: the batch log leaves by whole files (DropBatchesBefore), and rewriting it
  // would double what it costs to write.
  return FromRocks(
      db_->CompactRange(rocksdb::CompactRangeOptions(), handles_.at(0), nullptr, nullptr),
      "compaction");
}

}  // namespace ncclwatch::aggregator

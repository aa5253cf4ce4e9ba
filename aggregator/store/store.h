// The aggregator's durable store, on RocksDB (key layout: docs/storage-format.md). The batch log
// has a column family of its own ("batches"), kept for --batch-log-retention and dropped whole
// files at a time; everything else is the long-term history in the default column family:
//   'L' be64(received_ns) be64(n)         -> NodeBatch  acknowledged batches in arrival order
//   'B' agent_id '\0' be64(batch_seq)      -> 'L' key    deduplication index of the batches
//   'E' be64(time_unix_ns) be64(n)         -> Event      detection events, in time order
//   'N' series identity                    -> be64(id)   the series index (identity -> id)
//   'S' be64(id)                           -> identity   the series index (id -> identity)
//   'D' be64(id)                           -> be64(day)  the day of the series' newest point
//   'P' be64(id) be64(time_ms)             -> f64        one point of one series
//   'M' name                               -> bytes      bookkeeping (downsampling progress)
// A batch and its dedup entry are one atomic write through RocksDB's write-ahead log, synced to
// stable storage (fdatasync) before Push is acknowledged, so an acknowledged batch survives a
// crash of the aggregator process and of its node. Concurrent pushes share one WAL write and one
// sync (RocksDB's group commit: the writes are not serialised here); the points
// derived from it are written right after and re-derived from the batch log at start-up
// (ReplayBatches), so no acknowledged point is lost either. Retention of the history is enforced by
// a compaction filter: events and points older than the retention are dropped as RocksDB compacts;
// the batch log goes sooner (DropBatchesBefore).
#ifndef NCCLWATCH_AGGREGATOR_STORE_STORE_H_
#define NCCLWATCH_AGGREGATOR_STORE_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "aggregator/store/store_keys.h"
#include "common/prom_text.h"
#include "common/series.h"
#include "common/sync.h"
#include "ncclwatch/v1/ingest.pb.h"
#include "ncclwatch/v1/query.pb.h"

namespace rocksdb {
class ColumnFamilyHandle;
class DB;
class Env;
}  // namespace rocksdb

namespace ncclwatch::aggregator {

struct StoredSeries {
  uint64_t id = 0;
  std::string name;
  LabelPairs labels;
};

struct Point {
  int64_t time_ms = 0;
  double value = 0;
};

class Store {
 public:
  // Opens (creating if needed) the database in `dir` and loads the series index. `env` may be an
  // in-memory or fault-injecting Env for tests. `sync_batches` false skips the sync before an
  // acknowledgement (benchmarks comparing the two; a power loss may then lose acknowledged
  // batches).
  // A write-ahead log with damaged records opens with them skipped and the rest recovered; the
  // writes lost are logged and counted (WalWritesLost). Damaged table files fail with DataLoss
  // (also from any later read), which Repair answers.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& dir,
                                                     rocksdb::Env* env = nullptr,
                                                     bool sync_batches = true);
  // Rebuilds the store in `dir` (closed) from what is readable (RocksDB's RepairDB): a table file
  // with damaged blocks is moved to `dir`/lost/ with everything in it, the write-ahead log is
  // turned into table files, and the catalogue of files is written anew.
  static absl::Status Repair(const std::string& dir, rocksdb::Env* env = nullptr);
  // Places where RocksDB found the write-ahead log damaged when the store was opened (what it could
  // not read there, and in a compressed log the rest of that file, is lost), and the writes lost
  // in holes it read past.
  uint64_t WalDamage() const { return wal_damage_; }
  uint64_t WalWritesLost() const { return wal_lost_writes_; }
  // Batches an agent numbered but the store never got: a batch whose sequence number skips past
  // the newest stored one of its agent counts the ones skipped (lost here to a damaged log, or
  // never delivered: set aside or dropped by the agent, which counts those itself). Logged at most
  // once a minute.
  uint64_t BatchesMissing() const { return batches_missing_.load(std::memory_order_relaxed); }
  // Batches in the batch log that a replay (start-up, trace) found unreadable and skipped.
  uint64_t BatchLogDamaged() const { return batch_log_damaged_.load(std::memory_order_relaxed); }
  ~Store();

  // Stores the batch, received at `received_ns`, unless its (agent_id, batch_seq) is already
  // stored. Returns true if it was new. With `source`, the batch is stored with that source
  // instead of its own (without copying it: the field is appended to its encoding, and the last
  // occurrence of a field is what decodes). Thread-safe.
  absl::StatusOr<bool> PutBatchIfNew(const ncclwatch::v1::NodeBatch& batch, int64_t received_ns,
                                     const std::string* source = nullptr);
  // PutBatchIfNew in three steps, for a caller that makes many batches durable with one sync
  // (Ingest's group commit). WriteBatchIfNew writes the batch to the log unsynced and says whether
  // it was new; while the same batch is being written by another push it answers Unavailable
  // (retry) at once, with `busy` set. SyncBatchWrites makes every write before it durable (a
  // no-op without `sync_batches`); after a failed sync every later write fails too, as what was
  // written unsynced may be lost. ReleaseBatchWrite, after the sync (or the failure), lets a
  // second push of the batch see how it ended.
  struct PendingWrite {
    std::string key;
    std::shared_ptr<ncclwatch::Notification> done;  // set while this write holds the key
    std::shared_ptr<ncclwatch::Notification> busy;  // the other push's, when it held it
  };
  // `wire`, when not empty, is the encoding `batch` was parsed from: logged as it is rather than
  // encoded again.
  absl::StatusOr<bool> WriteBatchIfNew(const ncclwatch::v1::NodeBatch& batch, int64_t received_ns,
                                       const std::string* source, PendingWrite* pending,
                                       std::string_view wire = {});
  absl::Status SyncBatchWrites();
  // A sync failed for want of room (not an I/O error, which is sticky): until one succeeds, the
  // batches written before may not be durable, so a duplicate is answered only after a sync too.
  bool SyncOwed() const { return sync_owed_.load(std::memory_order_relaxed); }
  void ReleaseBatchWrite(PendingWrite& pending);
  // Calls `fn` with every stored batch received in [since_ns, until_ns], in arrival order. A
  // batch whose stored bytes cannot be read (damaged) is skipped, logged and counted.
  absl::Status ReplayBatches(
      int64_t since_ns,
      const std::function<void(const ncclwatch::v1::NodeBatch&, int64_t received_ns)>& fn,
      int64_t until_ns = INT64_MAX) const;
  // The latest time in [since_ns, until_ns] from which the batch log holds at most about
  // `max_bytes` (as stored, compressed; RocksDB's approximate sizes, no read of the log), or
  // `since_ns` when the whole window fits or `max_bytes` is 0. Bounds what a start-up replays.
  int64_t ReplayStart(int64_t since_ns, int64_t until_ns, uint64_t max_bytes) const;
  // Number of batches in the store (scans keys; for tests and start-up logging).
  absl::StatusOr<uint64_t> CountBatches() const;

  // The times the aggregator began to listen again: at start-up, and when its store took pushes
  // again after refusing them (a full disk). The agents' backlogs arrive over their next retries
  // after such a time, one node's before another's; a replay of the batch log applies each time
  // where it fell (Analyzer::StartListening), so that it judges silence as the live run did. The
  // newest kMaxListeningStarts are kept, oldest first.
  // A damaged record (bit rot) reads as DataLoss and is started over by the next record.
  static constexpr size_t kMaxListeningStarts = 256;
  absl::Status RecordListeningStart(int64_t time_ns);
  absl::StatusOr<std::vector<int64_t>> ListeningStarts() const;

  absl::Status PutEvent(const ncclwatch::v1::Event& event);
  // Events with time >= since_unix_ns, oldest first, at most `limit`.
  absl::StatusOr<std::vector<ncclwatch::v1::Event>> ListEvents(int64_t since_unix_ns,
                                                               size_t limit) const;
  // Time of the newest stored event, 0 if none.
  absl::StatusOr<int64_t> LastEventTime() const;

  // Writes points in one batched write, registering new series. Rewriting a point is harmless.
  absl::Status AppendPoints(const std::vector<SeriesPoint>& points);
  // Every series in the index (in memory), in id order.
  std::vector<StoredSeries> Series() const;
  // Forgets the series whose newest point is older than `cutoff_ms` (its day, as recorded with
  // the points: all their points have expired), in memory and on disk; returns how many. A series
  // of a store written before the day was recorded counts as written when the store was opened.
  // The same series written again later is a new one (a new id; its old points are gone).
  absl::StatusOr<uint64_t> ForgetSeriesBefore(int64_t cutoff_ms);
  // Series forgotten so far, and in the index now.
  uint64_t SeriesForgotten() const;
  size_t SeriesIndexed() const;
  // Series index entries found unreadable at start-up and skipped (their series' history is
  // lost; the rest is served).
  uint64_t SeriesEntriesSkipped() const;
  // Points of series `id` with start_ms <= time <= end_ms, oldest first.
  absl::StatusOr<std::vector<Point>> ReadPoints(uint64_t id, int64_t start_ms,
                                                int64_t end_ms) const;

  // Replaces the points older than `before_ms` (and newer than the previous call's `before_ms`) by
  // one point per `step_ms` bucket and series: the bucket's mean, at the bucket's start. Returns
  // the number of points removed. Idempotent; progress is kept in the database.
  absl::StatusOr<uint64_t> Downsample(int64_t before_ms, int64_t step_ms);
  // The series the last Downsample looked at: those with a point in its window.
  uint64_t DownsampleVisited() const { return downsample_visited_.load(std::memory_order_relaxed); }

  // Data older than this (unix ns) is dropped by compactions from now on; 0 keeps everything.
  void SetRetentionCutoff(int64_t cutoff_ns);
  // Every table file of the history is compacted again once it is this old (RocksDB's periodic
  // compaction), so that the retention cutoff reaches the files no new write overlaps (series
  // that ended): expired data stays on disk at most this long past the retention.
  absl::Status SetHistoryRewritePeriod(int64_t seconds);
  // Drops the batches received before `cutoff_ns` from the batch log: ReplayBatches and
  // CountBatches no longer see them, and the table files holding nothing newer are deleted
  // outright, oldest first, without a rewrite. The rest leave with their files. (No range
  // deletion: RocksDB widens every later file's key range over a range tombstone.)
  absl::Status DropBatchesBefore(int64_t cutoff_ns);
  // Bytes of table files on disk: the batch log, and the rest (the long-term history).
  struct Sizes {
    uint64_t batch_log_bytes = 0;
    uint64_t history_bytes = 0;
  };
  Sizes DiskSizes() const;
  // After a write failed (a full disk, an I/O error), RocksDB takes no more writes until it
  // resumes; RocksDB's own recovery is off (it waits silently for a fixed reserve of free space).
  // WritesStopped() says whether it is so; ResumeIfStopped() resumes once 160 MiB are free (a
  // resume that fails for room would leave RocksDB unusable until a restart), an error saying
  // why not meanwhile. Cheap when nothing is wrong.
  bool WritesStopped() const;
  absl::Status ResumeIfStopped();
  // Writes stopped in a way resuming cannot mend (a resume failed: RocksDB keeps that error; or the
  // write-ahead log failed before anything was written to it): only a restart, which reopens the
  // store, gets it going again. The aggregator's liveness (/healthz) fails then.
  bool NeedsRestart() const { return log_unusable_.load(std::memory_order_relaxed); }
  // Compacts the whole history now (applies the retention cutoff). Slow, rewrites everything: for
  // tests and maintenance, not for a periodic task.
  absl::Status Compact();

 private:
  class RetentionFilter;
  class WriteStopListener;
  class WalGapFilter;
  class RecoveryLogger;
  Store(rocksdb::DB* db, std::vector<rocksdb::ColumnFamilyHandle*> handles,
        std::unique_ptr<RetentionFilter> filter, bool sync_batches);
  absl::Status LoadSeriesIndex();
  struct DbDeleter {
    void operator()(rocksdb::DB* db) const;
  };
  std::unique_ptr<RetentionFilter> filter_;   // outlives db_ (declared first, destroyed last)
  std::unique_ptr<WalGapFilter> wal_gaps_;    // likewise: RocksDB keeps a pointer to it
  uint64_t wal_lost_writes_ = 0;              // found by wal_gaps_ at Open
  uint64_t wal_damage_ = 0;                   // damage RocksDB reported at Open
  std::atomic<uint64_t> batches_missing_{0};  // WriteBatchIfNew
  mutable std::atomic<uint64_t> batch_log_damaged_{0};  // ReplayBatches
  std::atomic<uint64_t> downsample_visited_{0};
  std::atomic<bool> log_unusable_{false};  // NeedsRestart
  // Writes a record to the current write-ahead log (at Open and after a resume), so that RocksDB
  // can replace its writer if a later write fails.
  absl::Status MarkLogInUse();
  std::atomic<int64_t> missing_logged_ns_{0};
  std::shared_ptr<WriteStopListener> stops_;  // also held by RocksDB
  std::string dir_;
  std::unique_ptr<rocksdb::DB, DbDeleter> db_;
  // Owned; released before db_ (~Store). [0] the default column family, [1] the batch log.
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  rocksdb::ColumnFamilyHandle* batches_ = nullptr;
  std::atomic<int64_t> batch_cutoff_ns_{0};  // DropBatchesBefore
  const bool sync_batches_;
  // The duplicate check and the write are one step per batch key, without serialising writes of
  // different batches (which would defeat group commit): a key being written is in `writing_`,
  // and a second push of it waits for that write's outcome before it checks again.
  ncclwatch::Mutex put_mu_;
  std::map<std::string, std::shared_ptr<ncclwatch::Notification>> writing_ ABSL_GUARDED_BY(put_mu_);
  // Per agent id, the highest batch_seq in the store: read from it at the agent's first push,
  // raised by every write since. A higher sequence number is new without a lookup (agents number
  // their batches from 1 upwards); only a replay is looked up. At 16,384 ranks the lookup of every
  // push had grown to a quarter of the aggregator's CPU. Forgotten whole beyond kMaxKnownAgents.
  absl::flat_hash_map<std::string, uint64_t> newest_seq_ ABSL_GUARDED_BY(put_mu_);
  // The highest batch_seq of `agent_id` in the store (0: none), by one seek.
  absl::StatusOr<uint64_t> NewestStoredSeq(const std::string& agent_id) const;
  // The same from newest_seq_, read from the store the first time; the maximum (look every
  // push up) for an id with a NUL, whose index keys are ambiguous.
  absl::StatusOr<uint64_t> NewestSeqLocked(const std::string& agent_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(put_mu_);
  std::atomic<uint64_t> counter_{0};
  ncclwatch::Mutex listening_mu_;  // RecordListeningStart's read-modify-write
  // A failed WAL sync, sticky (SyncBatchWrites).
  ncclwatch::Mutex sync_mu_;
  absl::Status sync_failed_ ABSL_GUARDED_BY(sync_mu_);
  std::atomic<bool> sync_owed_{false};  // SyncOwed

  mutable ncclwatch::Mutex series_mu_;
  struct SeriesSlot {
    uint64_t id = 0;
    bool durable = false;     // its index entries are on disk (AppendPoints)
    uint64_t carried_by = 0;  // the newest write that carries them (series_writes_)
    uint32_t day = 0;         // of its newest point written (days since the epoch)
  };
  absl::flat_hash_map<std::string, SeriesSlot> series_ids_ ABSL_GUARDED_BY(series_mu_);
  std::vector<StoredSeries> series_ ABSL_GUARDED_BY(series_mu_);  // ascending ids, with gaps
  uint64_t next_series_id_ ABSL_GUARDED_BY(series_mu_) = 1;
  uint64_t series_entries_skipped_ ABSL_GUARDED_BY(series_mu_) = 0;
  uint64_t series_forgotten_ ABSL_GUARDED_BY(series_mu_) = 0;
  uint64_t series_writes_ ABSL_GUARDED_BY(series_mu_) = 0;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_STORE_STORE_H_

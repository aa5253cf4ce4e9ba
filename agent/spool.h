// The agent's durable spool: every batch cut for the aggregator is written here before it is
// pushed and deleted once acknowledged, so a batch survives an aggregator outage, an agent crash
// or restart, and is replayed in order.
//
// One file per batch, `<dir>/<created_unix_ns>-<sequence>.batch` (both zero-padded, so names sort
// in creation order), holding the serialized NodeBatch with its own (agent_id, batch_seq) behind
// a header with its length and CRC-32C, so that a file cut short or with flipped bits is caught
// (moved aside as *.corrupt and counted, never sent): a replay is deduplicated by the aggregator
// like any retry. A file is written under a temporary
// name and renamed, so it is either whole or absent after a crash of the agent (the kernel keeps
// what was written); with `fsync` (the agent's default) the file and then its directory are
// synced to disk, so it also survives a power loss or node crash. The spool holds at most
// `max_bytes`; adding past that deletes the oldest batches first and counts them
// (ncclwatch_agent_spool_dropped_{batches,reports}_total).
//
// Thread safety: all methods may be called from any thread.
#ifndef NCCLWATCH_AGENT_SPOOL_H_
#define NCCLWATCH_AGENT_SPOOL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/metrics.h"
#include "common/sync.h"
#include "ncclwatch/v1/ingest.pb.h"

namespace ncclwatch::agent {

// The batch in a spool file's bytes (header checked), or DataLoss saying what is wrong with it.
absl::StatusOr<ncclwatch::v1::NodeBatchBytes> ParseSpoolFile(std::string_view bytes);

class Spool {
 public:
  struct Entry {
    std::string name;  // the file name, the entry's handle
    int reports = 0;
  };

  // Opens (creating) `dir` and reads what an earlier run left there; unreadable files are moved
  // aside as `*.corrupt` and counted, never replayed.
  // `labels` go on every metric of this spool (an agent has one spool per aggregator endpoint).
  static absl::StatusOr<std::unique_ptr<Spool>> Open(const std::string& dir, int64_t max_bytes,
                                                     MetricRegistry& metrics, bool fsync = false,
                                                     const LabelPairs& labels = {});

  // The batches found at Open, oldest first: push these before anything new.
  std::vector<Entry> TakeRecovered();
  // Durably adds `batch`; returns its name. Makes room by dropping the oldest batches; a batch
  // larger than the whole spool is refused (ResourceExhausted).
  absl::StatusOr<std::string> Add(const ncclwatch::v1::NodeBatchBytes& batch);
  // Reads a spooled batch back. NotFound if it was dropped to make room meanwhile; DataLoss if it
  // is damaged (cut short, flipped bits: each file carries its length and CRC-32C), in which
  // case it is moved aside as `*.corrupt` and counted with its reports, as at Open.
  absl::StatusOr<ncclwatch::v1::NodeBatchBytes> Read(const std::string& name);
  // Deletes an acknowledged batch (a name already dropped is ignored).
  void Remove(const std::string& name);
  // Moves a batch the aggregator keeps failing on out of the way, as `<name>.rejected` in the
  // spool's directory (kept for a look, never replayed, not counted in bytes()); the newest 16
  // such files are kept.
  void SetAside(const std::string& name);

  const std::string& dir() const { return dir_; }
  int64_t bytes() const;
  size_t batches() const;
  // False after a write failed (disk full, read-only, ...), until one succeeds again or the spool
  // drains.
  bool writable() const;

 private:
  struct File {
    int64_t bytes = 0;
    int reports = 0;
  };
  Spool(std::string dir, int64_t max_bytes, bool fsync, MetricRegistry& metrics,
        const LabelPairs& labels);
  void UpdateGauges() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string dir_;
  const int64_t max_bytes_;
  const bool fsync_;
  mutable ncclwatch::Mutex mu_;
  std::map<std::string, File> files_ ABSL_GUARDED_BY(mu_);  // by name = creation order
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t sequence_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Entry> recovered_ ABSL_GUARDED_BY(mu_);
  bool writable_ ABSL_GUARDED_BY(mu_) = true;
  Counter* dropped_batches_;
  Counter* dropped_reports_;
  Counter* corrupt_;
  Counter* write_errors_;
  Gauge* bytes_gauge_;
  Gauge* batches_gauge_;
  Gauge* max_bytes_gauge_;
};

}  // namespace ncclwatch::agent

#endif  // NCCLWATCH_AGENT_SPOOL_H_

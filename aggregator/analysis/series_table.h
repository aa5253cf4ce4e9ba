// The per-report series the aggregator exports for every rank: the NCCL Inspector-compatible
// families and the plugin's drop counters, each with its latest value, capped in number, capped
// in the bytes each source (the agent that sent them) makes the table hold, and forgotten after a
// TTL without updates.
//
// Not thread-safe: the Analyzer serialises calls.
#ifndef NCCLWATCH_AGGREGATOR_ANALYSIS_SERIES_TABLE_H_
#define NCCLWATCH_AGGREGATOR_ANALYSIS_SERIES_TABLE_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "aggregator/detect/types.h"
#include "common/series.h"
#include "ncclwatch/v1/report.pb.h"

namespace ncclwatch::aggregator {

class SeriesTable {
 public:
  // One rank of one communicator: the series are kept per rank.
  struct RankKey {
    std::string job_id;
    uint64_t comm_hash;
    int rank;
    bool operator==(const RankKey&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const RankKey& k) {
      return H::combine(std::move(h), k.job_id, k.comm_hash, k.rank);
    }
  };

  // `max_bytes_per_source`: what the series of one source may hold (their labels and
  // bookkeeping, as estimated by the table); a new series beyond is refused and counted.
  SeriesTable(size_t max_series, int64_t ttl_ns,
              size_t max_bytes_per_source = std::numeric_limits<size_t>::max())
      : max_series_(max_series), ttl_ns_(ttl_ns), max_bytes_per_source_(max_bytes_per_source) {}

  // Takes the series of one rank's report, received at `now_ns`: every Inspector sample and the
  // plugin's drop counters, labelled with `rank_labels` (who the rank is) first. Each value is
  // stamped with the end of the interval it describes (the rank's clock, `now_ns` when absent),
  // so that reports delivered together -- e.g. after an outage -- stay distinct points. Appends
  // the points it set to `points` (what the store keeps). A new series beyond `max_series` is
  // neither kept nor appended, and is counted.
  // The rank's labels are made by `make_labels`, only when `fingerprint` (a hash of what they are
  // made of) differs from the rank's last report's: building them for every report was a good
  // part of its cost.
  // `source`: who sent it; a rank's series count against the source that first reported it.
  // `slot`, when given, caches where the rank's series are between reports (the registry keeps
  // one per rank): valid until the table forgets any rank, it spares the lookup of the rank's key.
  void AddReport(uint64_t fingerprint, absl::FunctionRef<LabelPairs()> make_labels,
                 const ncclwatch::v1::RankReport& report, int64_t now_ns,
                 std::vector<SeriesPoint>* points, std::string_view source = "",
                 CachedSlot* slot = nullptr);
  // Forgets the series not updated within the TTL. Walks the table at most every TTL/60 (10 s by
  // default): called four times a second, a walk of a million series each time would cost more
  // than the reports that fill it.
  void Expire(int64_t now_ns);
  // Every series, with its latest value.
  void AppendTo(std::vector<SeriesPoint>* out) const;
  // The ranks held now, and the series of those of `keys` still held: to copy the table a part at
  // a time (Analyzer::Series lets ingest in between).
  std::vector<RankKey> Keys() const;
  void AppendTo(std::span<const RankKey> keys, std::vector<SeriesPoint>* out) const;

  size_t size() const { return series_; }
  uint64_t capped() const { return capped_; }
  // New series refused because their source held max_bytes_per_source.
  uint64_t capped_by_source() const { return capped_by_source_; }
  // What the series of `source` hold now (the estimate the budget counts).
  size_t source_bytes(std::string_view source) const {
    auto it = bytes_by_source_.find(absl::string_view(source.data(), source.size()));
    return it == bytes_by_source_.end() ? 0 : it->second;
  }

 private:
  // One series of a rank: its family and the labels after the rank's (operation, size bucket,
  // ...), as InspectorSamples makes them; Inspector's job labels (InspectorJobLabels) go between
  // the two when `inspector`.
  struct Entry {
    const char* name;
    bool inspector;
    // A 64-bit hash of what `labels` are made of (InspectorStatKey for Inspector's series): a
    // series is found by it, neither its labels built nor compared for every report. Two series
    // of one rank and family whose labels differ share one with odds of 2^-64.
    uint64_t key;
    // Shared by every series with the same `inspector` and `key`, whatever its rank or family
    // (SharedLabels): the same few operations and sizes label the series of thousands of ranks.
    std::shared_ptr<const LabelPairs> labels;
    double value = 0;
    int64_t time_ms = 0;
    int64_t updated_ns = 0;
  };
  // Every series of one rank of one communicator. The rank's own labels are kept once, not per
  // series, and the full label sets are only put together when exported: at 16,384 ranks and
  // ~60 series each, per-series label sets were most of the aggregator's CPU per report and of
  // its memory.
  struct Rank {
    uint64_t fingerprint = 0;  // of `labels` (none yet: a new rank)
    LabelPairs labels;
    std::vector<Entry> entries;
    std::string source;  // who first reported it: its series count against that source
    size_t bytes = 0;    // the estimate charged to `source` for it and its entries
  };
  // The memory a label set and an entry cost, as the per-source budget counts them.
  static size_t LabelBytes(const LabelPairs& labels);
  static size_t EntryBytes(const Entry& e);
  // Charges `bytes` to `rank`'s source; false (nothing charged) beyond its budget.
  bool Charge(Rank& rank, size_t bytes);
  // Gives back `bytes` of what `rank` holds (all of it when it is being erased).
  void Refund(Rank& rank, size_t bytes);
  // Sets one series of `rank`; null when it is new and the table is full (counted). `*hint` is
  // where to look first (a report lists its series in the order the last one did) and becomes
  // the position after the series set. A series is found by its family and `key` (Entry::key);
  // its labels are built by `make_labels` only when it is new.
  Entry* Set(Rank& rank, size_t* hint, const char* name, bool inspector, uint64_t key,
             absl::FunctionRef<LabelPairs()> make_labels, double value, int64_t sample_ms,
             int64_t now_ns);
  // The label set of the series `inspector`, `key` (Entry), made by `make_labels` when no series
  // holds it yet. Each was a label set of its own, most of the table's memory: five pairs, in a
  // block of 512 bytes, for each of ~50 series per rank, where the series themselves take 72.
  std::shared_ptr<const LabelPairs> SharedLabels(bool inspector, uint64_t key,
                                                 absl::FunctionRef<LabelPairs()> make_labels);
  // Forgets rank `id` (every slot cached before is invalid after).
  void Erase(const ncclwatch::v1::RankIdentity& id);
  // The full label set of `e`, a series of `rank` of job `job_id`.
  static LabelPairs FullLabels(const std::string& job_id, const Rank& rank, const Entry& e);

  const size_t max_series_;
  const int64_t ttl_ns_;
  const size_t max_bytes_per_source_;
  absl::flat_hash_map<std::string, size_t> bytes_by_source_;
  uint64_t capped_by_source_ = 0;
  // Nodes, not flat slots: a rank's address stays put while it is kept (AddReport's slot cache),
  // and the cache is invalid after any erasure (`generation_`).
  absl::node_hash_map<RankKey, Rank> ranks_;
  uint64_t generation_ = 1;
  // The label sets held by series (SharedLabels); those no series holds any more go at Expire.
  absl::flat_hash_map<std::pair<bool, uint64_t>, std::shared_ptr<const LabelPairs>> labels_;
  size_t series_ = 0;  // entries over all ranks
  uint64_t capped_ = 0;
  int64_t last_expire_ns_ = INT64_MIN / 2;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_ANALYSIS_SERIES_TABLE_H_

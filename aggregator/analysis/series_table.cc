#include "aggregator/analysis/series_table.h"

#include <array>
#include <cstring>
#include <iterator>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "proto/inspector.h"

namespace ncclwatch::aggregator {
namespace {

constexpr char kDropsFamily[] = "ncclwatch_plugin_drops_total";
// The kinds of ncclwatch_plugin_drops_total, in DropCounters' order; those from
// kFirstRareDropKind on are exported only once non-zero.
constexpr size_t kDropKinds = 7;
constexpr const char* kDropKindNames[kDropKinds] = {
    "events",        "records",         "reports", "samples_capped", "channel_events_orphaned",
    "bogus_timings", "completions_lost"};
constexpr size_t kFirstRareDropKind = 5;
// Each kind's series key (Entry::key), hashed once: every report sets five of them, and hashing
// the names again for each was a quarter of the table's work per report.
const std::array<uint64_t, kDropKinds>& DropKeys() {
  static const std::array<uint64_t, kDropKinds> keys = [] {
    std::array<uint64_t, kDropKinds> k{};
    for (size_t i = 0; i < kDropKinds; ++i) {
      k[i] = absl::HashOf(std::string_view(kDropKindNames[i]));
    }
    return k;
  }();
  return keys;
}

}  // namespace

SeriesTable::Entry* SeriesTable::Set(Rank& rank, size_t* hint, const char* name, bool inspector,
                                     uint64_t key, absl::FunctionRef<LabelPairs()> make_labels,
                                     double value, int64_t sample_ms, int64_t now_ns) {
  auto matches = [&](const Entry& e) {
    return e.key == key && e.inspector == inspector &&
           (e.name == name || std::strcmp(e.name, name) == 0);
  };
  // A rank has a few dozen series, which its reports list in the same order: the hinted one
  // nearly always matches, and a linear scan of the keys finds the rest (cheaper than a hash map
  // per rank).
  Entry* entry = nullptr;
  if (*hint < rank.entries.size() && matches(rank.entries[*hint])) {
    entry = &rank.entries[*hint];
  } else {
    for (Entry& e : rank.entries) {
      if (matches(e)) {
        entry = &e;
        break;
      }
    }
  }
  if (entry == nullptr) {
    if (series_ >= max_series_) {  // neither exported nor stored
      ++capped_;
      return nullptr;
    }
    Entry fresh{name, inspector, key, SharedLabels(inspector, key, make_labels)};
    if (!Charge(rank, EntryBytes(fresh))) {  // its source holds its budget already
      ++capped_by_source_;
      return nullptr;
    }
    ++series_;
    entry = &rank.entries.emplace_back(std::move(fresh));
  }
  *hint = static_cast<size_t>(entry - rank.entries.data()) + 1;
  entry->value = value;
  entry->time_ms = sample_ms;
  entry->updated_ns = now_ns;
  return entry;
}

void SeriesTable::AddReport(uint64_t fingerprint, absl::FunctionRef<LabelPairs()> make_labels,
                            const ncclwatch::v1::RankReport& report, int64_t now_ns,
                            std::vector<SeriesPoint>* points, std::string_view source,
                            CachedSlot* slot) {
  const auto end_ns = static_cast<int64_t>(report.interval_end_unix_ns());
  const int64_t sample_ms = (end_ns > 0 ? end_ns : now_ns) / 1'000'000;
  const auto& id = report.identity();
  const bool cached = slot != nullptr && slot->rank != nullptr && slot->generation == generation_;
  Rank& rank = cached ? *static_cast<Rank*>(slot->rank)
                      : ranks_[RankKey{id.job_id(), id.comm_hash(), id.rank()}];
  if (slot != nullptr) *slot = CachedSlot{nullptr, &rank, generation_};
  if (rank.labels.empty() || rank.fingerprint != fingerprint) {  // new, or its node changed
    if (rank.labels.empty()) rank.source = std::string(source);
    const size_t old_bytes = LabelBytes(rank.labels);
    rank.labels = make_labels();
    rank.fingerprint = fingerprint;
    // The rank's own labels are charged with it (their growth only; a shrink is kept).
    const size_t new_bytes = LabelBytes(rank.labels);
    if (new_bytes > old_bytes && !Charge(rank, new_bytes - old_bytes)) {
      ++capped_by_source_;
      if (rank.entries.empty()) {
        Refund(rank, rank.bytes);
        Erase(id);
      }
      return;
    }
  }
  size_t hint = 0;
  auto set = [&](const char* name, bool inspector, uint64_t key,
                 absl::FunctionRef<LabelPairs()> make_labels, double value) {
    const Entry* e = Set(rank, &hint, name, inspector, key, make_labels, value, sample_ms, now_ns);
    // The points the store keeps (--store-rank-series) carry the full label set.
    if (e == nullptr || points == nullptr) return;
    points->push_back({name, FullLabels(id.job_id(), rank, *e), value, sample_ms});
  };
  for (const InspectorStat& stat : InspectorStats(report)) {
    const uint64_t key = InspectorStatKey(stat, id);
    auto make = [&] { return InspectorStatLabels(stat, id); };
    set(stat.time_family(), /*inspector=*/true, key, make, stat.mean_us);
    if (stat.has_bw) set(stat.bw_family(), /*inspector=*/true, key, make, stat.bus_bw_gbs);
  }
  for (InspectorSample& sample : UserTagSamples(report)) {
    set(
        sample.name, /*inspector=*/false, absl::HashOf(sample.labels),
        [&] { return sample.labels; }, sample.value);
  }
  // What the plugin could not record (cumulative since the training process started): a pool,
  // ring or queue was full (findings may miss operations), or GPU timestamps that cannot be true
  // were left out (bogus_timings: telemetry that lies, never judged), or completions never
  // arrived (completions_lost: not taken for hangs).
  if (report.has_drops()) {
    const auto& d = report.drops();
    const uint64_t values[kDropKinds] = {
        d.events_dropped(),          d.records_dropped(), d.reports_dropped(), d.samples_capped(),
        d.channel_events_orphaned(), d.bogus_timings(),   d.completions_lost()};
    const std::array<uint64_t, kDropKinds>& keys = DropKeys();
    for (size_t i = 0; i < kDropKinds; ++i) {
      const char* const kind = kDropKindNames[i];  // named, not bound: the lambda captures it
      // Telemetry that lies is rare: its series appears with the rank's first (a 16,384-rank job
      // would otherwise export 16,384 more zeros).
      if (values[i] == 0 && i >= kFirstRareDropKind) continue;
      set(
          kDropsFamily, /*inspector=*/false, keys[i],
          [&] {
            return LabelPairs{{"kind", kind}};
          },
          static_cast<double>(values[i]));
    }
  }
  if (rank.entries.empty()) {
    Refund(rank, rank.bytes);
    Erase(id);
  }
}

void SeriesTable::Erase(const ncclwatch::v1::RankIdentity& id) {
  ranks_.erase(RankKey{id.job_id(), id.comm_hash(), id.rank()});
  ++generation_;
}

size_t SeriesTable::LabelBytes(const LabelPairs& labels) {
  size_t bytes = labels.capacity() * sizeof(LabelPairs::value_type);
  for (const auto& [k, v] : labels) {
    // Strings beyond the small-string buffer live on the heap.
    if (k.size() >= sizeof(std::string) / 2) bytes += k.capacity() + 1;
    if (v.size() >= sizeof(std::string) / 2) bytes += v.capacity() + 1;
  }
  return bytes;
}

// Charged as if its labels were its own: a source is held to what it could make the table hold,
// were its label sets all new.
size_t SeriesTable::EntryBytes(const Entry& e) { return sizeof(Entry) + LabelBytes(*e.labels); }

std::shared_ptr<const LabelPairs> SeriesTable::SharedLabels(
    bool inspector, uint64_t key, absl::FunctionRef<LabelPairs()> make_labels) {
  auto [it, added] = labels_.try_emplace(std::make_pair(inspector, key));
  if (added) it->second = std::make_shared<const LabelPairs>(make_labels());
  return it->second;
}

bool SeriesTable::Charge(Rank& rank, size_t bytes) {
  size_t& held = bytes_by_source_[rank.source];
  if (held + bytes > max_bytes_per_source_) {
    if (held == 0) bytes_by_source_.erase(rank.source);
    return false;
  }
  held += bytes;
  rank.bytes += bytes;
  return true;
}

void SeriesTable::Refund(Rank& rank, size_t bytes) {
  bytes = std::min(bytes, rank.bytes);
  rank.bytes -= bytes;
  auto it = bytes_by_source_.find(rank.source);
  if (it == bytes_by_source_.end()) return;
  it->second -= std::min(it->second, bytes);
  if (it->second == 0) bytes_by_source_.erase(it);
}

void SeriesTable::Expire(int64_t now_ns) {
  if (now_ns - last_expire_ns_ < ttl_ns_ / 60) return;
  last_expire_ns_ = now_ns;
  for (auto it = ranks_.begin(); it != ranks_.end();) {
    Rank& rank = it->second;
    auto& entries = rank.entries;
    const size_t before = entries.size();
    size_t freed = 0;
    std::erase_if(entries, [&](const Entry& e) {
      if (now_ns - e.updated_ns <= ttl_ns_) return false;
      freed += EntryBytes(e);
      return true;
    });
    series_ -= before - entries.size();
    if (entries.empty()) {
      Refund(rank, rank.bytes);
      ranks_.erase(it++);
      ++generation_;
    } else {
      Refund(rank, freed);
      ++it;
    }
  }
  absl::erase_if(labels_, [](const auto& shared) { return shared.second.use_count() == 1; });
}

LabelPairs SeriesTable::FullLabels(const std::string& job_id, const Rank& rank, const Entry& e) {
  LabelPairs labels;
  labels.reserve(rank.labels.size() + 2 + e.labels->size());
  labels.insert(labels.end(), rank.labels.begin(), rank.labels.end());
  if (e.inspector) {
    const LabelPairs job = InspectorJobLabels(job_id);
    labels.insert(labels.end(), job.begin(), job.end());
  }
  labels.insert(labels.end(), e.labels->begin(), e.labels->end());
  return labels;
}

void SeriesTable::AppendTo(std::vector<SeriesPoint>* out) const {
  out->reserve(out->size() + series_);
  for (const auto& [key, rank] : ranks_) {
    for (const Entry& e : rank.entries) {
      out->push_back({e.name, FullLabels(key.job_id, rank, e), e.value, e.time_ms});
    }
  }
}

std::vector<SeriesTable::RankKey> SeriesTable::Keys() const {
  std::vector<RankKey> keys;
  keys.reserve(ranks_.size());
  for (const auto& [key, rank] : ranks_) keys.push_back(key);
  return keys;
}

void SeriesTable::AppendTo(std::span<const RankKey> keys, std::vector<SeriesPoint>* out) const {
  for (const RankKey& key : keys) {
    auto it = ranks_.find(key);
    if (it == ranks_.end()) continue;  // expired meanwhile
    for (const Entry& e : it->second.entries) {
      out->push_back({e.name, FullLabels(key.job_id, it->second, e), e.value, e.time_ms});
    }
  }
}

}  // namespace ncclwatch::aggregator

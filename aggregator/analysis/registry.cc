#include "aggregator/analysis/registry.h"

#include <algorithm>
#include <iterator>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "proto/inspector.h"

namespace ncclwatch::aggregator {

CommEntry* CommRegistry::Record(const CommKey& key, const ncclwatch::v1::RankIdentity& id,
                                int64_t now_ns, const std::string& source, bool* restarted,
                                bool* new_process, RankWho** rank_out) {
  *restarted = false;
  auto indexed = index_.find(key);
  auto found = indexed == index_.end() ? comms_.end() : indexed->second;
  if (found == comms_.end()) {
    auto job = comms_per_job_.find(key.job_id);
    const bool new_job = job == comms_per_job_.end();
    if (new_job && comms_per_job_.size() >= options_.max_jobs) {
      ++capped_jobs_;
      return nullptr;
    }
    if (!new_job && job->second >= options_.max_comms_per_job) {
      ++capped_comms_;
      return nullptr;
    }
    auto count = [](const std::map<std::string, size_t>& counts, const std::string& source) {
      auto it = counts.find(source);
      return it == counts.end() ? size_t{0} : it->second;
    };
    if (new_job && count(jobs_per_source_, source) >= options_.max_jobs_per_source) {
      ++capped_source_jobs_;
      capped_sources_.insert(source);
      return nullptr;
    }
    if (count(comms_per_source_, source) >= options_.max_comms_per_source) {
      ++capped_source_comms_;
      capped_sources_.insert(source);
      return nullptr;
    }
    if (new_job) {
      ++jobs_per_source_[source];
      job_source_[key.job_id] = source;
    }
    ++comms_per_source_[source];
    comm_source_[key] = source;
    ++comms_per_job_[key.job_id];
    found = comms_.try_emplace(key).first;
    index_.emplace(key, found);
  }
  CommEntry& entry = found->second;
  const bool was_incomplete = entry.unreported > 0;
  CommWho& who = entry.who;
  if (who.nranks != id.nranks()) {
    who.nranks = id.nranks();
    who.ranks.clear();
    entry.rank_index.clear();
    entry.ranks_by_node.reset();
    entry.newest_seen_ns = 0;
    entry.first_seen_ns = now_ns;
    entry.unreported = id.nranks();
    entry.flagged_since_ns.clear();
    entry.finalized.clear();
    entry.bogus_timings.clear();
    entry.completions_lost.clear();
    *restarted = true;
  }
  bool inserted = false;
  RankWho* known = nullptr;
  if (auto indexed_rank = entry.rank_index.find(id.rank());
      indexed_rank != entry.rank_index.end()) {
    known = indexed_rank->second;
  } else {
    auto added = who.ranks.try_emplace(id.rank());
    inserted = added.second;
    known = &added.first->second;
    entry.rank_index.emplace(id.rank(), known);
    if (inserted) --entry.unreported;
  }
  RankWho& rank = *known;
  // Nearly every report is of a known rank with the same identity: hashed from the report (whose
  // strings were just parsed), not compared field by field with what is kept (cache misses at
  // 16,384 ranks), and nothing is copied.
  const int global_rank = id.has_global_rank() ? id.global_rank() : -1;
  const int local_rank = id.has_local_rank() ? id.local_rank() : -1;
  const uint64_t identity = absl::HashOf(
      id.comm_name(), id.n_nodes(), id.host(), id.node(), id.pid(), id.cuda_device(), global_rank,
      local_rank, id.gpu_uuid(), id.pod(), id.pod_namespace(), id.container());
  *new_process = inserted;
  if (inserted || *restarted || rank.identity_hash != identity) {
    const auto update = [](std::string& field, const std::string& value) {
      if (field != value) field.assign(value);
    };
    update(who.comm_name, id.comm_name());
    who.n_nodes = id.n_nodes();
    // A new process, or the same one seen from another node: what the rank's process and node
    // are known by elsewhere (Analyzer::Ingest) is set again.
    *new_process = inserted || rank.pid != id.pid() || rank.cuda_device != id.cuda_device() ||
                   rank.host != id.host() || rank.node != id.node();
    if (*new_process) {
      rank.host = id.host();
      rank.node = id.node();
      entry.ranks_by_node.reset();
    }
    rank.pid = id.pid();
    rank.cuda_device = id.cuda_device();
    rank.global_rank = global_rank;
    rank.local_rank = local_rank;
    update(rank.gpu_uuid, id.gpu_uuid());
    update(rank.pod, id.pod());
    update(rank.pod_namespace, id.pod_namespace());
    update(rank.container, id.container());
    rank.identity_hash = identity;
    rank.labels_hash = absl::HashOf(who.comm_name, rank.node, rank.cuda_device, rank.global_rank);
  }
  rank.last_seen_ns = now_ns;
  entry.newest_seen_ns = std::max(entry.newest_seen_ns, now_ns);
  incomplete_comms_ += (entry.unreported > 0 ? 1 : 0) - (was_incomplete ? 1 : 0);
  *rank_out = &rank;
  return &entry;
}

const std::vector<int>& CommEntry::RanksOnNode(const std::string& node) const {
  if (!ranks_by_node) {
    ranks_by_node.emplace();
    for (const auto& [r, rank] : who.ranks) (*ranks_by_node)[rank.node].push_back(r);
  }
  static const std::vector<int> kNone;
  auto it = ranks_by_node->find(node);
  return it == ranks_by_node->end() ? kNone : it->second;
}

const std::string& CommEntry::NodeOf(int rank) const {
  static const std::string kUnknown;
  auto it = rank_index.find(rank);
  return it == rank_index.end() ? kUnknown : it->second->node;
}

const CommEntry* CommRegistry::Find(const CommKey& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &it->second->second;
}

const CommWho* CommRegistry::FindWho(const CommKey& key) const {
  const CommEntry* entry = Find(key);
  return entry == nullptr ? nullptr : &entry->who;
}

void CommRegistry::Erase(std::map<CommKey, CommEntry>::iterator it,
                         const std::function<void(const CommKey&)>& forget) {
  const CommKey key = it->first;
  forget(key);
  if (it->second.unreported > 0) --incomplete_comms_;
  index_.erase(key);
  comms_.erase(it);
  // Each count drops with what it counted; a source whose counts reach zero is forgotten.
  auto release = [](std::map<std::string, size_t>& counts, const std::string& source) {
    if (auto c = counts.find(source); c != counts.end() && --c->second == 0) counts.erase(c);
  };
  if (auto comm = comm_source_.find(key); comm != comm_source_.end()) {
    release(comms_per_source_, comm->second);
    comm_source_.erase(comm);
  }
  if (auto job = comms_per_job_.find(key.job_id);
      job != comms_per_job_.end() && --job->second == 0) {
    comms_per_job_.erase(job);
    if (auto owner = job_source_.find(key.job_id); owner != job_source_.end()) {
      release(jobs_per_source_, owner->second);
      job_source_.erase(owner);
    }
  }
}

void CommRegistry::Expire(int64_t now_ns, const std::function<void(const CommKey&)>& forget) {
  for (auto it = comms_.begin(); it != comms_.end();) {
    // Alive while any rank reported within the TTL: while its newest report did.
    if (now_ns - it->second.newest_seen_ns <= options_.ttl_ns) {
      ++it;
      continue;
    }
    auto next = std::next(it);
    Erase(it, forget);
    it = next;
  }
}

void CommRegistry::EraseJob(const std::string& job_id,
                            const std::function<void(const CommKey&)>& forget) {
  auto it = comms_.lower_bound(CommKey{job_id, 0});
  while (it != comms_.end() && it->first.job_id == job_id) {
    auto next = std::next(it);
    Erase(it, forget);
    it = next;
  }
}

std::vector<const std::pair<const CommKey, CommEntry>*> CommRegistry::JobComms(
    const std::string& job_id) const {
  std::vector<const std::pair<const CommKey, CommEntry>*> out;
  for (auto it = comms_.lower_bound(CommKey{job_id, 0});
       it != comms_.end() && it->first.job_id == job_id; ++it) {
    out.push_back(&*it);
  }
  return out;
}

LabelPairs CommRegistry::CommLabels(const CommKey& key, const CommWho& who) {
  return {{"job_id", key.job_id},
          {"comm_hash", CommHashText(key.comm_hash)},
          {"comm_name", OrUnknown(who.comm_name)}};
}

LabelPairs CommRegistry::RankLabels(const CommKey& key, const CommWho& who, int rank) {
  return RankLabels(CommLabels(key, who), who, rank);
}

LabelPairs CommRegistry::RankLabels(const LabelPairs& comm_labels, const CommWho& who, int rank) {
  const RankWho& r = who.Rank(rank);
  LabelPairs labels;
  labels.reserve(comm_labels.size() + 4);
  labels.insert(labels.end(), comm_labels.begin(), comm_labels.end());
  labels.emplace_back("rank", absl::StrCat(rank));
  labels.emplace_back("node", OrUnknown(r.node));
  labels.emplace_back("gpu", GpuLabel(r.cuda_device));
  // The training's own rank, the number on-call knows the GPU by (absent when unknown).
  if (r.global_rank >= 0) labels.emplace_back("global_rank", absl::StrCat(r.global_rank));
  return labels;
}

}  // namespace ncclwatch::aggregator

// The communicators the analyzer knows: who each rank is (CommWho), when each rank last reported,
// and the caps that bound how many jobs and communicators are analysed at once: in all, per job,
// and per source (the agent that sent the report, as the aggregator authenticated it: one source
// filling the caps cannot lock out every other node's jobs).
//
// Not thread-safe: the Analyzer serialises calls.
#ifndef NCCLWATCH_AGGREGATOR_ANALYSIS_REGISTRY_H_
#define NCCLWATCH_AGGREGATOR_ANALYSIS_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "aggregator/detect/types.h"
#include "aggregator/findings/who.h"
#include "common/prom_text.h"
#include "ncclwatch/v1/report.pb.h"

namespace ncclwatch::aggregator {

struct RegistryOptions {
  size_t max_jobs = 4096;
  size_t max_comms_per_job = 16384;
  // A source introduces a job (or communicator) when it sends its first report.
  size_t max_jobs_per_source = 256;
  size_t max_comms_per_source = 4096;
  int64_t ttl_ns = 600'000'000'000;  // a communicator silent this long is gone
};

// One communicator.
struct CommEntry {
  CommWho who;
  // The ranks that reported are who.ranks (each with its last report, RankWho::last_seen_ns).
  int64_t newest_seen_ns = 0;                      // the newest report of any rank
  int64_t first_seen_ns = 0;                       // its first report (of any rank)
  int unreported = 0;                              // ranks that never reported
  absl::btree_map<int, int64_t> flagged_since_ns;  // straggler ranks -> when flagged
  std::set<int> finalized;                         // ranks that sent their final report
  // Ranks whose plugin left operations out for impossible GPU timestamps -> how many (cumulative,
  // as last reported; DropCounters.bogus_timings).
  absl::btree_map<int, uint64_t> bogus_timings;
  // Per rank, its operations whose completion never arrived (DropCounters.completions_lost, as
  // last reported: they are counted while missing).
  absl::btree_map<int, uint64_t> completions_lost;
  // Every rank that reported has sent its final report: NCCL finalized it everywhere.
  bool Finished() const { return !who.ranks.empty() && finalized.size() == who.ranks.size(); }
  // When `rank` was flagged late (0: it is not).
  int64_t FlaggedSince(int rank) const {
    auto it = flagged_since_ns.find(rank);
    return it == flagged_since_ns.end() ? 0 : it->second;
  }
  // Its plugin reports own times: root-cause findings page for it; its lateness flags are
  // consequences (without own times, an older plugin, the lateness flags page themselves).
  bool own_times = false;
  // who.ranks hashed (the registry's): every report finds its rank with one probe, not a walk
  // down a tree whose nodes are each a cache miss at 16,384 ranks.
  absl::flat_hash_map<int, RankWho*> rank_index;
  // Where the correlator, the lateness and the own-time analysis keep the communicator's state,
  // cached between its reports (detect/types.h). Meaningless outside the registry's copy.
  CachedSlot joining;
  CachedSlot lateness;
  CachedSlot own_time;
  // Raised (Analyzer, from one counter of all communicators) whenever what the tick's
  // origin-not-found pass reads of this communicator may have changed: a collective completed
  // (lateness, flags, own times) or a rank joined or moved. The pass keeps its answer until then.
  uint64_t stamp = 0;
  // The ranks that reported from `node`, ascending: indexed the first time it is asked and again
  // after a rank joins or moves (the registry drops the index then). The origin-not-found pass
  // asks it of communicators half of whose ranks are late each tick; a walk of every rank, keyed
  // by node name, was a third of the tick in a healthy 16,384-rank job.
  const std::vector<int>& RanksOnNode(const std::string& node) const;
  // The node rank `rank` reported from; empty when it has not reported (one probe of rank_index).
  const std::string& NodeOf(int rank) const;
  mutable std::optional<absl::flat_hash_map<std::string, std::vector<int>>> ranks_by_node;
};

class CommRegistry {
 public:
  explicit CommRegistry(RegistryOptions options) : options_(options) {}

  // Records that rank `id.rank()` of `key` reported at `now_ns`, sent by `source`. Returns its
  // communicator, or nullptr (counted) when it is new and beyond --max-jobs, --max-comms-per-job,
  // or the jobs or communicators `source` introduced beyond --max-{jobs,comms}-per-agent: such
  // reports are not analysed. `*restarted` is set when the communicator is new, or came back
  // with another size under the same hash: whatever was kept about it must start over.
  // `*new_process` is set when the rank is new or another process (host, pid, CUDA device), or
  // on another node, than it last was. `*rank` is set to the rank's entry in the communicator's
  // `who` (valid until the next Record or Expire).
  CommEntry* Record(const CommKey& key, const ncclwatch::v1::RankIdentity& id, int64_t now_ns,
                    const std::string& source, bool* restarted, bool* new_process, RankWho** rank);
  const CommEntry* Find(const CommKey& key) const;
  // How many communicators have a rank that never reported (kept as reports come: the tick asks).
  size_t incomplete_comms() const { return incomplete_comms_; }
  const CommWho* FindWho(const CommKey& key) const;
  // Forgets every communicator none of whose ranks reported within the TTL (its job ended or
  // died), calling `forget` with each key first.
  void Expire(int64_t now_ns, const std::function<void(const CommKey&)>& forget);
  // Forgets every communicator of `job_id` (it ended), calling `forget` with each key first.
  void EraseJob(const std::string& job_id, const std::function<void(const CommKey&)>& forget);
  // The communicators of `job_id`, in hash order.
  std::vector<const std::pair<const CommKey, CommEntry>*> JobComms(const std::string& job_id) const;

  const std::map<CommKey, CommEntry>& comms() const { return comms_; }
  uint64_t capped_jobs() const { return capped_jobs_; }
  uint64_t capped_comms() const { return capped_comms_; }
  uint64_t capped_source_jobs() const { return capped_source_jobs_; }
  uint64_t capped_source_comms() const { return capped_source_comms_; }
  // Sources that have hit a per-source cap at least once (for a log line when one first does).
  bool SourceCapped(const std::string& source) const { return capped_sources_.contains(source); }

  // The labels that name rank `rank` of a communicator on every per-rank series:
  // job_id, comm_hash, comm_name, rank, node, gpu.
  static LabelPairs RankLabels(const CommKey& key, const CommWho& who, int rank);
  // The same from the communicator's CommLabels, made once for all of its ranks.
  static LabelPairs RankLabels(const LabelPairs& comm_labels, const CommWho& who, int rank);
  // job_id, comm_hash, comm_name.
  static LabelPairs CommLabels(const CommKey& key, const CommWho& who);

 private:
  // Forgets one communicator: `forget`, then every count that includes it.
  void Erase(std::map<CommKey, CommEntry>::iterator it,
             const std::function<void(const CommKey&)>& forget);

  const RegistryOptions options_;
  std::map<CommKey, CommEntry> comms_;  // in order: a job's communicators are a range
  // The same, hashed: the lookup of every report (std::map nodes stay where they are).
  absl::flat_hash_map<CommKey, std::map<CommKey, CommEntry>::iterator> index_;
  // comms_ counted by job: the caps' checks stay O(log n) when a flood of new job ids arrives.
  std::map<std::string, size_t> comms_per_job_;
  // Who introduced each job and communicator, and how many of each every source introduced.
  std::map<std::string, std::string> job_source_;
  std::map<CommKey, std::string> comm_source_;
  std::map<std::string, size_t> jobs_per_source_;
  std::map<std::string, size_t> comms_per_source_;
  std::set<std::string> capped_sources_;
  uint64_t capped_jobs_ = 0;
  size_t incomplete_comms_ = 0;  // incomplete_comms()
  uint64_t capped_comms_ = 0;
  uint64_t capped_source_jobs_ = 0;
  uint64_t capped_source_comms_ = 0;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_ANALYSIS_REGISTRY_H_

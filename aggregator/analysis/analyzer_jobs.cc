// The Analyzer's job-level findings (analyzer.h): root-cause GPUs with their consequences, hang
// origins, silent processes and coverage, from the rooms in aggregator/rootcause and
// aggregator/detect. Split from analyzer.cc, which feeds the detectors.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "aggregator/analysis/analyzer.h"
#include "aggregator/detect/rank_set.h"

namespace ncclwatch::aggregator {

RootCauseVerdicts::GpusOnNode Analyzer::GpusOnNodeLocked() const {
  return [this](const std::string& job, const std::string& node)
             ABSL_NO_THREAD_SAFETY_ANALYSIS {  // called within the caller's lock
               return own_time_.ProcessesOnNode(job, node);
             };
}

void Analyzer::HangEventsLocked(int64_t now_ns, std::vector<ncclwatch::v1::Event>* events) {
  std::vector<HangGroup> groups = GroupHangsByOrigin(
      detectors_.hangs.Hangs(), processes_,
      [this](const CommKey& comm, int rank) ABSL_NO_THREAD_SAFETY_ANALYSIS {  // within our lock
        return detectors_.hangs.InFlightOf(comm, rank);
      });
  for (const HangGroupChange& change : hang_origins_.Update(std::move(groups))) {
    const HangView& origin = change.group.origin;
    events->push_back(HangOriginEvent(change.start, origin, registry_.FindWho(origin.comm),
                                      HangInfosLocked(change.group.consequences, now_ns), now_ns));
  }
}

void Analyzer::SilentEventLocked(const HangChange& change, int64_t now_ns,
                                 std::vector<ncclwatch::v1::Event>* events) {
  const CommKey& comm = change.rank.comm;
  const ProcessKey* p = processes_.Of(comm, change.rank.rank);
  if (p == nullptr) {  // who it is is unknown: one finding per communicator rank
    events->push_back(HangEvent(change, registry_.FindWho(comm), now_ns));
    return;
  }
  // A process that stopped is silent in every communicator it has: one finding, from the first.
  std::set<CommKey>& comms = silent_processes_[*p];
  const bool first = comms.empty();
  if (change.start) {
    comms.insert(comm);
    if (first) events->push_back(HangEvent(change, registry_.FindWho(comm), now_ns));
    return;
  }
  comms.erase(comm);
  if (comms.empty()) {
    if (!first) events->push_back(HangEvent(change, registry_.FindWho(comm), now_ns));
    silent_processes_.erase(*p);
  }
}

void Analyzer::CoverageEventsLocked(int64_t now_ns, std::vector<ncclwatch::v1::Event>* events) {
  // Only the jobs with a rank that never reported need a view (and every communicator of
  // those, for the nodes that do report); the others are complete. With none, and no gap open
  // to close, there is nothing to walk (every tick, thousands of communicators in a large job).
  if (registry_.incomplete_comms() == 0 && detectors_.coverage.gaps().empty()) return;
  std::set<std::string> gaps;
  for (const auto& [key, entry] : registry_.comms()) {
    if (entry.unreported > 0) gaps.insert(key.job_id);
  }
  std::vector<CommCoverage> comms;
  for (const auto& [key, entry] : registry_.comms()) {
    if (!gaps.count(key.job_id)) continue;
    CommCoverage& c = comms.emplace_back();
    c.comm = key;
    c.comm_name = entry.who.comm_name;
    c.nranks = entry.who.nranks;
    c.n_nodes = entry.who.n_nodes;
    c.first_report_ns = entry.first_seen_ns;
    c.unreported_count = entry.unreported;
    AppendAbsentRanks(entry.who.ranks, entry.who.nranks, kMaxNamedRanks, &c.unreported);
    for (const auto& [r, who] : entry.who.ranks) {
      if (!who.node.empty()) c.reporting.insert(who.node);
    }
  }
  for (const CoverageChange& change : detectors_.coverage.Evaluate(comms, now_ns)) {
    events->push_back(CoverageEvent(change, now_ns));
  }
}

void Analyzer::VerdictEventsLocked(const VerdictChanges& changes, int64_t now_ns,
                                   std::vector<ncclwatch::v1::Event>* events) {
  if (changes.empty()) return;
  // A root cause found replaces the job's origin-not-found pages: they end before it starts.
  std::set<std::string> found;
  for (const GpuChange& change : changes.gpus) {
    if (change.start) found.insert(change.gpu.evidence.process.job_id);
  }
  for (const NodeChange& change : changes.nodes) {
    if (change.start) found.insert(change.job_id);
  }
  for (const std::string& job : found)
    EndUnexplainedLocked(job, kEndRootCauseFound, now_ns, events);
  // The late ranks of each job concerned, by root cause: computed once per job.
  std::map<std::string, std::map<ProcessKey, std::vector<ncclwatch::v1::StragglerInfo>>> by_job;
  for (const GpuChange& change : changes.gpus) {
    const ProcessKey& p = change.gpu.evidence.process;
    auto job = by_job.find(p.job_id);
    if (job == by_job.end()) job = by_job.emplace(p.job_id, ConsequencesLocked(p.job_id)).first;
    events->push_back(RootCauseEvent(change, registry_.FindWho(change.gpu.evidence.comm),
                                     job->second[p], now_ns));
  }
  for (const NodeChange& change : changes.nodes) {
    events->push_back(SlowGpusNodeEvent(change, now_ns));
  }
}

CommHealth Analyzer::HealthLocked(const CommKey& key, const CommEntry& entry) const {
  CommHealth health;
  health.silent_ranks = detectors_.hangs.SilentRanks(key);
  if (entry.own_times) {
    for (const auto& [p, gpu] : verdicts_.gpus()) health.stragglers += gpu.evidence.comm == key;
    if (auto pages = unexplained_.find(key.job_id); pages != unexplained_.end()) {
      for (const UnexplainedPage& page : pages->second) {
        for (const auto& member : page.members) health.stragglers += member.first == key;
      }
    }
  } else {
    for (const RankScore& s : detectors_.stragglers.Scores(key)) {
      health.stragglers += s.flagged ? 1 : 0;
    }
  }
  health.hung = detectors_.hangs.Hung(key);
  if (detectors_.coverage.Incomplete(key)) health.unreported = entry.unreported;
  health.degraded = detectors_.degraded.IsDegraded(key);
  return health;
}

ncclwatch::v1::CommInfo Analyzer::CommInfoLocked(const CommKey& key, const CommEntry& entry,
                                                 CommHealth* health) const {
  *health = HealthLocked(key, entry);
  ncclwatch::v1::CommInfo info = CommInfoOf(key, entry.who, entry.newest_seen_ns, *health);
  uint64_t bogus = 0;
  for (const auto& [rank, n] : entry.bogus_timings) bogus += n;
  info.set_bogus_timings(bogus);
  uint64_t lost = 0;
  for (const auto& [rank, n] : entry.completions_lost) lost += n;
  info.set_completions_lost(lost);
  for (const WorkloadImbalance& w : own_time_.Imbalances(key)) {
    auto* out = info.add_workload_imbalance();
    out->set_op(w.op);
    out->set_bytes(w.bytes);
    out->set_wait_seconds(w.wait_ns * 1e-9);
    out->set_own_time_seconds(w.own_time_ns * 1e-9);
  }
  return info;
}

const ProcessKey* Analyzer::ReportedInLocked(const CommKey& comm) const {
  for (const auto& [r, p] : processes_.Members(comm)) {
    if (verdicts_.IsReported(p)) return &p;
  }
  return nullptr;
}

std::map<ProcessKey, std::vector<ncclwatch::v1::StragglerInfo>> Analyzer::ConsequencesLocked(
    const std::string& job_id) const {
  std::map<ProcessKey, std::vector<ncclwatch::v1::StragglerInfo>> out;
  std::map<std::string, const ProcessKey*> first;  // by job: the earliest reported GPU
  for (const auto& [p, gpu] : verdicts_.gpus()) {
    const ProcessKey*& f = first[p.job_id];
    if (f == nullptr || gpu.since_ns < verdicts_.gpus().at(*f).since_ns) f = &p;
  }
  // A reported GPU of each communicator, looked up once per call: a slow GPU of a large job has
  // hundreds of late ranks in communicators of thousands of members.
  std::map<CommKey, const ProcessKey*> reported_in;
  auto reported = [&](const CommKey& comm) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto [it, added] = reported_in.try_emplace(comm, nullptr);
    if (added) it->second = ReportedInLocked(comm);
    return it->second;
  };
  for (const auto& [key, entry] : registry_.comms()) {
    if (!job_id.empty() && key.job_id != job_id) continue;
    for (const RankScore& score : detectors_.stragglers.Scores(key)) {
      if (!score.flagged) continue;
      const ProcessKey* late = processes_.Of(key, score.rank);
      if (late != nullptr && verdicts_.IsReported(*late)) continue;  // a root cause itself
      const ProcessKey* root = reported(key);
      if (root == nullptr && late != nullptr) {
        for (const auto& [comm, rank] : processes_.RanksOf(*late)) {
          if ((root = reported(comm)) != nullptr) break;
        }
      }
      if (root == nullptr) {
        auto f = first.find(key.job_id);
        if (f == first.end()) continue;  // no root cause in this job (yet)
        root = f->second;
      }
      out[*root].push_back(StragglerInfoOf(key, entry.who, score, entry.FlaggedSince(score.rank)));
    }
  }
  return out;
}

std::vector<ncclwatch::v1::HangInfo> Analyzer::HangInfosLocked(const std::vector<HangView>& hangs,
                                                               int64_t now_ns) const {
  std::vector<ncclwatch::v1::HangInfo> out;
  for (const HangView& h : hangs) out.push_back(HangInfoOf(h, registry_.FindWho(h.comm), now_ns));
  return out;
}

std::map<std::string, ncclwatch::v1::JobInfo> Analyzer::JobInfosLocked(
    const std::string& job_id) const {
  std::map<std::string, ncclwatch::v1::JobInfo> jobs;  // by id: the answer is sorted
  std::map<std::string, std::set<std::string>> nodes;
  for (const auto& [key, entry] : registry_.comms()) {
    if (!job_id.empty() && key.job_id != job_id) continue;
    CommHealth health;
    const ncclwatch::v1::CommInfo c = CommInfoLocked(key, entry, &health);
    ncclwatch::v1::JobInfo& j = jobs[key.job_id];
    j.set_job_id(key.job_id);
    j.set_state("running");
    j.set_communicators(j.communicators() + 1);
    j.set_ranks(std::max<uint32_t>(j.ranks(), static_cast<uint32_t>(c.nranks())));
    j.set_last_report_unix_ns(std::max(j.last_report_unix_ns(), c.last_report_unix_ns()));
    j.set_stragglers(j.stragglers() + health.stragglers);
    j.set_silent_ranks(j.silent_ranks() + health.silent_ranks);
    j.set_hung_communicators(j.hung_communicators() + (health.hung ? 1 : 0));
    j.set_degraded_communicators(j.degraded_communicators() + (health.degraded ? 1 : 0));
    j.set_unreported_ranks(std::max<uint32_t>(j.unreported_ranks(), health.unreported));
    if (c.workload_imbalance_size() > 0)
      j.set_imbalanced_communicators(j.imbalanced_communicators() + 1);
    for (const auto& w : c.workload_imbalance()) {
      if (!j.has_costliest_imbalance() ||
          ImbalanceShare(w) > ImbalanceShare(j.costliest_imbalance())) {
        *j.mutable_costliest_imbalance() = w;
        j.mutable_costliest_imbalance()->set_comm_name(c.comm_name());
      }
    }
    for (const auto& r : c.ranks()) {
      if (!r.node().empty()) nodes[key.job_id].insert(r.node());
    }
  }
  for (auto& [id, j] : jobs) {
    for (const auto& n : nodes[id]) j.add_nodes(n);
  }
  return jobs;
}

}  // namespace ncclwatch::aggregator

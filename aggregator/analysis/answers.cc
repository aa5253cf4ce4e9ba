// The analyzer's read side (answers.h): the Query API's answers from the live state, under the
// analyzer's lock. Moved out of analyzer.cc, which is the write side.
#include "aggregator/analysis/answers.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace ncclwatch::aggregator {

Answers Analyzer::answers() const { return Answers(*this); }

std::vector<SlowProcess> Answers::SlowProcesses(const std::string& job_id) const {
  ncclwatch::MutexLock lock(&a_.mu_);
  return a_.own_time_.Slow(job_id);
}

std::vector<ncclwatch::v1::RootCauseInfo> Answers::RootCauses(const std::string& job_id) const {
  ncclwatch::MutexLock lock(&a_.mu_);
  std::vector<const ReportedGpu*> gpus;
  for (const auto& [p, gpu] : a_.verdicts_.gpus()) {
    if (job_id.empty() || p.job_id == job_id) gpus.push_back(&gpu);
  }
  std::sort(gpus.begin(), gpus.end(), [](const ReportedGpu* a, const ReportedGpu* b) {
    return std::tie(a->evidence.process.job_id, a->since_ns, a->evidence.process) <
           std::tie(b->evidence.process.job_id, b->since_ns, b->evidence.process);
  });
  auto consequences = a_.ConsequencesLocked(job_id);
  std::vector<ncclwatch::v1::RootCauseInfo> out;
  for (const ReportedGpu* gpu : gpus) {
    // The evidence it was reported with, its figures now, while that collective still shows
    // it slow (so that two queries cite the same one); else the strongest now; else as reported.
    SlowProcess now = a_.own_time_.ViewKeeping(gpu->evidence);
    if (now.rank < 0) now = gpu->evidence;
    ncclwatch::v1::RootCauseInfo info = RootCauseInfoOf(now, a_.registry_.FindWho(now.comm));
    info.set_since_unix_ns(gpu->since_ns);
    for (auto& c : consequences[gpu->evidence.process]) *info.add_consequences() = std::move(c);
    out.push_back(std::move(info));
  }
  return out;
}

std::vector<ncclwatch::v1::StragglerInfo> Answers::Stragglers(const std::string& job_id) const {
  ncclwatch::MutexLock lock(&a_.mu_);
  std::vector<ncclwatch::v1::StragglerInfo> out;
  for (const auto& [key, entry] : a_.registry_.comms()) {
    // With own times, lateness is a consequence: answered under its root cause, or below.
    if ((!job_id.empty() && key.job_id != job_id) || entry.own_times) continue;
    for (const RankScore& score : a_.detectors_.stragglers.Notable(key)) {
      if (score.flagged) {
        out.push_back(StragglerInfoOf(key, entry.who, score, entry.FlaggedSince(score.rank)));
      }
    }
  }
  // Late ranks paging with no origin found (a node's ranks are under slow_nodes).
  for (const auto& [job, pages] : a_.unexplained_) {
    if (!job_id.empty() && job != job_id) continue;
    for (const Analyzer::UnexplainedPage& page : pages) {
      if (page.start.kind() != ncclwatch::v1::Event::STRAGGLER) continue;
      const auto& [comm, rank] = page.members.front();
      const CommEntry* entry = a_.registry_.Find(comm);
      std::optional<RankScore> now;
      for (const RankScore& s : a_.detectors_.stragglers.Notable(comm)) {
        if (s.rank == rank) now = s;
      }
      ncclwatch::v1::StragglerInfo info =
          now && entry != nullptr
              ? StragglerInfoOf(comm, entry->who, *now, entry->FlaggedSince(rank))
              : page.start.straggler();
      info.set_origin_not_found(true);
      out.push_back(std::move(info));
    }
  }
  return out;
}

ncclwatch::v1::ListDegradedResponse Answers::Degraded(const std::string& job_id) const {
  ncclwatch::MutexLock lock(&a_.mu_);
  ncclwatch::v1::ListDegradedResponse out;
  for (const DegradedView& v : a_.detectors_.degraded.Degraded()) {
    if (job_id.empty() || v.comm.job_id == job_id) {
      *out.add_comms() = DegradedInfoOf(v, a_.registry_.FindWho(v.comm));
    }
  }
  for (const SuspectView& s : a_.detectors_.degraded.Suspects()) {
    if (job_id.empty() || s.job_id == job_id) *out.add_suspects() = SuspectInfoOf(s);
  }
  return out;
}

ncclwatch::v1::ListHangsResponse Answers::Hangs(const std::string& job_id, int64_t now_ns) const {
  ncclwatch::MutexLock lock(&a_.mu_);
  ncclwatch::v1::ListHangsResponse out;
  for (const auto& [comm, group] : a_.hang_origins_.origins()) {
    if (job_id.empty() || comm.job_id == job_id) {
      ncclwatch::v1::HangInfo info = HangInfoOf(group.origin, a_.registry_.FindWho(comm), now_ns);
      for (auto& c : a_.HangInfosLocked(group.consequences, now_ns)) {
        *info.add_consequences() = std::move(c);
      }
      *out.add_hangs() = std::move(info);
    }
  }
  for (const SilentView& s : a_.detectors_.hangs.Silent()) {
    if (job_id.empty() || s.comm.job_id == job_id) {
      *out.add_silent() = SilentInfoOf(s, a_.registry_.FindWho(s.comm));
    }
  }
  for (const SilentNodeView& n : a_.detectors_.silent_nodes.Silent()) {
    if (job_id.empty() || n.job_id == job_id) *out.add_silent_nodes() = NodeSilentInfoOf(n);
  }
  return out;
}

std::vector<ncclwatch::v1::CommInfo> Answers::Comms(const std::string& job_id) const {
  ncclwatch::MutexLock lock(&a_.mu_);
  std::vector<ncclwatch::v1::CommInfo> out;
  for (const auto& [key, entry] : a_.registry_.comms()) {
    if (!job_id.empty() && key.job_id != job_id) continue;
    CommHealth health;
    out.push_back(a_.CommInfoLocked(key, entry, &health));
  }
  // Ended jobs' communicators as they ended, for as long as `jobs` lists them.
  for (const auto& [id, info] : a_.lifecycle_.ended()) {
    if (!job_id.empty() && id != job_id) continue;
    const auto& kept = a_.lifecycle_.EndedComms(id);
    out.insert(out.end(), kept.begin(), kept.end());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::make_tuple(a.job_id(), a.comm_name(), a.comm_hash()) <
           std::make_tuple(b.job_id(), b.comm_name(), b.comm_hash());
  });
  return out;
}

std::vector<ncclwatch::v1::JobInfo> Answers::Jobs() const {
  ncclwatch::MutexLock lock(&a_.mu_);
  std::map<std::string, ncclwatch::v1::JobInfo> jobs = a_.JobInfosLocked("");
  for (const auto& [id, info] : a_.lifecycle_.ended()) jobs.try_emplace(id, info);
  std::vector<ncclwatch::v1::JobInfo> out;
  for (auto& [id, j] : jobs) out.push_back(std::move(j));
  return out;
}

std::vector<ncclwatch::v1::NodeStragglerInfo> Answers::SlowNodes(const std::string& job_id) const {
  ncclwatch::MutexLock lock(&a_.mu_);
  std::vector<ncclwatch::v1::NodeStragglerInfo> out;
  for (const auto& start : a_.lifecycle_.Open(ncclwatch::v1::Event::NODE_STRAGGLER, job_id)) {
    out.push_back(start.node_straggler());
  }
  return out;
}

}  // namespace ncclwatch::aggregator

// The Analyzer's jobs (analyzer.h): the running ones from the registry, the ended ones from the
// job lifecycle (job_lifecycle.h), and how a job ends. Split from analyzer.cc.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "aggregator/analysis/analyzer.h"
#include "common/rpc/backoff.h"

namespace ncclwatch::aggregator {

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
    for (const auto& r : c.ranks()) {
      if (!r.node().empty()) nodes[key.job_id].insert(r.node());
    }
  }
  for (auto& [id, j] : jobs) {
    for (const auto& n : nodes[id]) j.add_nodes(n);
  }
  return jobs;
}

std::vector<ncclwatch::v1::JobInfo> Analyzer::Jobs() const {
  ncclwatch::MutexLock lock(&mu_);
  std::map<std::string, ncclwatch::v1::JobInfo> jobs = JobInfosLocked("");
  for (const auto& [id, info] : lifecycle_.ended()) jobs.try_emplace(id, info);
  std::vector<ncclwatch::v1::JobInfo> out;
  for (auto& [id, j] : jobs) out.push_back(std::move(j));
  return out;
}

void Analyzer::EndJobLocked(const std::string& job_id, const std::string& why, int64_t now_ns,
                            std::vector<ncclwatch::v1::Event>* events) {
  // The job as it last ran: ended, its counts describe it while it ran.
  ncclwatch::v1::JobInfo info = std::move(JobInfosLocked(job_id)[job_id]);
  info.set_job_id(job_id);
  lifecycle_.End(info, why, now_ns, events);
  registry_.EraseJob(
      job_id, [this](const CommKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ForgetLocked(key); });
  verdicts_.ForgetJob(job_id);
}

std::vector<ncclwatch::v1::NodeStragglerInfo> Analyzer::SlowNodes(const std::string& job_id) const {
  ncclwatch::MutexLock lock(&mu_);
  std::vector<ncclwatch::v1::NodeStragglerInfo> out;
  for (const auto& start : lifecycle_.Open(ncclwatch::v1::Event::NODE_STRAGGLER, job_id)) {
    out.push_back(start.node_straggler());
  }
  return out;
}

void Analyzer::StartListening(int64_t now_ns) {
  ncclwatch::MutexLock lock(&mu_);
  listening_ns_ = now_ns;
  heard_from_ns_ = now_ns + absl::ToInt64Nanoseconds(absl::FromChrono(kPushRetryMaxDelay));
  detectors_.hangs.StartListening(listening_ns_, heard_from_ns_);
}

void Analyzer::EndSilentJobsLocked(int64_t now_ns, std::vector<ncclwatch::v1::Event>* events) {
  std::map<std::string, int64_t> last_seen;  // by job: its newest report
  for (const auto& [key, entry] : registry_.comms()) {
    int64_t& newest = last_seen[key.job_id];
    newest = std::max(newest, entry.newest_seen_ns);
  }
  for (const auto& [job, newest] : last_seen) {
    const int64_t heard = newest < listening_ns_ ? std::max(newest, heard_from_ns_) : newest;
    if (now_ns - heard <= job_end_silence_ns_) continue;
    EndJobLocked(job,
                 absl::StrCat("every rank silent for ", job_end_silence_ns_ / 1'000'000'000, " s"),
                 now_ns, events);
  }
}

}  // namespace ncclwatch::aggregator

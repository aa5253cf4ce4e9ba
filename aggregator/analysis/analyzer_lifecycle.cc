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

void Analyzer::EndJobLocked(const std::string& job_id, const std::string& why, int64_t now_ns,
                            std::vector<ncclwatch::v1::Event>* events) {
  // The job as it last ran: ended, its counts describe it while it ran.
  ncclwatch::v1::JobInfo info = std::move(JobInfosLocked(job_id)[job_id]);
  info.set_job_id(job_id);
  // Its communicators as they last were: `comms --job` answers with them while the job is listed.
  std::vector<ncclwatch::v1::CommInfo> comms;
  for (const auto* comm : registry_.JobComms(job_id)) {
    CommHealth health;
    comms.push_back(CommInfoLocked(comm->first, comm->second, &health));
  }
  lifecycle_.End(info, why, now_ns, events, std::move(comms));
  registry_.EraseJob(
      job_id, [this](const CommKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ForgetLocked(key); });
  verdicts_.ForgetJob(job_id);
  unexplained_.erase(job_id);  // ended with the job above
  for (auto it = beyond_since_.begin(); it != beyond_since_.end();) {
    it = it->first.first.job_id == job_id ? beyond_since_.erase(it) : std::next(it);
  }
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

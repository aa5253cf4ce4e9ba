// When a job ends, and what that does to its findings.
//
// A job ends when every rank that reported in each of its communicators has sent its final report
// (the plugin sends one when NCCL finalizes the communicator), or when every one of its ranks has
// been silent for the end-after-silence time (the job was killed, or its nodes went away). Every
// finding of the job still open then gets its END event at once, with the reason "job ended", so
// that alerts resolve instead of waiting for the job's state to expire; the job is then listed as
// ended, with when and why, until it has been ended for an hour.
//
// The lifecycle sees every detection event the analysis emits: a START is remembered as open, its
// END closes it (and gets the reason "fault cleared"). ENDs that the detectors would derive later
// for findings the job's end already closed are dropped, so that each finding ends once.
//
// Not thread-safe: the Analyzer serialises calls.
#ifndef NCCLWATCH_AGGREGATOR_ANALYSIS_JOB_LIFECYCLE_H_
#define NCCLWATCH_AGGREGATOR_ANALYSIS_JOB_LIFECYCLE_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ncclwatch/v1/query.pb.h"

namespace ncclwatch::aggregator {

inline constexpr char kEndFaultCleared[] = "fault cleared";
inline constexpr char kEndJobEnded[] = "job ended";
// An origin-not-found page replaced by the root cause found since (rootcause/unexplained.h).
inline constexpr char kEndRootCauseFound[] = "root cause found";

struct JobLifecycleOptions {
  int64_t ended_ttl_ns = 3'600'000'000'000;  // how long an ended job stays listed
  size_t max_ended = 4096;                   // ended jobs listed at most (the oldest go first)
  // Communicators of ended jobs kept readable at most, over all of them (~0.3 KiB each: 20 MiB);
  // beyond it the oldest jobs' go first (the jobs stay listed).
  size_t max_ended_comms = 65536;
};

class JobLifecycle {
 public:
  explicit JobLifecycle(JobLifecycleOptions options = {}) : options_(options) {}

  // Passes the analysis' `events` through in order: a START opens its finding, an END closes it
  // and is given the reason "fault cleared"; an END of a finding the job's end closed already is
  // removed.
  void Filter(std::vector<ncclwatch::v1::Event>* events);

  // `last` (the job as last seen running) ended at `now_ns` because of `why`: appends an END for
  // each of its open findings (reason "job ended", `why` in the summary) and lists it as ended,
  // with `comms`, its communicators as they last were (kept as long as the job is listed, each
  // with health "ended" or "ended, was <health>").
  void End(const ncclwatch::v1::JobInfo& last, const std::string& why, int64_t now_ns,
           std::vector<ncclwatch::v1::Event>* events,
           std::vector<ncclwatch::v1::CommInfo> comms = {});
  // The job reports again (e.g. restarted under the same id): it is running, not ended.
  void Resume(const std::string& job_id);
  // Forgets ended jobs past the TTL.
  void Expire(int64_t now_ns);

  // The ended jobs, by id, each as last seen running plus state "ended", when and why.
  const std::map<std::string, ncclwatch::v1::JobInfo>& ended() const { return ended_; }
  bool IsEnded(const std::string& job_id) const { return ended_.count(job_id) > 0; }
  // The communicators of ended job `job_id` as it ended (empty when it is not ended).
  const std::vector<ncclwatch::v1::CommInfo>& EndedComms(const std::string& job_id) const;
  size_t open_findings() const { return open_.size(); }
  // The STARTs of the open findings of `kind`, of `job_id` (empty: every job), oldest first.
  std::vector<ncclwatch::v1::Event> Open(ncclwatch::v1::Event::Kind kind,
                                         const std::string& job_id) const;

 private:
  // What a finding is, whichever phase: the START's identity.
  static std::string FindingOf(const ncclwatch::v1::Event& event);

  const JobLifecycleOptions options_;
  std::map<std::string, ncclwatch::v1::Event> open_;            // by FindingOf: the START
  std::map<std::string, std::set<std::string>> closed_by_end_;  // by job: what its end closed
  std::map<std::string, ncclwatch::v1::JobInfo> ended_;
  std::map<std::string, std::vector<ncclwatch::v1::CommInfo>> ended_comms_;  // by job, as ended_
  size_t ended_comms_count_ = 0;                                             // over ended_comms_
  void Forget(const std::string& job_id);  // an ended job, and what was kept of it
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_ANALYSIS_JOB_LIFECYCLE_H_

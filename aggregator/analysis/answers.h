// The analyzer's read side: what the Query API answers from the live view — what is flagged now
// (stragglers and their root causes, slow nodes, hangs with what is stuck behind them, silent
// ranks and nodes, degraded communicators), the communicators and the jobs. The write side, which
// feeds the detectors and makes the events, is the Analyzer (analyzer.h); both work on its state
// under its one lock. A small value, made by Analyzer::answers(); valid while the analyzer is.
//
// Thread safety: every method takes the analyzer's lock, as the analyzer's own methods do.
#ifndef NCCLWATCH_AGGREGATOR_ANALYSIS_ANSWERS_H_
#define NCCLWATCH_AGGREGATOR_ANALYSIS_ANSWERS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "aggregator/analysis/analyzer.h"

namespace ncclwatch::aggregator {

class Answers {
 public:
  explicit Answers(const Analyzer& analyzer) : a_(analyzer) {}

  // Ranks flagged late right now in communicators without own times (those page themselves);
  // `job_id` empty means every job. With own times, late ranks are RootCauses' consequences.
  std::vector<ncclwatch::v1::StragglerInfo> Stragglers(const std::string& job_id) const
      ABSL_LOCKS_EXCLUDED(a_.mu_);
  // The root-cause findings (GPUs reported slow themselves), each with the late ranks it explains
  // (ranks flagged late by the straggler detector whose process is not slow itself), ordered by
  // job and when found.
  std::vector<ncclwatch::v1::RootCauseInfo> RootCauses(const std::string& job_id) const
      ABSL_LOCKS_EXCLUDED(a_.mu_);
  // GPUs the own-time analysis finds slow themselves now (aggregator/rootcause), before the
  // findings' hold; `job_id` empty: every job.
  std::vector<SlowProcess> SlowProcesses(const std::string& job_id) const
      ABSL_LOCKS_EXCLUDED(a_.mu_);
  // Nodes flagged slow right now (the open NODE_STRAGGLER findings); `job_id` empty: every job.
  std::vector<ncclwatch::v1::NodeStragglerInfo> SlowNodes(const std::string& job_id) const
      ABSL_LOCKS_EXCLUDED(a_.mu_);
  // Hung collectives (the origins, each with the hangs stuck behind it), silent ranks and silent
  // nodes right now; `job_id` empty means every job.
  ncclwatch::v1::ListHangsResponse Hangs(const std::string& job_id, int64_t now_ns) const
      ABSL_LOCKS_EXCLUDED(a_.mu_);
  // Degraded communicators and network suspects right now; `job_id` empty means every job.
  ncclwatch::v1::ListDegradedResponse Degraded(const std::string& job_id) const
      ABSL_LOCKS_EXCLUDED(a_.mu_);
  // Communicators (for `job_id`, or all) with their ranks and health now, by job then name.
  std::vector<ncclwatch::v1::CommInfo> Comms(const std::string& job_id) const
      ABSL_LOCKS_EXCLUDED(a_.mu_);
  // Jobs, summarised from their communicators; ended ones as they last ran.
  std::vector<ncclwatch::v1::JobInfo> Jobs() const ABSL_LOCKS_EXCLUDED(a_.mu_);

 private:
  const Analyzer& a_;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_ANALYSIS_ANSWERS_H_

// Coverage: communicators some of whose ranks never reported (docs/detection.md, "Coverage").
//
// A rank that never reports (no agent socket on its node, the plugin not loaded there, an agent
// that cannot reach the aggregator) leaves its communicators incomplete: no collective of theirs
// can be joined, so no straggler, root-cause or bandwidth verdict can be made about them, and
// they would otherwise say nothing at all. Once a communicator has had reports for `after_ns`
// while some of its ranks never sent one, its job has a coverage finding: which ranks of which
// communicators, and how many of the job's nodes report. One finding per job; it ends when every
// rank has reported (or the incomplete communicators are gone).
//
// Plain structs; not thread-safe (the Analyzer serialises calls).
#ifndef NCCLWATCH_AGGREGATOR_DETECT_COVERAGE_H_
#define NCCLWATCH_AGGREGATOR_DETECT_COVERAGE_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "aggregator/detect/types.h"

namespace ncclwatch::aggregator {

struct CoverageOptions {
  int64_t after_ns = 5'000'000'000;  // reports for this long, and still ranks never seen
};

// One communicator as coverage sees it.
struct CommCoverage {
  CommKey comm;
  std::string comm_name;
  int nranks = 0;
  int n_nodes = 0;                  // the nodes it spans (as its ranks report it)
  int unreported_count = 0;         // ranks that never reported
  std::vector<int> unreported;      // the first kMaxNamedRanks of them (rank_set.h)
  std::set<std::string> reporting;  // nodes of the ranks that did
  int64_t first_report_ns = 0;
};

// A job's coverage gap: its incomplete communicators, largest first.
struct CoverageView {
  std::string job_id;
  std::vector<CommCoverage> comms;
  std::set<std::string> reporting_nodes;  // every node of the job that reports
  int64_t since_ns = 0;
};

struct CoverageChange {
  bool start = false;
  CoverageView view;
};

class CoverageDetector {
 public:
  explicit CoverageDetector(CoverageOptions options = {}) : options_(options) {}

  // Judges every job from the communicators now (all of them, complete or not) at `now_ns`.
  std::vector<CoverageChange> Evaluate(const std::vector<CommCoverage>& comms, int64_t now_ns);
  const std::map<std::string, CoverageView>& gaps() const { return gaps_; }
  bool Incomplete(const CommKey& comm) const;

 private:
  const CoverageOptions options_;
  std::map<std::string, CoverageView> gaps_;  // by job
  std::set<CommKey> incomplete_;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_DETECT_COVERAGE_H_

#include "aggregator/detect/coverage.h"

#include <algorithm>
#include <tuple>

namespace ncclwatch::aggregator {

std::vector<CoverageChange> CoverageDetector::Evaluate(const std::vector<CommCoverage>& comms,
                                                       int64_t now_ns) {
  std::map<std::string, CoverageView> now;
  std::map<std::string, std::set<std::string>> nodes;  // by job: every reporting node
  incomplete_.clear();
  for (const CommCoverage& c : comms) {
    nodes[c.comm.job_id].insert(c.reporting.begin(), c.reporting.end());
    if (c.unreported_count == 0 || now_ns - c.first_report_ns < options_.after_ns) continue;
    incomplete_.insert(c.comm);
    CoverageView& v = now[c.comm.job_id];
    v.job_id = c.comm.job_id;
    v.comms.push_back(c);
  }
  std::vector<CoverageChange> changes;
  for (auto& [job, v] : now) {
    std::sort(v.comms.begin(), v.comms.end(), [](const CommCoverage& a, const CommCoverage& b) {
      return std::make_tuple(-a.nranks, a.comm.comm_hash) <
             std::make_tuple(-b.nranks, b.comm.comm_hash);
    });
    v.reporting_nodes = nodes[job];
    auto old = gaps_.find(job);
    v.since_ns = old == gaps_.end() ? now_ns : old->second.since_ns;
    if (old == gaps_.end()) changes.push_back({true, v});
  }
  for (auto& [job, v] : gaps_) {
    if (!now.count(job)) changes.push_back({false, std::move(v)});
  }
  gaps_ = std::move(now);
  return changes;
}

bool CoverageDetector::Incomplete(const CommKey& comm) const { return incomplete_.count(comm) > 0; }

}  // namespace ncclwatch::aggregator

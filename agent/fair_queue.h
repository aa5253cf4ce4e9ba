// The agent's queue of reports waiting to be cut into batches, fair between their sources (the
// plugin streams they came on): a source that sends far more than the others cannot push their
// reports out.
//
//   - Bounded in reports and bytes: when a new report does not fit, the oldest report of the
//     source holding the most bytes is dropped (the flooding source pays, not its neighbours).
//   - Served round-robin: Pop() takes one report from each source in turn, so a source's burst
//     does not delay the others' reports by more than one report each; within a source, reports
//     keep their order.
//
// Not thread-safe (the Forwarder holds its lock around every call).
#ifndef NCCLWATCH_AGENT_FAIR_QUEUE_H_
#define NCCLWATCH_AGENT_FAIR_QUEUE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <utility>

namespace ncclwatch::agent {

class FairQueue {
 public:
  FairQueue(int64_t max_reports, int64_t max_bytes)
      : max_reports_(max_reports), max_bytes_(max_bytes) {}

  // Adds `report` from `source`; returns how many reports were dropped to make room.
  uint64_t Push(std::string report, uint64_t source);
  bool empty() const { return reports_ == 0; }
  int64_t size() const { return reports_; }
  int64_t bytes() const { return bytes_; }
  // The size of the report Pop() returns next; empty() must be false.
  size_t NextSize() const;
  // Takes the next report, round-robin over the sources; empty() must be false.
  std::string Pop();

 private:
  struct Source {
    std::deque<std::string> reports;
    int64_t bytes = 0;
  };
  // Removes the front report of `it`, keeping the indexes; returns it and advances nothing.
  std::string TakeFront(std::map<uint64_t, Source>::iterator it);
  std::map<uint64_t, Source>::iterator Next();
  std::map<uint64_t, Source>::const_iterator Next() const;

  const int64_t max_reports_;
  const int64_t max_bytes_;
  std::map<uint64_t, Source> sources_;
  std::set<std::pair<int64_t, uint64_t>> by_bytes_;  // (bytes, source) of every source
  uint64_t cursor_ = 0;  // Pop serves the first source >= cursor_ (wrapping around)
  int64_t reports_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace ncclwatch::agent

#endif  // NCCLWATCH_AGENT_FAIR_QUEUE_H_

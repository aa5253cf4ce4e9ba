// One hang, one finding: which of a job's hung communicators is the origin, and which are only
// stuck behind it (docs/detection.md).
//
// NCCL launches asynchronously: when a collective hangs, the host of every rank stuck in it keeps
// enqueuing later operations on the same stream, in other communicators too, until it blocks. Those
// operations never start on the GPU, and peers that did start them wait for ranks that are in fact
// stuck elsewhere; a process that stopped (crashed, stuck in Python) leaves a hang in every
// communicator whose next collective needed it. A hang H of communicator C is therefore a
// consequence of another hang H' when one of C's ranks, whose process also has a rank in H''s
// communicator,
//   - is missing from H, and that process has an operation in flight in H''s communicator (it is
//     stuck in an operation that comes before H in its program order, however late it enqueued
//     it: in a pipeline, the last stage reaches the end of a step long before the first), or is
//     itself missing from H', which began earlier (it never reached the earlier one either); or
//   - reached H's collective but its kernel never started, queued behind an older operation of
//     its process in H''s communicator, or behind one there whose kernel started (a GPU runs
//     one stream: a started kernel that never ends holds back every later one).
// Following these links from each hang leads to the origins: hangs that depend on no other hang.
// Every hang is reported under exactly one origin. A hang whose rank is held in the same way by
// an operation of a communicator not declared hung (yet) is an origin only once that operation
// ends or its own hang is declared: hangs are declared a threshold after their first enqueue, and
// reports of different communicators arrive at different times.
//
// Plain structs; pure function of its inputs.
#ifndef NCCLWATCH_AGGREGATOR_ROOTCAUSE_HANG_ORIGIN_H_
#define NCCLWATCH_AGGREGATOR_ROOTCAUSE_HANG_ORIGIN_H_

#include <functional>
#include <map>
#include <vector>

#include "aggregator/detect/hang.h"
#include "aggregator/rootcause/process_index.h"

namespace ncclwatch::aggregator {

struct HangGroup {
  HangView origin;
  // False while a rank of the origin is held by an older operation of another communicator that
  // is not (yet) declared hung: it may be soon, and then this hang is stuck behind it. HangOrigins
  // reports settled origins only.
  bool settled = true;
  std::vector<HangView> consequences;  // stuck behind the origin, oldest first
};

// What a communicator rank had in flight at its last report (HangDetector::InFlightOf).
using InFlightLookup =
    std::function<std::vector<HangDetector::InFlight>(const CommKey& comm, int rank)>;

// Groups `hangs` (of any number of jobs) by origin; origins ordered by when they were enqueued.
std::vector<HangGroup> GroupHangsByOrigin(const std::vector<HangView>& hangs,
                                          const ProcessIndex& processes,
                                          const InFlightLookup& in_flight);

struct HangGroupChange {
  bool start = false;
  HangGroup group;
};

// The hang findings: one per origin, with its consequences. An origin is the same finding while
// its communicator stays hung in the same operation; its consequences may come and go under it.
class HangOrigins {
 public:
  // Takes the hangs grouped now; returns the origins that appeared (START) or went (END: the
  // hang ended, or it turned out to be stuck behind an older one). A reported origin still hung
  // in its group stays its origin.
  std::vector<HangGroupChange> Update(std::vector<HangGroup> groups);
  const std::map<CommKey, HangGroup>& origins() const { return origins_; }
  bool IsOrigin(const CommKey& comm) const { return origins_.count(comm) > 0; }

 private:
  // Whether `h` is a reported origin (same communicator and operation).
  bool Reported(const HangView& h) const;

  std::map<CommKey, HangGroup> origins_;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_ROOTCAUSE_HANG_ORIGIN_H_

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
//   - is missing from H, and that process has an operation in flight in H''s communicator that it
//     enqueued before H's collective was first enqueued (it is stuck in an older operation), or is
//     itself missing from H', which began earlier (it never reached the earlier one either); or
//   - reached H's collective but its kernel never started, queued behind an older operation of
//     its process in H''s communicator.
// Following these links from each hang leads to the origins: hangs that depend on no other hang.
// Every hang is reported under exactly one origin.
//
// Plain structs; pure function of its inputs.
#ifndef NCCLWATCH_AGGREGATOR_ROOTCAUSE_HANG_ORIGIN_H_
#define NCCLWATCH_AGGREGATOR_ROOTCAUSE_HANG_ORIGIN_H_

#include <functional>
#include <vector>

#include "aggregator/detect/hang.h"
#include "aggregator/rootcause/process_index.h"

namespace ncclwatch::aggregator {

struct HangGroup {
  HangView origin;
  std::vector<HangView> consequences;  // stuck behind the origin, oldest first
};

// What a communicator rank had in flight at its last report (HangDetector::InFlightOf).
using InFlightLookup =
    std::function<std::vector<HangDetector::InFlight>(const CommKey& comm, int rank)>;

// Groups `hangs` (of any number of jobs) by origin; origins ordered by when they were enqueued.
std::vector<HangGroup> GroupHangsByOrigin(const std::vector<HangView>& hangs,
                                          const ProcessIndex& processes,
                                          const InFlightLookup& in_flight);

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_ROOTCAUSE_HANG_ORIGIN_H_

// Findings as on-call reads them: the detection events (kind, phase, the proto details and a
// one-line summary) and the current-state answers of the Query API, built from the detectors'
// plain views and the registry's `CommWho`. No state, no locks: pure functions of their inputs.
//
// Also the few helpers the CLI shares with the aggregator (EventJobId, HangOpText), so that the
// CLI links this library and the wire contract, never the aggregator's store or servers.
#ifndef NCCLWATCH_AGGREGATOR_FINDINGS_FINDINGS_H_
#define NCCLWATCH_AGGREGATOR_FINDINGS_FINDINGS_H_

#include <cstdint>
#include <string>

#include "aggregator/detect/degraded.h"
#include "aggregator/detect/hang.h"
#include "aggregator/detect/slow_nodes.h"
#include "aggregator/detect/straggler.h"
#include "aggregator/detect/types.h"
#include "aggregator/findings/who.h"
#include "aggregator/rootcause/own_time.h"
#include "ncclwatch/v1/query.pb.h"

namespace ncclwatch::aggregator {

// A communicator's findings now, counted (for jobs) and named (CommInfo.health).
struct CommHealth {
  uint32_t stragglers = 0;
  uint32_t silent_ranks = 0;
  bool hung = false;
  bool degraded = false;
};

// `who` may be null where the communicator is no longer (or not yet) known: the answer then
// carries only what the detector's view says.

// A rank's straggler details; `since_ns` is when it was flagged (0: not flagged).
ncclwatch::v1::StragglerInfo StragglerInfoOf(const CommKey& key, const CommWho& who,
                                             const RankScore& score, int64_t since_ns);
// A GPU slow itself; `who` names the communicator of its strongest evidence (may be null).
// Consequences are the caller's to attach.
ncclwatch::v1::RootCauseInfo RootCauseInfoOf(const SlowProcess& slow, const CommWho* who);
ncclwatch::v1::HangInfo HangInfoOf(const HangView& hang, const CommWho* who, int64_t now_ns);
ncclwatch::v1::SilentRankInfo SilentInfoOf(const SilentView& silent, const CommWho* who);
ncclwatch::v1::DegradedCommInfo DegradedInfoOf(const DegradedView& view, const CommWho* who);
ncclwatch::v1::NodeSuspectInfo SuspectInfoOf(const SuspectView& suspect);
ncclwatch::v1::CommInfo CommInfoOf(const CommKey& key, const CommWho& who, int64_t last_report_ns,
                                   const CommHealth& health);
// Rank `rank` of the communicator; node and GPU unknown (-1) when `who` does not know it.
void FillRank(const CommWho* who, int rank, ncclwatch::v1::RankRef* out);

// The events, at `now_ns`. STRAGGLER: `change.score.flagged` is the new state, `since_ns` when it
// was (or, ending, had been) flagged.
ncclwatch::v1::Event StragglerEvent(const CommKey& key, const CommWho& who,
                                    const FlagChange& change, int64_t since_ns, int64_t now_ns);
ncclwatch::v1::Event SlowNodeEvent(const CommKey& key, const CommWho& who,
                                   const SlowNodeChange& change, int64_t now_ns);
// HANG or RANK_SILENT.
ncclwatch::v1::Event HangEvent(const HangChange& change, const CommWho* who, int64_t now_ns);
// COMM_DEGRADED or NODE_NETWORK_SUSPECT.
ncclwatch::v1::Event DegradedEvent(const DegradedChange& change, const CommWho* who,
                                   int64_t now_ns);

// The job a detection event is about, whatever its kind ("" if it names none).
const std::string& EventJobId(const ncclwatch::v1::Event& event);

// What an event is about, without its figures (kind, phase, job, communicator and rank, node or
// operation): the same finding derived twice (e.g. by replay after a restart) has the same
// identity.
std::string EventIdentity(const ncclwatch::v1::Event& event);

// "AllReduce #12", or "Send/Recv" for a point-to-point hang (no seqNumber).
std::string HangOpText(const ncclwatch::v1::HangInfo& hang);

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_FINDINGS_FINDINGS_H_

// Findings as on-call reads them: the detection events (kind, phase, the proto details and a
// one-line summary) and the current-state answers of the Query API, built from the detectors'
// plain views and the registry's `CommWho`. No state, no locks: pure functions of their inputs.
//
// Also the few helpers the CLI shares with the aggregator (EventJobId in kinds.h, HangOpText), so
// that the CLI links this library and the wire contract, never the aggregator's store or servers.
#ifndef NCCLWATCH_AGGREGATOR_FINDINGS_FINDINGS_H_
#define NCCLWATCH_AGGREGATOR_FINDINGS_FINDINGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "aggregator/detect/coverage.h"
#include "aggregator/detect/degraded.h"
#include "aggregator/detect/hang.h"
#include "aggregator/detect/silent_nodes.h"
#include "aggregator/detect/slow_nodes.h"
#include "aggregator/detect/straggler.h"
#include "aggregator/detect/types.h"
#include "aggregator/findings/kinds.h"
#include "aggregator/findings/who.h"
#include "aggregator/rootcause/own_time.h"
#include "aggregator/rootcause/verdicts.h"
#include "ncclwatch/v1/query.pb.h"

namespace ncclwatch::aggregator {

// A communicator's findings now, counted (for jobs) and named (CommInfo.health).
struct CommHealth {
  uint32_t stragglers = 0;
  uint32_t silent_ranks = 0;
  bool hung = false;
  bool degraded = false;
  int unreported = 0;  // ranks that never reported, once coverage flags it
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
                                    const FlagChange& change, int64_t since_ns, int64_t now_ns,
                                    bool origin_not_found = false);
// `origin_not_found`: the lateness pages by itself in a communicator with own times
// (rootcause/unexplained.h).
ncclwatch::v1::Event SlowNodeEvent(const CommKey& key, const CommWho& who,
                                   const SlowNodeChange& change, int64_t now_ns,
                                   bool origin_not_found = false);
// STRAGGLER for a GPU slow itself (root-cause analysis): `straggler` names its rank in the
// evidence's communicator, `root_cause` the GPU, its evidence and `consequences`.
ncclwatch::v1::Event RootCauseEvent(const GpuChange& change, const CommWho* who,
                                    const std::vector<ncclwatch::v1::StragglerInfo>& consequences,
                                    int64_t now_ns);
// The END of an origin-not-found page (STRAGGLER or NODE_STRAGGLER with origin_not_found) from its
// START: `reason` "root cause found" when the root cause replaced it, else empty (cleared).
ncclwatch::v1::Event OriginNotFoundEnd(const ncclwatch::v1::Event& start, int64_t now_ns,
                                       const std::string& reason);
// NODE_STRAGGLER with origin_not_found for GPUs `cuda_devices` of `node`, late in several
// communicators while no GPU of the job is slow itself (rootcause/unexplained.h).
ncclwatch::v1::Event UnexplainedNodeEvent(const std::string& job_id, const std::string& node,
                                          const std::vector<int>& cuda_devices, int64_t now_ns);
// NODE_STRAGGLER from several GPUs of a node each slow themselves.
ncclwatch::v1::Event SlowGpusNodeEvent(const NodeChange& change, int64_t now_ns);
// "GPU1 on node n (host h, pid p) of job j is slow itself: before AllReduce 1-2MB in communicator
// tp0 (its rank 1) it spends 2.00 ms more on its own work than peers doing the same work
// (4.00 ms)": the finding's sentence, shared by the event and the CLI.
std::string RootCauseSentence(const ncclwatch::v1::RootCauseInfo& info);
// "rank 5, GPU1 on node node-1" (the training's rank first where known), as findings name a GPU.
std::string RootCauseGpu(const ncclwatch::v1::RootCauseInfo& info);
ncclwatch::v1::CoverageInfo CoverageInfoOf(const CoverageView& view);
// RANKS_UNREPORTED: a job with communicators some of whose ranks never reported.
ncclwatch::v1::Event CoverageEvent(const CoverageChange& change, int64_t now_ns);
// HANG of an origin (rootcause/hang_origin.h), with the hangs stuck behind it.
ncclwatch::v1::Event HangOriginEvent(bool start, const HangView& origin, const CommWho* who,
                                     const std::vector<ncclwatch::v1::HangInfo>& consequences,
                                     int64_t now_ns);
// HANG or RANK_SILENT.
ncclwatch::v1::Event HangEvent(const HangChange& change, const CommWho* who, int64_t now_ns);
// NODE_SILENT: a node none of whose processes reports while the job's others do.
ncclwatch::v1::NodeSilentInfo NodeSilentInfoOf(const SilentNodeView& view);
ncclwatch::v1::Event SilentNodeEvent(const SilentNodeChange& change, int64_t now_ns);
// "node n of job j: all 4 of its GPUs stopped reporting while the job's other nodes carry on:
// ...": the finding's sentence, shared by the event and the CLI.
std::string SilentNodeSentence(const ncclwatch::v1::NodeSilentInfo& info);
// COMM_DEGRADED or NODE_NETWORK_SUSPECT.
ncclwatch::v1::Event DegradedEvent(const DegradedChange& change, const CommWho* who,
                                   int64_t now_ns);

// The findings' sentences, each shared by the event's summary (after "STRAGGLER: " and the like)
// and the CLI (after "Finding: "), so that on-call reads one wording wherever it looks.
// "rank 6 (node n, GPU6, pod ns/p, container c)": node and GPU "unknown" when not known.
std::string RankText(const ncclwatch::v1::RankRef& rank);
// "rank 3 (node n, GPU3) of communicator tp0 0x… in job j is slow: median lateness 2.00 ms (...)
// over 32 collectives, arrived last in 90%"; `flagged` false: "is back in step".
std::string StragglerSentence(const ncclwatch::v1::StragglerInfo& info, bool flagged = true);
// "node n of job j: 2 of its GPUs (GPU0, GPU3) are each slow themselves; suspect the node ...",
// or, in a communicator without own times, "node n of job j: all 4 ranks communicator tp0 0x…
// has on it (0,1,2,3) are late ...".
std::string SlowNodeSentence(const ncclwatch::v1::NodeStragglerInfo& info);
// "AllReduce #12 of communicator tp0 0x… in job j has made no progress for 3.2 s; 1 of 8 ranks
// never reached it: rank 6 (node n, GPU6)" (or: all reached it, suspect the fabric).
std::string HangSentence(const ncclwatch::v1::HangInfo& info);
// "rank 2 (node n, GPU2) of communicator world 0x… in job j stopped reporting while the other
// ranks carry on (process dead or stuck outside NCCL?)".
std::string SilentSentence(const ncclwatch::v1::SilentRankInfo& info);
// "the network of node n is the common factor of the 3 degraded multi-node communicators of job
// j, while its NVLink-only ones are healthy: check its NICs, cables and switch ports".
std::string SuspectSentence(const ncclwatch::v1::NodeSuspectInfo& info);

// What a straggler or slow-node sentence adds when the lateness pages with no origin found.
inline constexpr char kOriginNotFound[] =
    "; origin not found: no GPU of the job is slow by its own compute time, so the lateness is "
    "reported where it shows (a node slow before its node-local collectives, or a fault every "
    "replica shares)";

// A communicator as a sentence names it: its name, or its hash when it has none.
std::string CommWord(const std::string& name, uint64_t hash);

// What a data-dependent imbalance costs: the wait for the busiest rank as a share (0-1) of the
// work before the collective, wait included.
double ImbalanceShare(const ncclwatch::v1::WorkloadImbalance& w);

// "AllReduce #12", or "Send/Recv" for a point-to-point hang (no seqNumber).
std::string HangOpText(const ncclwatch::v1::HangInfo& hang);

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_FINDINGS_FINDINGS_H_

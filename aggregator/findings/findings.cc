#include "aggregator/findings/findings.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "aggregator/findings/new_event.h"
#include "proto/inspector.h"

namespace ncclwatch::aggregator {
namespace {

using ncclwatch::v1::Event;

// Copies the training's own ranks of `r`, where its launcher set them, into a finding.
template <typename Info>
void SetTrainingRanks(const RankWho& r, Info* info) {
  if (r.global_rank >= 0) info->set_global_rank(r.global_rank);
  if (r.local_rank >= 0) info->set_local_rank(r.local_rank);
}

// ", global rank 5" within a rank's parentheses, or "" when unknown.
template <typename Info>
std::string GlobalRankPart(const Info& info) {
  return info.has_global_rank() ? absl::StrCat("global rank ", info.global_rank(), ", ") : "";
}

// What the latenesses were measured with, in a finding's summary.
const char* BasisText(LatenessBasis basis) {
  switch (basis) {
    case LatenessBasis::kSyncWait:
      return "GPU-measured waits for peers";
    case LatenessBasis::kAlignedClocks:
      return "aligned GPU clocks";
    case LatenessBasis::kKernelDurations:
      break;
  }
  return "kernel durations";
}

// "tp0 0x…", or the hash alone for a communicator without a name.
std::string CommText(const std::string& name, uint64_t hash) {
  return name.empty() ? CommHashText(hash) : absl::StrCat(name, " ", CommHashText(hash));
}

// What a straggler's latenesses were measured with, as its answer says.
const char* BasisText(const ncclwatch::v1::StragglerInfo& s) {
  if (s.sync_wait_measured()) return BasisText(LatenessBasis::kSyncWait);
  if (s.clocks_aligned()) return BasisText(LatenessBasis::kAlignedClocks);
  return BasisText(LatenessBasis::kKernelDurations);
}

std::string RankList(const google::protobuf::RepeatedPtrField<ncclwatch::v1::RankRef>& ranks) {
  std::string out;
  for (const auto& r : ranks) absl::StrAppend(&out, out.empty() ? "" : ", ", RankText(r));
  return out;
}

Event SilentEvent(const HangChange& change, const CommWho* who, int64_t now_ns) {
  Event event = NewEvent(Event::RANK_SILENT, change.start, now_ns, change.rank.comm.job_id);
  *event.mutable_silent() = SilentInfoOf(change.rank, who);
  const auto& s = event.silent();
  event.set_summary(
      change.start
          ? absl::StrFormat("SILENT: %s; last report %.1f s ago", SilentSentence(s),
                            (now_ns - static_cast<int64_t>(s.last_report_unix_ns())) * 1e-9)
          : absl::StrFormat("REPORTING: %s of communicator %s %s in job %s reports again",
                            RankText(s.rank()), OrUnknown(s.comm_name()),
                            CommHashText(s.comm_hash()), s.job_id()));
  return event;
}

Event SuspectEvent(const DegradedChange& change, int64_t now_ns) {
  Event event = NewEvent(Event::NODE_NETWORK_SUSPECT, change.start, now_ns, change.suspect.job_id);
  *event.mutable_suspect() = SuspectInfoOf(change.suspect);
  event.set_summary(change.start
                        ? absl::StrCat("NETWORK SUSPECT: ", SuspectSentence(event.suspect()))
                        : absl::StrFormat("NETWORK OK: node %s in job %s is no longer suspected",
                                          change.suspect.node, change.suspect.job_id));
  return event;
}

}  // namespace

void FillRank(const CommWho* who, int rank, ncclwatch::v1::RankRef* out) {
  out->set_rank(rank);
  out->set_cuda_device(-1);
  if (who == nullptr) return;
  auto found = who->ranks.find(rank);
  if (found == who->ranks.end()) return;
  const RankWho& r = found->second;
  out->set_node(r.node);
  out->set_cuda_device(r.cuda_device);
  out->set_gpu_uuid(r.gpu_uuid);
  out->set_pod(r.pod);
  out->set_pod_namespace(r.pod_namespace);
  out->set_container(r.container);
  SetTrainingRanks(r, out);
}

ncclwatch::v1::StragglerInfo StragglerInfoOf(const CommKey& key, const CommWho& who,
                                             const RankScore& score, int64_t since_ns) {
  ncclwatch::v1::StragglerInfo info;
  info.set_job_id(key.job_id);
  info.set_comm_hash(key.comm_hash);
  info.set_comm_name(who.comm_name);
  info.set_rank(score.rank);
  info.set_nranks(who.nranks);
  info.set_node(who.Rank(score.rank).node);
  info.set_cuda_device(who.Rank(score.rank).cuda_device);
  SetTrainingRanks(who.Rank(score.rank), &info);
  info.set_lateness_seconds(score.lateness_ns * 1e-9);
  info.set_window_collectives(static_cast<uint32_t>(score.observations));
  info.set_arrived_last_fraction(score.arrived_last_fraction);
  info.set_excess_seconds(score.excess_ns * 1e-9);
  info.set_peer_baseline_seconds(score.peer_baseline_ns * 1e-9);
  info.set_peer_z_score(score.peer_z);
  info.set_history_ratio(score.history_ratio);
  info.set_clocks_aligned(score.clocks_aligned);
  info.set_sync_wait_measured(score.basis == LatenessBasis::kSyncWait);
  if (since_ns != 0) info.set_since_unix_ns(since_ns);
  return info;
}

ncclwatch::v1::RootCauseInfo RootCauseInfoOf(const SlowProcess& slow, const CommWho* who) {
  ncclwatch::v1::RootCauseInfo info;
  info.set_job_id(slow.process.job_id);
  info.set_host(slow.process.host);
  info.set_pid(slow.process.pid);
  info.set_cuda_device(slow.process.cuda_device);
  info.set_node(slow.node);
  info.set_comm_hash(slow.comm.comm_hash);
  info.set_rank(slow.rank);
  if (who != nullptr) {
    info.set_comm_name(who->comm_name);
    const RankWho& r = who->Rank(slow.rank);
    info.set_gpu_uuid(r.gpu_uuid);
    info.set_pod(r.pod);
    info.set_pod_namespace(r.pod_namespace);
    SetTrainingRanks(r, &info);
  }
  info.set_collective(slow.op);
  info.set_bytes(slow.bytes);
  info.set_own_excess_seconds(slow.excess_ns * 1e-9);
  info.set_grew_over_time(slow.changed);
  info.set_own_time_seconds(slow.own_time_ns * 1e-9);
  if (slow.since_ns != 0) info.set_since_unix_ns(slow.since_ns);
  return info;
}

ncclwatch::v1::HangInfo HangInfoOf(const HangView& hang, const CommWho* who, int64_t now_ns) {
  ncclwatch::v1::HangInfo info;
  info.set_job_id(hang.comm.job_id);
  info.set_comm_hash(hang.comm.comm_hash);
  if (who != nullptr) {
    info.set_comm_name(who->comm_name);
    info.set_nranks(who->nranks);
  }
  info.set_op(hang.op);
  info.set_seq(hang.seq);
  info.set_kind(hang.kind == HangKind::kNoProgress ? ncclwatch::v1::HangInfo::NO_PROGRESS
                                                   : ncclwatch::v1::HangInfo::MISSING_RANKS);
  for (int r : hang.missing) FillRank(who, r, info.add_missing());
  info.set_missing_count(
      static_cast<uint32_t>(std::max<size_t>(hang.missing_count, hang.missing.size())));
  info.set_arrived(static_cast<uint32_t>(hang.arrived));
  info.set_age_seconds(static_cast<double>(now_ns - hang.enqueued_ns) * 1e-9);
  info.set_since_unix_ns(hang.since_ns);
  return info;
}

ncclwatch::v1::SilentRankInfo SilentInfoOf(const SilentView& silent, const CommWho* who) {
  ncclwatch::v1::SilentRankInfo info;
  info.set_job_id(silent.comm.job_id);
  info.set_comm_hash(silent.comm.comm_hash);
  if (who != nullptr) info.set_comm_name(who->comm_name);
  FillRank(who, silent.rank, info.mutable_rank());
  info.set_last_report_unix_ns(silent.last_report_ns);
  info.set_since_unix_ns(silent.since_ns);
  return info;
}

ncclwatch::v1::DegradedCommInfo DegradedInfoOf(const DegradedView& v, const CommWho* who) {
  ncclwatch::v1::DegradedCommInfo info;
  info.set_job_id(v.comm.job_id);
  info.set_comm_hash(v.comm.comm_hash);
  if (who != nullptr) info.set_comm_name(who->comm_name);
  info.set_comm_class(v.hybrid ? "hybrid" : "nvlink");
  info.set_op(v.op);
  info.set_message_size(v.message_size);
  info.set_bus_bw_gbs(v.bus_gbs);
  info.set_baseline_bus_bw_gbs(v.baseline_gbs);
  for (const auto& n : v.nodes) info.add_nodes(n);
  return info;
}

ncclwatch::v1::NodeSuspectInfo SuspectInfoOf(const SuspectView& s) {
  ncclwatch::v1::NodeSuspectInfo info;
  info.set_job_id(s.job_id);
  info.set_node(s.node);
  info.set_degraded_comms(static_cast<uint32_t>(s.degraded_comms));
  return info;
}

ncclwatch::v1::CommInfo CommInfoOf(const CommKey& key, const CommWho& who, int64_t last_report_ns,
                                   const CommHealth& health) {
  ncclwatch::v1::CommInfo c;
  c.set_job_id(key.job_id);
  c.set_comm_hash(key.comm_hash);
  c.set_comm_name(who.comm_name);
  c.set_nranks(who.nranks);
  c.set_n_nodes(who.n_nodes);
  c.set_comm_class(who.n_nodes > 1 ? "hybrid" : "nvlink");
  for (const auto& [r, rank] : who.ranks) FillRank(&who, r, c.add_ranks());
  c.set_last_report_unix_ns(static_cast<uint64_t>(last_report_ns));
  std::vector<std::string> findings;
  if (health.stragglers > 0) findings.push_back("straggler");
  if (health.hung) findings.push_back("hung");
  if (health.silent_ranks > 0) findings.push_back("silent");
  if (health.degraded) findings.push_back("degraded");
  if (health.unreported > 0) findings.push_back("incomplete");
  c.set_health(findings.empty() ? "ok" : absl::StrJoin(findings, "+"));
  return c;
}

Event StragglerEvent(const CommKey& key, const CommWho& who, const FlagChange& change,
                     int64_t since_ns, int64_t now_ns, bool origin_not_found) {
  const RankScore& score = change.score;
  Event event = NewEvent(Event::STRAGGLER, score.flagged, now_ns, key.job_id);
  *event.mutable_straggler() = StragglerInfoOf(key, who, score, since_ns);
  event.mutable_straggler()->set_origin_not_found(origin_not_found);
  event.set_summary(absl::StrCat(score.flagged ? "STRAGGLER: " : "RECOVERED: ",
                                 StragglerSentence(event.straggler(), score.flagged)));
  return event;
}

Event SlowNodeEvent(const CommKey& key, const CommWho& who, const SlowNodeChange& change,
                    int64_t now_ns, bool origin_not_found) {
  Event event = NewEvent(Event::NODE_STRAGGLER, change.start, now_ns, key.job_id);
  auto* info = event.mutable_node_straggler();
  info->set_origin_not_found(origin_not_found);
  info->set_job_id(key.job_id);
  info->set_comm_hash(key.comm_hash);
  info->set_comm_name(who.comm_name);
  info->set_node(change.node);
  for (int r : change.ranks) info->add_ranks(r);
  event.set_summary(change.start
                        ? absl::StrCat("SLOW NODE: ", SlowNodeSentence(*info))
                        : absl::StrFormat("NODE RECOVERED: node %s in communicator %s %s of job "
                                          "%s: its ranks are back in step",
                                          change.node, OrUnknown(who.comm_name),
                                          CommHashText(key.comm_hash), key.job_id));
  return event;
}

Event UnexplainedNodeEvent(const std::string& job_id, const std::string& node,
                           const std::vector<int>& cuda_devices, int64_t now_ns) {
  Event event = NewEvent(Event::NODE_STRAGGLER, true, now_ns, job_id);
  auto* info = event.mutable_node_straggler();
  info->set_job_id(job_id);
  info->set_node(node);
  for (int g : cuda_devices) info->add_gpus(g);
  info->set_origin_not_found(true);
  event.set_summary(absl::StrCat("SLOW NODE: ", SlowNodeSentence(*info)));
  return event;
}

Event OriginNotFoundEnd(const Event& start, int64_t now_ns, const std::string& reason) {
  Event end = start;
  end.set_phase(Event::END);
  end.set_time_unix_ns(now_ns);
  end.set_end_reason(reason);
  const bool replaced = !reason.empty();
  if (start.kind() == Event::STRAGGLER) {
    const auto& s = start.straggler();
    end.set_summary(
        replaced ? absl::StrFormat("ORIGIN FOUND: rank %d (node %s, %s) of communicator %s in job "
                                   "%s: its lateness is explained by the root cause found since",
                                   s.rank(), OrUnknown(s.node()), GpuLabel(s.cuda_device()),
                                   CommText(s.comm_name(), s.comm_hash()), s.job_id())
                 : absl::StrCat("RECOVERED: ", StragglerSentence(s, false)));
  } else {
    const auto& n = start.node_straggler();
    end.set_summary(absl::StrFormat(
        "%s: node %s%s of job %s: %s", replaced ? "ORIGIN FOUND" : "NODE RECOVERED", n.node(),
        n.gpus_size() > 0
            ? ""
            : absl::StrCat(" in communicator ", CommText(n.comm_name(), n.comm_hash())),
        n.job_id(),
        replaced ? "its lateness is explained by the root cause found since"
                 : "its ranks are back in step"));
  }
  return end;
}

Event HangEvent(const HangChange& change, const CommWho* who, int64_t now_ns) {
  if (change.silent) return SilentEvent(change, who, now_ns);
  Event event = NewEvent(Event::HANG, change.start, now_ns, change.hang.comm.job_id);
  *event.mutable_hang() = HangInfoOf(change.hang, who, now_ns);
  const auto& h = event.hang();
  event.set_summary(change.start ? absl::StrCat("HANG: ", HangSentence(h))
                                 : absl::StrFormat("UNHUNG: %s of communicator %s %s in job %s "
                                                   "is moving again",
                                                   HangOpText(h), OrUnknown(h.comm_name()),
                                                   CommHashText(h.comm_hash()), h.job_id()));
  return event;
}

ncclwatch::v1::NodeSilentInfo NodeSilentInfoOf(const SilentNodeView& view) {
  ncclwatch::v1::NodeSilentInfo info;
  info.set_job_id(view.job_id);
  info.set_node(view.node);
  info.set_processes(static_cast<uint32_t>(view.processes));
  info.set_since_unix_ns(view.since_ns);
  return info;
}

std::string SilentNodeSentence(const ncclwatch::v1::NodeSilentInfo& n) {
  return absl::StrFormat(
      "node %s of job %s: all %d of its GPUs stopped reporting while the job's other nodes carry "
      "on: suspect the node itself (down, rebooting, cut off from the aggregator) or its "
      "ncclwatch agent rather than the GPUs",
      n.node(), n.job_id(), n.processes());
}

Event SilentNodeEvent(const SilentNodeChange& change, int64_t now_ns) {
  Event event = NewEvent(Event::NODE_SILENT, change.start, now_ns, change.node.job_id);
  *event.mutable_node_silent() = NodeSilentInfoOf(change.node);
  event.set_summary(change.start
                        ? absl::StrCat("NODE SILENT: ", SilentNodeSentence(event.node_silent()))
                        : absl::StrFormat("NODE REPORTING: node %s of job %s reports again",
                                          change.node.node, change.node.job_id));
  return event;
}

Event DegradedEvent(const DegradedChange& change, const CommWho* who, int64_t now_ns) {
  if (change.node) return SuspectEvent(change, now_ns);
  Event event = NewEvent(Event::COMM_DEGRADED, change.start, now_ns, change.comm.comm.job_id);
  *event.mutable_degraded() = DegradedInfoOf(change.comm, who);
  const auto& d = event.degraded();
  event.set_summary(absl::StrFormat(
      "%s: %s communicator %s %s in job %s (nodes %s): %s %s bus bandwidth %.1f GB/s against a "
      "baseline of %.1f GB/s",
      change.start ? "DEGRADED" : "RECOVERED", d.comm_class(), OrUnknown(d.comm_name()),
      CommHashText(d.comm_hash()), d.job_id(), absl::StrJoin(d.nodes(), ","), d.op(),
      d.message_size(), d.bus_bw_gbs(), d.baseline_bus_bw_gbs()));
  return event;
}

std::string RankText(const ncclwatch::v1::RankRef& r) {
  std::string text = absl::StrFormat("rank %d (%snode %s, %s", r.rank(), GlobalRankPart(r),
                                     OrUnknown(r.node()), GpuLabel(r.cuda_device()));
  if (!r.pod().empty()) {
    absl::StrAppend(&text, ", pod ", r.pod_namespace().empty() ? "-" : r.pod_namespace(), "/",
                    r.pod());
    if (!r.container().empty()) absl::StrAppend(&text, ", container ", r.container());
  }
  return text + ")";
}

std::string StragglerSentence(const ncclwatch::v1::StragglerInfo& s, bool flagged) {
  return absl::StrCat(
      absl::StrFormat(
          "rank %d (%snode %s, %s) of communicator %s in job %s %s: median lateness %.2f ms "
          "(%.2f ms beyond its punctual peers, z %.1f, %.1fx its own usual; %s) over %d "
          "collectives, arrived last in %.0f%%",
          s.rank(), GlobalRankPart(s), OrUnknown(s.node()), GpuLabel(s.cuda_device()),
          CommText(s.comm_name(), s.comm_hash()), s.job_id(),
          flagged ? "is slow" : "is back in step", s.lateness_seconds() * 1e3,
          s.excess_seconds() * 1e3, s.peer_z_score(), s.history_ratio(), BasisText(s),
          s.window_collectives(), s.arrived_last_fraction() * 100),
      s.origin_not_found() && flagged ? kOriginNotFound : "");
}

std::string SlowNodeSentence(const ncclwatch::v1::NodeStragglerInfo& n) {
  if (n.gpus_size() > 0) {
    std::vector<std::string> gpus;
    for (int g : n.gpus()) gpus.push_back(GpuLabel(g));
    if (n.origin_not_found()) {
      return absl::StrCat(
          absl::StrFormat("node %s of job %s: %d of its GPUs (%s) are late to their collectives "
                          "beyond their replicas; suspect the node rather than one GPU",
                          n.node(), n.job_id(), n.gpus_size(), absl::StrJoin(gpus, ", ")),
          kOriginNotFound);
    }
    return absl::StrFormat(
        "node %s of job %s: %d of its GPUs (%s) are each slow themselves; suspect the node "
        "(cooling, power, a noisy neighbour, the host) rather than one GPU",
        n.node(), n.job_id(), n.gpus_size(), absl::StrJoin(gpus, ", "));
  }
  return absl::StrCat(
      absl::StrFormat(
          "node %s of job %s: all %d ranks communicator %s has on it (%s) are late to the "
          "collectives; suspect the node rather than one GPU",
          n.node(), n.job_id(), n.ranks_size(), CommText(n.comm_name(), n.comm_hash()),
          absl::StrJoin(n.ranks(), ",")),
      n.origin_not_found() ? kOriginNotFound : "");
}

std::string HangSentence(const ncclwatch::v1::HangInfo& h) {
  // Every missing rank is counted; the first few are named.
  const uint32_t missing = std::max<uint32_t>(h.missing_count(), h.missing_size());
  const std::string what =
      h.kind() == ncclwatch::v1::HangInfo::NO_PROGRESS
          ? absl::StrFormat(
                "all %d ranks reached it and none finished: suspect the network or NVLink fabric",
                h.arrived())
          : absl::StrFormat("%d %s never reached it: %s%s", missing,
                            h.nranks() > 0 ? absl::StrFormat("of %d ranks", h.nranks())
                            : missing == 1 ? std::string("rank")
                                           : std::string("ranks"),
                            RankList(h.missing()),
                            missing > static_cast<uint32_t>(h.missing_size())
                                ? absl::StrFormat(" and %d more", missing - h.missing_size())
                                : std::string());
  return absl::StrFormat("%s of communicator %s in job %s has made no progress for %.1f s; %s",
                         HangOpText(h), CommText(h.comm_name(), h.comm_hash()), h.job_id(),
                         h.age_seconds(), what);
}

std::string SilentSentence(const ncclwatch::v1::SilentRankInfo& s) {
  return absl::StrFormat(
      "%s of communicator %s in job %s stopped reporting while the other ranks carry on "
      "(process dead or stuck outside NCCL?)",
      RankText(s.rank()), CommText(s.comm_name(), s.comm_hash()), s.job_id());
}

std::string SuspectSentence(const ncclwatch::v1::NodeSuspectInfo& s) {
  return absl::StrFormat(
      "the network of node %s is the common factor of the %u degraded multi-node communicators "
      "of job %s, while its NVLink-only ones are healthy: check its NICs, cables and switch "
      "ports",
      s.node(), s.degraded_comms(), s.job_id());
}

double ImbalanceShare(const ncclwatch::v1::WorkloadImbalance& w) {
  return w.wait_seconds() / std::max(w.wait_seconds() + w.own_time_seconds(), 1e-12);
}

std::string CommWord(const std::string& name, uint64_t hash) {
  return name.empty() ? CommHashText(hash) : name;
}

std::string HangOpText(const ncclwatch::v1::HangInfo& h) {
  if (h.op() == kP2pHangOp) return "Send/Recv";
  return absl::StrFormat("%s #%d", h.op(), h.seq());
}

}  // namespace ncclwatch::aggregator

// The findings of the job-level analysis (aggregator/rootcause, coverage): root-cause GPUs and
// nodes, hang origins with what is stuck behind them, ranks that never report. Declared in
// findings.h.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "aggregator/findings/findings.h"
#include "aggregator/findings/new_event.h"
#include "common/op_math.h"
#include "proto/inspector.h"

namespace ncclwatch::aggregator {

using ncclwatch::v1::Event;

std::string RootCauseGpu(const ncclwatch::v1::RootCauseInfo& r) {
  return absl::StrFormat("%s%s on node %s",
                         r.has_global_rank() ? absl::StrCat("rank ", r.global_rank(), ", ") : "",
                         GpuLabel(r.cuda_device()), OrUnknown(r.node()));
}

std::string RootCauseSentence(const ncclwatch::v1::RootCauseInfo& r) {
  return absl::StrFormat(
      "%s (host %s, pid %u%s) of job %s is slow itself: before %s %s in communicator "
      "%s (its rank %d) it spends %.2f ms more on its own work than %s (%.2f ms)",
      RootCauseGpu(r), OrUnknown(r.host()), r.pid(),
      r.pod().empty() ? "" : absl::StrCat(", pod ", r.pod_namespace(), "/", r.pod()), r.job_id(),
      r.collective(), MessageSizeBucket(r.bytes()), CommWord(r.comm_name(), r.comm_hash()),
      r.rank(), r.own_excess_seconds() * 1e3,
      r.grew_over_time() ? "it did before, while its peers' own time did not grow"
                         : "peers doing the same work",
      r.own_time_seconds() * 1e3);
}

Event RootCauseEvent(const GpuChange& change, const CommWho* who,
                     const std::vector<ncclwatch::v1::StragglerInfo>& consequences,
                     int64_t now_ns) {
  const SlowProcess& s = change.gpu.evidence;
  Event event = NewEvent(Event::STRAGGLER, change.start, now_ns, s.comm.job_id);
  auto* root = event.mutable_root_cause();
  *root = RootCauseInfoOf(s, who);
  root->set_since_unix_ns(change.gpu.since_ns);
  for (const auto& c : consequences) *root->add_consequences() = c;
  auto* info = event.mutable_straggler();
  info->set_job_id(s.comm.job_id);
  info->set_comm_hash(s.comm.comm_hash);
  info->set_rank(s.rank);
  info->set_node(s.node);
  info->set_cuda_device(s.process.cuda_device);
  if (root->has_global_rank()) info->set_global_rank(root->global_rank());
  if (root->has_local_rank()) info->set_local_rank(root->local_rank());
  info->set_since_unix_ns(change.gpu.since_ns);
  if (who != nullptr) {
    info->set_comm_name(who->comm_name);
    info->set_nranks(who->nranks);
  }
  std::set<uint64_t> comms;
  for (const auto& c : consequences) comms.insert(c.comm_hash());
  if (change.start) {
    event.set_summary(absl::StrCat(
        "STRAGGLER: ", RootCauseSentence(*root),
        consequences.empty()
            ? std::string("; every rank that waits for it is its consequence")
            : absl::StrFormat("; %d late rank(s) in %d communicator(s) are its consequences",
                              consequences.size(), comms.size())));
  } else {
    event.set_summary(
        absl::StrFormat("RECOVERED: %s (host %s, pid %u) of job %s is no longer slow itself",
                        RootCauseGpu(*root), OrUnknown(root->host()), root->pid(), root->job_id()));
  }
  return event;
}

Event SlowGpusNodeEvent(const NodeChange& change, int64_t now_ns) {
  Event event = NewEvent(Event::NODE_STRAGGLER, change.start, now_ns, change.job_id);
  auto* info = event.mutable_node_straggler();
  info->set_job_id(change.job_id);
  info->set_node(change.node);
  for (const ProcessKey& p : change.gpus) info->add_gpus(p.cuda_device);
  event.set_summary(
      change.start
          ? absl::StrCat("SLOW NODE: ", SlowNodeSentence(*info))
          : absl::StrFormat("NODE RECOVERED: node %s of job %s: fewer than two of its GPUs are "
                            "slow themselves",
                            change.node, change.job_id));
  return event;
}

ncclwatch::v1::CoverageInfo CoverageInfoOf(const CoverageView& v) {
  ncclwatch::v1::CoverageInfo info;
  info.set_job_id(v.job_id);
  for (const CommCoverage& c : v.comms) {
    auto* comm = info.add_comms();
    comm->set_comm_hash(c.comm.comm_hash);
    comm->set_comm_name(c.comm_name);
    comm->set_nranks(c.nranks);
    comm->set_n_nodes(c.n_nodes);
    for (int r : c.unreported) comm->add_unreported(r);
    comm->set_unreported_count(static_cast<uint32_t>(c.unreported_count));
    for (const auto& n : c.reporting) comm->add_reporting_nodes(n);
  }
  for (const auto& n : v.reporting_nodes) info.add_reporting_nodes(n);
  info.set_since_unix_ns(v.since_ns);
  return info;
}

Event CoverageEvent(const CoverageChange& change, int64_t now_ns) {
  Event event = NewEvent(Event::RANKS_UNREPORTED, change.start, now_ns, change.view.job_id);
  *event.mutable_coverage() = CoverageInfoOf(change.view);
  const auto& c = event.coverage();
  if (!change.start || c.comms_size() == 0) {
    event.set_summary(absl::StrFormat(
        "REPORTING: every rank of job %s reports again (or its incomplete communicators are gone)",
        c.job_id()));
    return event;
  }
  const auto& largest = c.comms(0);
  std::vector<std::string> names;
  for (const auto& comm : c.comms()) {
    names.push_back(CommWord(comm.comm_name(), comm.comm_hash()));
  }
  const int missing_nodes = largest.n_nodes() - largest.reporting_nodes_size();
  event.set_summary(absl::StrFormat(
      "RANKS NOT REPORTING: job %s: %d of %d ranks of communicator %s never reported (ranks "
      "%s%s)%s; "
      "%d communicator(s) are incomplete and not judged (%s): check the ncclwatch agent and "
      "NCCLWATCH_AGENT_ADDR on the node(s) of those ranks",
      c.job_id(), largest.unreported_count(), largest.nranks(), names[0],
      absl::StrJoin(largest.unreported(), ", "),
      largest.unreported_count() > static_cast<uint32_t>(largest.unreported_size()) ? ", ..." : "",
      missing_nodes > 0
          ? absl::StrFormat(", and %d of its %d nodes send nothing (reporting: %s)", missing_nodes,
                            largest.n_nodes(), absl::StrJoin(largest.reporting_nodes(), ", "))
          : std::string(),
      c.comms_size(), absl::StrJoin(names, ", ")));
  return event;
}

Event HangOriginEvent(bool start, const HangView& origin, const CommWho* who,
                      const std::vector<ncclwatch::v1::HangInfo>& consequences, int64_t now_ns) {
  HangChange change;
  change.start = start;
  change.hang = origin;
  Event event = HangEvent(change, who, now_ns);
  for (const auto& c : consequences) *event.mutable_hang()->add_consequences() = c;
  if (start && !consequences.empty()) {
    std::set<std::string> comms;
    for (const auto& c : consequences) {
      comms.insert(CommWord(c.comm_name(), c.comm_hash()));
    }
    event.set_summary(absl::StrFormat("%s; stuck behind it: %d operation(s) of %s", event.summary(),
                                      consequences.size(), absl::StrJoin(comms, ", ")));
  }
  return event;
}

}  // namespace ncclwatch::aggregator

#include "aggregator/cli/tables.h"

#include <ctime>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "aggregator/detect/hang.h"
#include "aggregator/findings/findings.h"
#include "common/op_math.h"
#include "proto/inspector.h"

// The formats are those the CLI has always printed with printf: scripts and people read these
// columns. Strings are passed as C strings where printf got them so, so that even a name with an
// embedded NUL prints as before.
namespace ncclwatch::cli {
namespace {

// "name 0x…" as the COMMUNICATOR column shows it ("-" for an unnamed communicator).
std::string CommColumn(const std::string& name, uint64_t hash) {
  return absl::StrFormat("%s %s", name.empty() ? "-" : name, CommHashText(hash));
}

const char* NodeOrUnknown(const std::string& node) {
  return node.empty() ? "unknown" : node.c_str();
}

// The root-cause lines, each followed by its consequences ("" when there is none).
std::string RootCausesText(const ncclwatch::v1::ListStragglersResponse& response) {
  std::string out;
  for (const auto& r : response.root_causes()) {
    absl::StrAppend(
        &out, "Root cause: ", aggregator::RootCauseSentence(r),
        r.since_unix_ns() == 0 ? "" : absl::StrCat(", since ", ClockText(r.since_unix_ns())),
        ".\n");
    for (const auto& c : r.consequences()) {
      absl::StrAppendFormat(
          &out, "  consequence: rank %d of %s on node %s (%s) arrives %.2f ms late\n", c.rank(),
          aggregator::CommWord(c.comm_name(), c.comm_hash()), NodeOrUnknown(c.node()),
          GpuLabel(c.cuda_device()), c.lateness_seconds() * 1e3);
    }
  }
  return out;
}

}  // namespace

std::string ClockText(uint64_t unix_ns) {
  std::time_t secs = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  std::tm tm;
  localtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%H:%M:%S", &tm);
  return buf;
}

std::string RankText(const ncclwatch::v1::RankRef& r) {
  std::string text =
      absl::StrFormat("rank %d (node %s, %s", r.rank(), r.node().empty() ? "unknown" : r.node(),
                      GpuLabel(r.cuda_device()));
  if (!r.pod().empty()) {
    absl::StrAppend(&text, ", pod ", r.pod_namespace().empty() ? "-" : r.pod_namespace(), "/",
                    r.pod());
    if (!r.container().empty()) absl::StrAppend(&text, ", container ", r.container());
  }
  return text + ")";
}

std::string StragglersText(const ncclwatch::v1::ListStragglersResponse& response) {
  std::string out = RootCausesText(response);
  if (response.stragglers_size() == 0) {
    return out.empty() ? "No GPU is slow itself and no rank is flagged as a straggler.\n" : out;
  }
  if (!out.empty()) out += "\n";
  out += absl::StrFormat("%-20s %-28s %5s %-16s %-8s %10s %10s %7s %7s %13s %9s\n", "JOB",
                         "COMMUNICATOR", "RANK", "NODE", "GPU", "LATENESS", "EXCESS", "PEER-Z",
                         "VS-OWN", "ARRIVED-LAST", "SINCE");
  for (const auto& s : response.stragglers()) {
    absl::StrAppendFormat(
        &out, "%-20s %-28s %5d %-16s %-8s %7.2f ms %7.2f ms %7.1f %6.1fx %12.0f%% %9s\n",
        s.job_id().c_str(), CommColumn(s.comm_name(), s.comm_hash()).c_str(), s.rank(),
        NodeOrUnknown(s.node()), GpuLabel(s.cuda_device()).c_str(), s.lateness_seconds() * 1e3,
        s.excess_seconds() * 1e3, s.peer_z_score(), s.history_ratio(),
        s.arrived_last_fraction() * 100, ClockText(s.since_unix_ns()).c_str());
  }
  out += "\n";
  for (const auto& s : response.stragglers()) {
    absl::StrAppendFormat(
        &out,
        "Finding: rank %d on node %s (%s) is slowing communicator %s of job %s: it reaches the "
        "collectives %.2f ms after the first rank (median of its last %u collectives), %.2f ms "
        "later than its punctual peers; %s.\n",
        s.rank(), NodeOrUnknown(s.node()), GpuLabel(s.cuda_device()).c_str(),
        aggregator::CommWord(s.comm_name(), s.comm_hash()).c_str(), s.job_id().c_str(),
        s.lateness_seconds() * 1e3, s.window_collectives(), s.excess_seconds() * 1e3,
        s.history_ratio() >= 2 ? "this is new: far later than its own usual"
                               : "it has been this late all along");
  }
  return out;
}

std::string HangsText(const ncclwatch::v1::ListHangsResponse& response) {
  if (response.hangs_size() == 0 && response.silent_size() == 0) {
    return "No hung collective and no silent rank.\n";
  }
  std::string out;
  if (response.hangs_size() > 0) {
    absl::StrAppendFormat(&out, "%-20s %-28s %-14s %8s %-13s %9s %-9s %s\n", "JOB", "COMMUNICATOR",
                          "COLLECTIVE", "SEQ", "KIND", "AGE", "SINCE", "MISSING RANKS");
  }
  for (const auto& h : response.hangs()) {
    std::vector<std::string> missing;
    for (const auto& r : h.missing()) missing.push_back(absl::StrCat(r.rank()));
    const bool p2p = h.op() == aggregator::kP2pHangOp;
    const std::string seq = p2p ? "-" : absl::StrCat(h.seq());
    absl::StrAppendFormat(
        &out, "%-20s %-28s %-14s %8s %-13s %7.1f s %-9s %s\n", h.job_id().c_str(),
        CommColumn(h.comm_name(), h.comm_hash()).c_str(), p2p ? "Send/Recv" : h.op().c_str(),
        seq.c_str(),
        h.kind() == ncclwatch::v1::HangInfo::NO_PROGRESS ? "no-progress" : "missing-ranks",
        h.age_seconds(), ClockText(h.since_unix_ns()).c_str(),
        missing.empty() ? "-" : absl::StrJoin(missing, ",").c_str());
  }
  if (response.silent_size() > 0) {
    if (response.hangs_size() > 0) out += "\n";
    absl::StrAppendFormat(&out, "%-20s %-28s %5s %-16s %-8s %-12s\n", "JOB", "COMMUNICATOR", "RANK",
                          "NODE", "GPU", "LAST REPORT");
  }
  for (const auto& s : response.silent()) {
    absl::StrAppendFormat(&out, "%-20s %-28s %5d %-16s %-8s %-12s\n", s.job_id().c_str(),
                          CommColumn(s.comm_name(), s.comm_hash()).c_str(), s.rank().rank(),
                          NodeOrUnknown(s.rank().node()), GpuLabel(s.rank().cuda_device()).c_str(),
                          ClockText(s.last_report_unix_ns()).c_str());
  }
  out += "\n";
  for (const auto& h : response.hangs()) {
    const std::string comm = aggregator::CommWord(h.comm_name(), h.comm_hash());
    if (h.kind() == ncclwatch::v1::HangInfo::NO_PROGRESS) {
      absl::StrAppendFormat(
          &out,
          "Finding: %s of communicator %s in job %s has been stuck for %.1f s although all "
          "%u ranks reached it: suspect the network or NVLink fabric.\n",
          aggregator::HangOpText(h).c_str(), comm.c_str(), h.job_id().c_str(), h.age_seconds(),
          h.arrived());
    } else {
      std::vector<std::string> missing;
      for (const auto& r : h.missing()) missing.push_back(RankText(r));
      absl::StrAppendFormat(&out,
                            "Finding: %s of communicator %s in job %s has been stuck for %.1f s: "
                            "%s never reached it.\n",
                            aggregator::HangOpText(h).c_str(), comm.c_str(), h.job_id().c_str(),
                            h.age_seconds(), absl::StrJoin(missing, ", ").c_str());
    }
    for (const auto& c : h.consequences()) {
      absl::StrAppendFormat(&out, "  consequence: %s of communicator %s is stuck behind it (%s)\n",
                            aggregator::HangOpText(c).c_str(),
                            aggregator::CommWord(c.comm_name(), c.comm_hash()).c_str(),
                            c.kind() == ncclwatch::v1::HangInfo::NO_PROGRESS
                                ? "queued on the same GPUs"
                                : absl::StrCat("waiting for ranks stuck in it: ", c.missing_size(),
                                               " of ", c.nranks())
                                      .c_str());
    }
  }
  for (const auto& s : response.silent()) {
    absl::StrAppendFormat(&out,
                          "Finding: %s of communicator %s in job %s stopped reporting at %s while "
                          "the other ranks carry on (process dead or stuck outside NCCL?).\n",
                          RankText(s.rank()).c_str(),
                          aggregator::CommWord(s.comm_name(), s.comm_hash()).c_str(),
                          s.job_id().c_str(), ClockText(s.last_report_unix_ns()).c_str());
  }
  return out;
}

std::string DegradedText(const ncclwatch::v1::ListDegradedResponse& response) {
  if (response.comms_size() == 0) return "No degraded communicator.\n";
  std::string out =
      absl::StrFormat("%-20s %-28s %-7s %-14s %-10s %9s %9s  %s\n", "JOB", "COMMUNICATOR", "CLASS",
                      "COLLECTIVE", "SIZE", "BUS GB/s", "BASELINE", "NODES");
  for (const auto& d : response.comms()) {
    absl::StrAppendFormat(&out, "%-20s %-28s %-7s %-14s %-10s %9.1f %9.1f  %s\n",
                          d.job_id().c_str(), CommColumn(d.comm_name(), d.comm_hash()).c_str(),
                          d.comm_class().c_str(), d.op().c_str(), d.message_size().c_str(),
                          d.bus_bw_gbs(), d.baseline_bus_bw_gbs(),
                          absl::StrJoin(d.nodes(), ",").c_str());
  }
  out += "\n";
  for (const auto& s : response.suspects()) {
    absl::StrAppendFormat(&out,
                          "Finding: the network of node %s is the common factor of %u degraded "
                          "hybrid communicators of job %s (its NVLink-only communicators are "
                          "healthy): check its NICs, cables and switch ports.\n",
                          s.node().c_str(), s.degraded_comms(), s.job_id().c_str());
  }
  if (response.suspects_size() == 0) {
    absl::StrAppendFormat(&out,
                          "Finding: %d communicator(s) degraded; the evidence does not single out "
                          "a node yet.\n",
                          response.comms_size());
  }
  return out;
}

std::string JobsText(const ncclwatch::v1::ListJobsResponse& response) {
  if (response.jobs_size() == 0) return "No job has reported yet.\n";
  std::string out =
      absl::StrFormat("%-24s %-7s %5s %6s %6s %10s %5s %8s %6s  %s\n", "JOB", "STATE", "COMMS",
                      "RANKS", "NODES", "STRAGGLERS", "HUNG", "DEGRADED", "SILENT", "LAST REPORT");
  for (const auto& j : response.jobs()) {
    absl::StrAppendFormat(&out, "%-24s %-7s %5u %6u %6d %10u %5u %8u %6u  %s\n", j.job_id().c_str(),
                          j.state().empty() ? "running" : j.state().c_str(), j.communicators(),
                          j.ranks(), j.nodes_size(), j.stragglers(), j.hung_communicators(),
                          j.degraded_communicators(), j.silent_ranks(),
                          ClockText(j.last_report_unix_ns()).c_str());
  }
  for (const auto& j : response.jobs()) {
    if (j.state() == "ended") {
      absl::StrAppendFormat(&out,
                            "\nJob %s ended at %s (%s); its findings ended with it, the counts "
                            "above are from when it ran.\n",
                            j.job_id(), ClockText(j.ended_unix_ns()), j.end_reason());
      continue;
    }
    if (j.unreported_ranks() == 0) continue;
    absl::StrAppendFormat(&out,
                          "\nJob %s is incomplete: %u ranks of a communicator never reported, so "
                          "its incomplete communicators are not judged (`ncclwatch comms`, "
                          "RANKS_UNREPORTED in `ncclwatch events`).\n",
                          j.job_id(), j.unreported_ranks());
  }
  return out;
}

std::string CommsText(const ncclwatch::v1::ListCommsResponse& response) {
  if (response.comms_size() == 0) return "No communicator has reported yet.\n";
  std::string out = absl::StrFormat("%-24s %-28s %-7s %6s %6s %-20s %s\n", "JOB", "COMMUNICATOR",
                                    "CLASS", "RANKS", "NODES", "HEALTH", "LAST REPORT");
  for (const auto& c : response.comms()) {
    absl::StrAppendFormat(&out, "%-24s %-28s %-7s %6d %6d %-20s %s\n", c.job_id().c_str(),
                          CommColumn(c.comm_name(), c.comm_hash()).c_str(), c.comm_class().c_str(),
                          c.nranks(), c.n_nodes(), c.health().c_str(),
                          ClockText(c.last_report_unix_ns()).c_str());
  }
  return out;
}

std::string QueryText(const ncclwatch::v1::QueryRangeResponse& response,
                      const std::string& selector, double since_s) {
  if (response.series_size() == 0) {
    return absl::StrFormat("No stored point matches %s in the last %.0f s.\n", selector.c_str(),
                           since_s);
  }
  std::string out;
  for (const auto& ts : response.series()) {
    std::vector<std::string> labels;
    for (const auto& l : ts.labels()) {
      labels.push_back(absl::StrFormat("%s=\"%s\"", l.name(), l.value()));
    }
    absl::StrAppendFormat(&out, "%s{%s}  %d points\n", ts.name().c_str(),
                          absl::StrJoin(labels, ",").c_str(), ts.points_size());
    for (const auto& p : ts.points()) {
      absl::StrAppendFormat(&out, "  %s.%03lld  %g\n",
                            ClockText(static_cast<uint64_t>(p.time_ms()) * 1'000'000).c_str(),
                            static_cast<long long>(p.time_ms() % 1000), p.value());
    }
  }
  if (response.truncated()) {
    out += "(more series matched than were returned: narrow the selector)\n";
  }
  return out;
}

std::string EventLine(const ncclwatch::v1::Event& event) {
  return absl::StrFormat("%s  %s\n", ClockText(event.time_unix_ns()).c_str(),
                         event.summary().c_str());
}

std::string NoEventsText(double since_s, bool follow) {
  return absl::StrFormat("No detection event in the last %.0f s.%s\n", since_s,
                         follow ? " Waiting for new ones (Ctrl-C to stop)." : "");
}

std::string TraceWrittenText(const ncclwatch::v1::GetTraceResponse& response,
                             const std::string& job, const std::string& path) {
  size_t ops = 0;
  for (const auto& r : response.ranks()) ops += r.ops_size();
  return absl::StrFormat(
      "wrote %zu sampled collectives of %d ranks (communicator %s of job %s) to %s%s\n"
      "open it in https://ui.perfetto.dev or chrome://tracing\n",
      ops, response.ranks_size(), response.comm_name().c_str(), job.c_str(), path.c_str(),
      response.truncated() ? " (truncated: narrow --since-s)" : "");
}

}  // namespace ncclwatch::cli

#include "aggregator/cli/tables.h"

#include <algorithm>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "aggregator/detect/hang.h"
#include "aggregator/findings/findings.h"
#include "common/op_math.h"
#include "proto/inspector.h"

// Tables are sized to their content: each column as wide as its widest cell or header, one space
// apart, numbers right-aligned, so that long job ids and communicator names never push the
// columns out of line. Strings are passed as C strings where printf got them so, so that even a
// name with an embedded NUL prints as before.
namespace ncclwatch::cli {
namespace {

// A table whose columns fit their widest cell. Each column: its header, and whether its cells are
// right-aligned (numbers). Lines carry no trailing spaces.
class TextTable {
 public:
  explicit TextTable(std::vector<std::pair<std::string, bool>> columns)
      : columns_(std::move(columns)) {}
  void Row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  std::string Render() const {
    std::vector<size_t> width(columns_.size());
    for (size_t c = 0; c < columns_.size(); ++c) width[c] = columns_[c].first.size();
    for (const auto& row : rows_) {
      for (size_t c = 0; c < row.size() && c < width.size(); ++c) {
        width[c] = std::max(width[c], row[c].size());
      }
    }
    std::string out;
    const auto line = [&](const std::vector<std::string>& cells) {
      std::string text;
      for (size_t c = 0; c < columns_.size(); ++c) {
        const std::string& cell = c < cells.size() ? cells[c] : std::string();
        if (c > 0) text += ' ';
        const std::string pad(width[c] - cell.size(), ' ');
        text += columns_[c].second ? pad + cell : cell + pad;
      }
      while (!text.empty() && text.back() == ' ') text.pop_back();
      out += text + "\n";
    };
    std::vector<std::string> header;
    for (const auto& [name, right] : columns_) header.push_back(name);
    line(header);
    for (const auto& row : rows_) line(row);
    return out;
  }

 private:
  std::vector<std::pair<std::string, bool>> columns_;
  std::vector<std::vector<std::string>> rows_;
};

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
          &out, "  consequence: rank %d of %s on node %s (%s%s) arrives %.2f ms late\n", c.rank(),
          aggregator::CommWord(c.comm_name(), c.comm_hash()), NodeOrUnknown(c.node()),
          c.has_global_rank() ? absl::StrCat("global rank ", c.global_rank(), ", ") : "",
          GpuLabel(c.cuda_device()), c.lateness_seconds() * 1e3);
    }
  }
  return out;
}

}  // namespace

std::string ClockText(uint64_t unix_ns, bool millis) {
  std::time_t secs = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  std::tm tm;
  localtime_r(&secs, &tm);
  char date[32];
  char zone[16];
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S", &tm);
  std::strftime(zone, sizeof(zone), "%Z", &tm);
  if (!millis) return absl::StrCat(date, " ", zone);
  return absl::StrFormat("%s.%03d %s", date, static_cast<int>(unix_ns / 1'000'000 % 1000), zone);
}

std::string StragglersText(const ncclwatch::v1::ListStragglersResponse& response) {
  std::string out = RootCausesText(response);
  for (const auto& n : response.slow_nodes()) {
    absl::StrAppend(&out, "Finding: ", aggregator::SlowNodeSentence(n), ".\n");
  }
  if (response.stragglers_size() == 0) {
    return out.empty() ? "No GPU is slow itself and no rank is flagged as a straggler.\n" : out;
  }
  if (!out.empty()) out += "\n";
  TextTable table({{"JOB", false},
                   {"GLOBAL-RANK", true},
                   {"COMMUNICATOR", false},
                   {"RANK", true},
                   {"NODE", false},
                   {"GPU", false},
                   {"LATENESS", true},
                   {"EXCESS", true},
                   {"PEER-Z", true},
                   {"VS-OWN", true},
                   {"ARRIVED-LAST", true},
                   {"SINCE", false}});
  for (const auto& s : response.stragglers()) {
    table.Row(
        {s.job_id().c_str(), s.has_global_rank() ? absl::StrCat(s.global_rank()) : "-",
         CommColumn(s.comm_name(), s.comm_hash()), absl::StrCat(s.rank()), NodeOrUnknown(s.node()),
         GpuLabel(s.cuda_device()), absl::StrFormat("%.2f ms", s.lateness_seconds() * 1e3),
         absl::StrFormat("%.2f ms", s.excess_seconds() * 1e3),
         absl::StrFormat("%.1f", s.peer_z_score()), absl::StrFormat("%.1fx", s.history_ratio()),
         absl::StrFormat("%.0f%%", s.arrived_last_fraction() * 100), ClockText(s.since_unix_ns())});
  }
  out += table.Render();
  out += "\n";
  for (const auto& s : response.stragglers()) {
    absl::StrAppend(&out, "Finding: ", aggregator::StragglerSentence(s), ".\n");
  }
  return out;
}

std::string HangsText(const ncclwatch::v1::ListHangsResponse& response) {
  if (response.hangs_size() == 0 && response.silent_size() == 0) {
    return "No hung collective and no silent rank.\n";
  }
  std::string out;
  if (response.hangs_size() > 0) {
    TextTable table({{"JOB", false},
                     {"COMMUNICATOR", false},
                     {"COLLECTIVE", false},
                     {"SEQ", true},
                     {"KIND", false},
                     {"AGE", true},
                     {"SINCE", false},
                     {"MISSING RANKS", false}});
    for (const auto& h : response.hangs()) {
      std::vector<std::string> missing;
      for (const auto& r : h.missing()) missing.push_back(absl::StrCat(r.rank()));
      const bool p2p = h.op() == aggregator::kP2pHangOp;
      table.Row({h.job_id().c_str(), CommColumn(h.comm_name(), h.comm_hash()),
                 p2p ? "Send/Recv" : h.op().c_str(), p2p ? "-" : absl::StrCat(h.seq()),
                 h.kind() == ncclwatch::v1::HangInfo::NO_PROGRESS ? "no-progress" : "missing-ranks",
                 absl::StrFormat("%.1f s", h.age_seconds()), ClockText(h.since_unix_ns()),
                 missing.empty() ? "-" : absl::StrJoin(missing, ",")});
    }
    out += table.Render();
  }
  if (response.silent_size() > 0) {
    if (response.hangs_size() > 0) out += "\n";
    TextTable table({{"JOB", false},
                     {"COMMUNICATOR", false},
                     {"RANK", true},
                     {"NODE", false},
                     {"GPU", false},
                     {"LAST REPORT", false}});
    for (const auto& s : response.silent()) {
      table.Row({s.job_id().c_str(), CommColumn(s.comm_name(), s.comm_hash()),
                 absl::StrCat(s.rank().rank()), NodeOrUnknown(s.rank().node()),
                 GpuLabel(s.rank().cuda_device()), ClockText(s.last_report_unix_ns())});
    }
    out += table.Render();
  }
  out += "\n";
  for (const auto& h : response.hangs()) {
    absl::StrAppend(&out, "Finding: ", aggregator::HangSentence(h), ".\n");
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
  for (const auto& n : response.silent_nodes()) {
    absl::StrAppend(&out, "Finding: ", aggregator::SilentNodeSentence(n), ", since ",
                    ClockText(n.since_unix_ns()), ".\n");
  }
  for (const auto& s : response.silent()) {
    absl::StrAppend(&out, "Finding: ", aggregator::SilentSentence(s), "; last report at ",
                    ClockText(s.last_report_unix_ns()), ".\n");
  }
  return out;
}

std::string DegradedText(const ncclwatch::v1::ListDegradedResponse& response) {
  if (response.comms_size() == 0) return "No degraded communicator.\n";
  TextTable table({{"JOB", false},
                   {"COMMUNICATOR", false},
                   {"CLASS", false},
                   {"COLLECTIVE", false},
                   {"SIZE", false},
                   {"BUS GB/s", true},
                   {"BASELINE", true},
                   {"NODES", false}});
  for (const auto& d : response.comms()) {
    table.Row({d.job_id().c_str(), CommColumn(d.comm_name(), d.comm_hash()), d.comm_class().c_str(),
               d.op().c_str(), d.message_size().c_str(), absl::StrFormat("%.1f", d.bus_bw_gbs()),
               absl::StrFormat("%.1f", d.baseline_bus_bw_gbs()), absl::StrJoin(d.nodes(), ",")});
  }
  std::string out = table.Render();
  out += "\n";
  for (const auto& s : response.suspects()) {
    absl::StrAppend(&out, "Finding: ", aggregator::SuspectSentence(s), ".\n");
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
  TextTable table({{"JOB", false},
                   {"STATE", false},
                   {"COMMS", true},
                   {"RANKS", true},
                   {"NODES", true},
                   {"STRAGGLERS", true},
                   {"HUNG", true},
                   {"DEGRADED", true},
                   {"SILENT", true},
                   {"LAST REPORT", false}});
  for (const auto& j : response.jobs()) {
    table.Row({j.job_id().c_str(), j.state().empty() ? "running" : j.state().c_str(),
               absl::StrCat(j.communicators()), absl::StrCat(j.ranks()),
               absl::StrCat(j.nodes_size()), absl::StrCat(j.stragglers()),
               absl::StrCat(j.hung_communicators()), absl::StrCat(j.degraded_communicators()),
               absl::StrCat(j.silent_ranks()), ClockText(j.last_report_unix_ns())});
  }
  std::string out = table.Render();
  for (const auto& j : response.jobs()) {
    if (j.state() == "ended") {
      absl::StrAppendFormat(&out,
                            "\nJob %s ended at %s (%s); its findings ended with it, the counts "
                            "above are from when it ran.\n",
                            j.job_id(), ClockText(j.ended_unix_ns()), j.end_reason());
      continue;
    }
    if (j.imbalanced_communicators() > 0) {
      const auto& w = j.costliest_imbalance();
      absl::StrAppendFormat(
          &out,
          "\nJob %s: workload imbalance (not a fault) in %u communicators: the busiest rank "
          "changes from one collective to the next; costliest: %s's %s waits %.2f ms for its "
          "busiest rank, %.0f%% of the work before it (`ncclwatch comms`).\n",
          j.job_id(), j.imbalanced_communicators(), w.comm_name().empty() ? "?" : w.comm_name(),
          w.op(), w.wait_seconds() * 1e3, 100 * aggregator::ImbalanceShare(w));
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
  TextTable table({{"JOB", false},
                   {"COMMUNICATOR", false},
                   {"CLASS", false},
                   {"RANKS", true},
                   {"NODES", true},
                   {"HEALTH", false},
                   {"LAST REPORT", false}});
  for (const auto& c : response.comms()) {
    table.Row({c.job_id().c_str(), CommColumn(c.comm_name(), c.comm_hash()), c.comm_class().c_str(),
               absl::StrCat(c.nranks()), absl::StrCat(c.n_nodes()), c.health().c_str(),
               ClockText(c.last_report_unix_ns())});
  }
  std::string out = table.Render();
  // Telemetry that lied or never arrived is no finding, but whoever reads the figures should know.
  for (const auto& c : response.comms()) {
    if (c.completions_lost() > 0) {
      absl::StrAppendFormat(&out,
                            "Lost telemetry: communicator %s in job %s: %d operations never "
                            "reported their completion though later ones did (not taken for a "
                            "hang; ncclwatch_plugin_drops_total{kind=\"completions_lost\"} per "
                            "rank).\n",
                            aggregator::CommWord(c.comm_name(), c.comm_hash()), c.job_id(),
                            c.completions_lost());
    }
    if (c.bogus_timings() == 0) continue;
    absl::StrAppendFormat(&out,
                          "Bad telemetry: communicator %s in job %s: %d operations had GPU "
                          "timestamps that cannot be true (left out of every figure; "
                          "ncclwatch_plugin_drops_total{kind=\"bogus_timings\"} per rank).\n",
                          aggregator::CommWord(c.comm_name(), c.comm_hash()), c.job_id(),
                          c.bogus_timings());
  }
  // Data-dependent imbalance is no finding either, but it costs time every step.
  for (const auto& c : response.comms()) {
    for (const auto& w : c.workload_imbalance()) {
      absl::StrAppendFormat(
          &out,
          "Workload imbalance (not a fault): communicator %s in job %s: its %s waits %.2f ms for "
          "its busiest rank, %.0f%% of the work before it, and the busiest rank changes from one "
          "%s to the next: a property of the workload (mixture-of-experts routing, variable "
          "sequence lengths, a pipeline's schedule).\n",
          aggregator::CommWord(c.comm_name(), c.comm_hash()), c.job_id(), w.op(),
          w.wait_seconds() * 1e3, 100 * aggregator::ImbalanceShare(w), w.op());
    }
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
      absl::StrAppendFormat(
          &out, "  %s  %g\n",
          ClockText(static_cast<uint64_t>(p.time_ms()) * 1'000'000, /*millis=*/true), p.value());
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

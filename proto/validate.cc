#include "validate.h"

#include <cmath>

#include "samples.h"

namespace ncclwatch {
namespace {

ReportVerdict Reject(std::string reason, std::string detail) {
  return ReportVerdict{false, std::move(reason), std::move(detail)};
}

bool Finite(double v) { return std::isfinite(v) && v >= 0; }
bool ExecTime(double us) { return Finite(us) && us <= kMaxExecTimeUs; }

}  // namespace

ReportVerdict ValidateReport(const ncclwatch::v1::RankReport& r) {
  if (!r.has_identity()) return Reject("missing_identity", "report has no identity");
  const auto& id = r.identity();
  if (id.job_id().empty() || id.job_id().size() > kMaxLabelLength) {
    return Reject("bad_job_id", "job_id must be 1.." + std::to_string(kMaxLabelLength) + " bytes");
  }
  for (const std::string* label : {&id.comm_name(), &id.host(), &id.node(), &id.gpu_uuid(),
                                   &id.pod(), &id.pod_namespace(), &id.container()}) {
    if (label->size() > kMaxLabelLength) {
      return Reject("bad_label",
                    "comm_name, host, node, gpu_uuid, pod, pod_namespace or "
                    "container longer than " +
                        std::to_string(kMaxLabelLength) + " bytes");
    }
  }
  if (id.nranks() < 1 || id.nranks() > kMaxRanks) {
    return Reject("bad_nranks", "nranks " + std::to_string(id.nranks()) + " out of range");
  }
  if (id.rank() < 0 || id.rank() >= id.nranks()) {
    return Reject("bad_rank", "rank " + std::to_string(id.rank()) + " not in [0, " +
                                  std::to_string(id.nranks()) + ")");
  }
  if (id.n_nodes() < 1 || id.n_nodes() > id.nranks()) {
    return Reject("bad_n_nodes", "n_nodes " + std::to_string(id.n_nodes()) + " not in [1, nranks]");
  }
  if ((id.has_global_rank() && (id.global_rank() < 0 || id.global_rank() >= kMaxRanks)) ||
      (id.has_local_rank() && (id.local_rank() < 0 || id.local_rank() >= kMaxRanks))) {
    return Reject("bad_rank", "global_rank " + std::to_string(id.global_rank()) +
                                  " or local_rank " + std::to_string(id.local_rank()) +
                                  " not in [0, 2^20)");
  }
  if (r.stats_size() > kMaxStatsPerReport || SampleCount(r) > kMaxSamplesPerReport ||
      r.in_flight_size() > kMaxInFlightPerReport) {
    return Reject("too_large", "report carries too many stats, samples or in-flight entries");
  }
  if (r.interval_end_unix_ns() < r.interval_start_unix_ns()) {
    return Reject("bad_interval", "interval ends before it starts");
  }
  if (r.interval_end_unix_ns() > kMaxUnixNs || r.clock().host_unix_ns() > kMaxUnixNs) {
    return Reject("bad_timestamp", "interval end or clock sync time past the year 2096");
  }
  for (const auto& op : r.in_flight()) {
    if (op.age_ns() > kMaxInFlightAgeNs || op.op().size() > kMaxLabelLength) {
      return Reject("bad_in_flight", "in-flight operation older than 3 years or with a long name");
    }
  }
  for (const auto& s : r.stats()) {
    if (!ExecTime(s.exec_time_us_sum()) || !ExecTime(s.exec_time_us_min()) ||
        !ExecTime(s.exec_time_us_max()) || !std::isfinite(s.bus_bw_gbs_log_sum()) ||
        !std::isfinite(s.alg_bw_gbs_log_sum()) || s.bw_samples() > s.count() ||
        s.op().size() > kMaxLabelLength || s.message_size().size() > kMaxLabelLength ||
        s.algo_proto().size() > kMaxLabelLength) {
      return Reject("bad_stats",
                    "op stats with non-finite, negative, absurdly large or inconsistent values");
    }
  }
  if (!SampleColumnsWellFormed(r)) {
    return Reject("bad_sample", "sample column arrays of different lengths");
  }
  for (const auto& col : r.sample_columns()) {
    if (col.op().size() > kMaxLabelLength || col.algo_proto().size() > kMaxLabelLength) {
      return Reject("bad_sample", "sample column op or algo_proto too long");
    }
    if (col.has_peer()) return Reject("bad_sample", "collective sample column with a peer");
  }
  for (const auto& col : r.p2p_sample_columns()) {
    if (!col.has_peer() || (col.op() != "Send" && col.op() != "Recv") || col.peer() < 0 ||
        col.peer() >= static_cast<int64_t>(r.identity().nranks()) ||
        col.peer() == static_cast<int64_t>(r.identity().rank())) {
      return Reject("bad_sample",
                    "point-to-point sample column that is not a Send or Recv with another rank "
                    "of the communicator");
    }
  }
  return {};
}

}  // namespace ncclwatch

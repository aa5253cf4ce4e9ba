#include "aggregator/query/trace.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "aggregator/detect/median.h"
#include "proto/samples.h"

namespace ncclwatch::aggregator {

absl::StatusOr<ncclwatch::v1::GetTraceResponse> ReadTrace(
    const Store& store, const ncclwatch::v1::GetTraceRequest& request, int64_t now_ns) {
  if (request.job_id().empty() || request.comm().empty()) {
    return absl::InvalidArgumentError("job_id and comm (a name or 0x hash) are required");
  }
  uint64_t hash = 0;
  const bool by_hash =
      request.comm().rfind("0x", 0) == 0 && absl::SimpleHexAtoi(request.comm().substr(2), &hash);
  const auto end_ms =
      static_cast<int64_t>(request.end_unix_ms() == 0 ? now_ns / 1'000'000 : request.end_unix_ms());
  const auto start_ms = static_cast<int64_t>(request.start_unix_ms());
  if (start_ms > end_ms) return absl::InvalidArgumentError("start_unix_ms is after end_unix_ms");
  const uint64_t max_ops = request.max_ops() == 0 ? 200'000 : request.max_ops();

  ncclwatch::v1::GetTraceResponse out;
  std::map<int, ncclwatch::v1::TraceRank> ranks;
  uint64_t ops = 0;
  absl::Status s = store.ReplayBatches(
      start_ms * 1'000'000,
      [&](const ncclwatch::v1::NodeBatch& batch, int64_t) {
        for (const auto& report : batch.reports()) {
          const auto& id = report.identity();
          if (id.job_id() != request.job_id() ||
              (by_hash ? id.comm_hash() != hash : id.comm_name() != request.comm())) {
            continue;
          }
          out.set_comm_hash(id.comm_hash());
          out.set_comm_name(id.comm_name());
          out.set_nranks(id.nranks());
          ncclwatch::v1::TraceRank& rank = ranks[id.rank()];
          rank.set_rank(id.rank());
          rank.set_node(id.node());
          rank.set_cuda_device(id.cuda_device());
          ForEachSample(report, [&](const ncclwatch::v1::SampleColumn& col, const Sample& sample) {
            if (ops >= max_ops) {
              out.set_truncated(true);
              return;
            }
            ++ops;
            auto* op = rank.add_ops();
            op->set_op(col.op());
            op->set_seq(sample.seq);
            op->set_start_ns(static_cast<int64_t>(sample.gpu_start_ns));
            op->set_duration_ns(sample.duration_ns);
          });
        }
      },
      end_ms * 1'000'000);
  if (!s.ok()) return s;
  if (ranks.empty()) {
    return absl::NotFoundError(absl::StrCat("no report of communicator ", request.comm(),
                                            " of job ", request.job_id(), " in that window"));
  }
  AlignTraceClocks(ranks);
  out.set_job_id(request.job_id());
  for (auto& [r, rank] : ranks) *out.add_ranks() = std::move(rank);
  return out;
}

void AlignTraceClocks(std::map<int, ncclwatch::v1::TraceRank>& ranks) {
  if (ranks.empty()) return;
  std::map<std::pair<std::string, uint64_t>, int64_t> reference_end;
  for (const auto& op : ranks.begin()->second.ops()) {
    reference_end[{op.op(), op.seq()}] = op.start_ns() + static_cast<int64_t>(op.duration_ns());
  }
  for (auto& [r, rank] : ranks) {
    std::vector<double> diffs;
    for (const auto& op : rank.ops()) {
      auto ref = reference_end.find({op.op(), op.seq()});
      if (ref == reference_end.end()) continue;
      diffs.push_back(static_cast<double>(op.start_ns() + static_cast<int64_t>(op.duration_ns()) -
                                          ref->second));
    }
    const auto offset = static_cast<int64_t>(std::llround(Median(diffs)));
    rank.set_clock_offset_ns(offset);
    for (auto& op : *rank.mutable_ops()) op.set_start_ns(op.start_ns() - offset);
  }
}

}  // namespace ncclwatch::aggregator

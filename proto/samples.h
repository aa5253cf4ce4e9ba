// Encoding and decoding of RankReport.sample_columns (docs/wire-format.md): sampled collectives
// grouped by (op, algo_proto, bytes, channels, peer), seq and GPU start delta-encoded.
#ifndef NCCLWATCH_PROTO_SAMPLES_H_
#define NCCLWATCH_PROTO_SAMPLES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>

#include "ncclwatch/v1/report.pb.h"

namespace ncclwatch {

struct Sample {
  uint64_t seq = 0;
  uint64_t gpu_start_ns = 0;
  uint64_t duration_ns = 0;
  // Time from the end of the process's previous operation to this one's start (SampleColumn
  // own_time_ns); -1 when unknown, including columns written by plugins that predate it.
  int64_t own_time_ns = -1;
  // How long the kernel waited for its peers (SampleColumn sync_wait_ns, ABI v7 KernelPhase);
  // 0 when unknown.
  uint64_t sync_wait_ns = 0;
};

// Appends samples to a report's columns. Samples of one column should arrive in seq order for the
// smallest encoding (any order decodes correctly).
class SampleColumnWriter {
 public:
  explicit SampleColumnWriter(ncclwatch::v1::RankReport* report) : report_(report) {}
  // `peer` >= 0: a point-to-point column (RankReport.p2p_sample_columns, SampleColumn.peer);
  // -1: a collective's (sample_columns).
  void Add(const std::string& op, const std::string& algo_proto, uint64_t bytes, uint32_t channels,
           const Sample& sample, int32_t peer = -1);

 private:
  struct Cursor {
    int column;
    uint64_t last_seq;
    uint64_t last_start;
  };
  ncclwatch::v1::RankReport* report_;
  std::map<std::tuple<std::string, std::string, uint64_t, uint32_t, int32_t>, Cursor> cursors_;
};

// Both column fields are covered by the three below.
// True when every column's arrays have the same length (own_time_ns and sync_wait_ns may also be
// empty).
bool SampleColumnsWellFormed(const ncclwatch::v1::RankReport& report);
// Total number of samples in the report.
size_t SampleCount(const ncclwatch::v1::RankReport& report);
// Calls `fn` for every sample, column by column: the collectives' columns, then the
// point-to-point ones (p2p_sample_columns, SampleColumn.peer set). The report must be well formed.
void ForEachSample(
    const ncclwatch::v1::RankReport& report,
    const std::function<void(const ncclwatch::v1::SampleColumn&, const Sample&)>& fn);

}  // namespace ncclwatch

#endif  // NCCLWATCH_PROTO_SAMPLES_H_

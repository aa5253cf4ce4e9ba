#include "samples.h"

#include <algorithm>

namespace ncclwatch {

void SampleColumnWriter::Add(const std::string& op, const std::string& algo_proto, uint64_t bytes,
                             uint32_t channels, const Sample& s, int32_t peer) {
  auto [it, inserted] =
      cursors_.try_emplace({op, algo_proto, bytes, channels, peer}, Cursor{0, 0, 0});
  Cursor& c = it->second;
  if (inserted) {
    c.column = peer >= 0 ? report_->p2p_sample_columns_size() : report_->sample_columns_size();
    auto* col = peer >= 0 ? report_->add_p2p_sample_columns() : report_->add_sample_columns();
    col->set_op(op);
    col->set_algo_proto(algo_proto);
    col->set_bytes(bytes);
    col->set_channels(channels);
    if (peer >= 0) col->set_peer(peer);
  }
  auto* col = peer >= 0 ? report_->mutable_p2p_sample_columns(c.column)
                        : report_->mutable_sample_columns(c.column);
  // Differences are taken modulo 2^64 and read back the same way, so any order round-trips.
  col->add_seq_delta(static_cast<int64_t>(s.seq - c.last_seq));
  col->add_gpu_start_delta_ns(static_cast<int64_t>(s.gpu_start_ns - c.last_start));
  col->add_duration_ns(s.duration_ns);
  col->add_own_time_ns(s.own_time_ns);
  // Only columns with a sync wait carry the array: backfilled with "unknown" when it first shows.
  if (s.sync_wait_ns != 0 || col->sync_wait_ns_size() != 0) {
    while (col->sync_wait_ns_size() < col->seq_delta_size() - 1) col->add_sync_wait_ns(0);
    col->add_sync_wait_ns(s.sync_wait_ns);
  }
  c.last_seq = s.seq;
  c.last_start = s.gpu_start_ns;
}

namespace {

// Both kinds of column, collectives first.
template <typename Fn>
void ForEachColumn(const ncclwatch::v1::RankReport& report, Fn&& fn) {
  for (const auto& col : report.sample_columns()) fn(col);
  for (const auto& col : report.p2p_sample_columns()) fn(col);
}

}  // namespace

bool SampleColumnsWellFormed(const ncclwatch::v1::RankReport& report) {
  bool ok = true;
  ForEachColumn(report, [&](const ncclwatch::v1::SampleColumn& col) {
    ok = ok && col.seq_delta_size() == col.gpu_start_delta_ns_size() &&
         col.seq_delta_size() == col.duration_ns_size() &&
         (col.own_time_ns_size() == 0 || col.own_time_ns_size() == col.seq_delta_size()) &&
         (col.sync_wait_ns_size() == 0 || col.sync_wait_ns_size() == col.seq_delta_size());
  });
  return ok;
}

size_t SampleCount(const ncclwatch::v1::RankReport& report) {
  size_t n = 0;
  ForEachColumn(report, [&](const ncclwatch::v1::SampleColumn& col) { n += col.seq_delta_size(); });
  return n;
}

void ForEachSample(
    const ncclwatch::v1::RankReport& report,
    const std::function<void(const ncclwatch::v1::SampleColumn&, const Sample&)>& fn) {
  ForEachColumn(report, [&](const ncclwatch::v1::SampleColumn& col) {
    Sample s;
    const bool has_own_time = col.own_time_ns_size() == col.seq_delta_size();
    const bool has_sync = col.sync_wait_ns_size() == col.seq_delta_size();
    for (int i = 0; i < col.seq_delta_size(); ++i) {
      s.seq += static_cast<uint64_t>(col.seq_delta(i));
      s.gpu_start_ns += static_cast<uint64_t>(col.gpu_start_delta_ns(i));
      s.duration_ns = col.duration_ns(i);
      // Negative values other than -1 cannot come from a plugin: read as unknown.
      s.own_time_ns = has_own_time ? std::max<int64_t>(-1, col.own_time_ns(i)) : -1;
      s.sync_wait_ns = has_sync ? col.sync_wait_ns(i) : 0;
      fn(col, s);
    }
  });
}

}  // namespace ncclwatch

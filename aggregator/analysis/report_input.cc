#include "aggregator/analysis/report_input.h"

namespace ncclwatch::aggregator {

void ToRankInterval(const ncclwatch::v1::RankReport& report, RankInterval* out) {
  const auto& id = report.identity();
  RankInterval& r = *out;
  r.rank = id.rank();
  r.nranks = id.nranks();
  r.n_nodes = id.n_nodes();
  r.node = id.node();
  r.final = report.final();
  r.interval_end_ns = static_cast<int64_t>(report.interval_end_unix_ns());
  r.in_flight.clear();
  r.in_flight.reserve(report.in_flight_size());
  for (const auto& op : report.in_flight()) {
    // Plugins report how many channels started; an operation without channels (none reported)
    // is taken as started, which is what the hang verdicts assumed before the field mattered.
    r.in_flight.push_back(InFlightOp{op.op(), op.seq(), op.p2p(), op.peer(), op.age_ns(),
                                     op.channels() == 0 || op.channels_started() > 0});
  }
  r.stats.clear();
  r.stats.reserve(report.stats_size());
  for (const auto& s : report.stats()) {
    r.stats.push_back(
        OpStats{s.op(), s.message_size(), s.p2p(), s.count(), s.bytes(), s.exec_time_us_min()});
  }
}

}  // namespace ncclwatch::aggregator

// Reports for the analyzer's tests: one rank's interval of sampled AllReduces (and a Send), with
// chosen ranks arriving late.
#ifndef NCCLWATCH_AGGREGATOR_ANALYSIS_ANALYZER_TEST_UTIL_H_
#define NCCLWATCH_AGGREGATOR_ANALYSIS_ANALYZER_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <set>

#include "ncclwatch/v1/report.pb.h"
#include "proto/samples.h"
#include "proto/testing/report_builder.h"

namespace ncclwatch::aggregator {

// One report per rank per "interval" with `n` sampled AllReduces; the ranks in `slow` arrive 2 ms
// late.
inline ncclwatch::v1::RankReport Report(int rank, int nranks, uint64_t first_seq, int n,
                                        const std::set<int>& slow) {
  ncclwatch::v1::RankReport r = testing::ReportFrom({.job_id = "job-7",
                                                     .cuda_device = rank % 4,
                                                     .comm_hash = 0xfeed,
                                                     .comm_name = "world",
                                                     .rank = rank,
                                                     .nranks = nranks,
                                                     .n_nodes = 2,
                                                     .node = rank < 4 ? "node-a" : "node-b"});
  auto* st = r.add_stats();
  st->set_op("AllReduce");
  st->set_algo_proto("RING_SIMPLE");
  st->set_message_size("32-33MB");
  st->set_peer(-1);
  st->set_count(4);
  st->set_exec_time_us_sum(400);
  st->set_bus_bw_gbs_log_sum(4 * std::log(20.0));
  st->set_bw_samples(4);
  auto* p2p = r.add_stats();
  p2p->set_op("Send");
  p2p->set_p2p(true);
  p2p->set_message_size("1-2MB");
  p2p->set_peer((rank + 1) % nranks);
  p2p->set_count(2);
  p2p->set_exec_time_us_sum(50);
  p2p->set_bus_bw_gbs_log_sum(2 * std::log(10.0));
  p2p->set_bw_samples(2);
  SampleColumnWriter writer(&r);
  for (int i = 0; i < n; ++i) {
    uint64_t arrival = 1'000'000 + (slow.count(rank) ? 2'000'000 : (rank * 10'000));
    writer.Add("AllReduce", "RING_SIMPLE", 1 << 25, 4,
               Sample{first_seq + i, arrival, 5'000'000 - arrival});
  }
  return r;
}

inline ncclwatch::v1::RankReport Report(int rank, int nranks, uint64_t first_seq, int n, int slow) {
  return Report(rank, nranks, first_seq, n, std::set<int>{slow});
}

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_ANALYSIS_ANALYZER_TEST_UTIL_H_

#include "proto/validate.h"

#include <limits>

#include "gtest/gtest.h"
#include "proto/testing/report_builder.h"

namespace ncclwatch {
namespace {

ncclwatch::v1::RankReport Good() {
  ncclwatch::v1::RankReport r =
      testing::ReportFrom({.job_id = "j", .rank = 3, .nranks = 8, .n_nodes = 2});
  r.set_interval_start_unix_ns(1);
  r.set_interval_end_unix_ns(2);
  auto* s = r.add_stats();
  s->set_count(1);
  s->set_bw_samples(1);
  return r;
}

TEST(ValidateReportTest, AcceptsAWellFormedReport) { EXPECT_TRUE(ValidateReport(Good()).ok); }

TEST(ValidateReportTest, AcceptsPointToPointColumnsWithAnotherRank) {
  auto r = Good();
  auto* c = r.add_p2p_sample_columns();
  c->set_op("Send");
  c->set_peer(0);
  EXPECT_TRUE(ValidateReport(r).ok);
}

TEST(ValidateReportTest, RejectsEachKindOfBadInputWithItsReason) {
  struct Case {
    const char* reason;
    void (*mutate)(ncclwatch::v1::RankReport&);
  };
  const Case cases[] = {
      {"missing_identity", [](auto& r) { r.clear_identity(); }},
      {"bad_job_id", [](auto& r) { r.mutable_identity()->clear_job_id(); }},
      {"bad_label", [](auto& r) { r.mutable_identity()->set_comm_name(std::string(300, 'x')); }},
      {"bad_label", [](auto& r) { r.mutable_identity()->set_gpu_uuid(std::string(300, 'x')); }},
      {"bad_label", [](auto& r) { r.mutable_identity()->set_pod(std::string(300, 'x')); }},
      {"bad_nranks", [](auto& r) { r.mutable_identity()->set_nranks(0); }},
      {"bad_rank", [](auto& r) { r.mutable_identity()->set_rank(8); }},
      {"bad_rank", [](auto& r) { r.mutable_identity()->set_rank(-1); }},
      {"bad_rank", [](auto& r) { r.mutable_identity()->set_global_rank(-5); }},
      {"bad_rank", [](auto& r) { r.mutable_identity()->set_local_rank(1 << 20); }},
      {"bad_n_nodes", [](auto& r) { r.mutable_identity()->set_n_nodes(9); }},
      {"bad_interval", [](auto& r) { r.set_interval_end_unix_ns(0); }},
      {"bad_timestamp", [](auto& r) { r.set_interval_end_unix_ns(~0ull); }},
      {"bad_timestamp", [](auto& r) { r.mutable_clock()->set_host_unix_ns(1ull << 63); }},
      {"bad_in_flight", [](auto& r) { r.add_in_flight()->set_age_ns(1ull << 63); }},
      {"bad_stats",
       [](auto& r) {
         r.mutable_stats(0)->set_exec_time_us_sum(std::numeric_limits<double>::quiet_NaN());
       }},
      {"bad_stats", [](auto& r) { r.mutable_stats(0)->set_bw_samples(2); }},
      {"bad_stats", [](auto& r) { r.mutable_stats(0)->set_exec_time_us_min(6.5e36); }},
      {"bad_sample",  // a point-to-point column with itself
       [](auto& r) {
         auto* c = r.add_p2p_sample_columns();
         c->set_op("Send");
         c->set_peer(3);
       }},
      {"bad_sample",  // a peer beyond the communicator
       [](auto& r) {
         auto* c = r.add_p2p_sample_columns();
         c->set_op("Recv");
         c->set_peer(8);
       }},
      {"bad_sample",  // a collective with a peer
       [](auto& r) {
         auto* c = r.add_sample_columns();
         c->set_op("AllReduce");
         c->set_peer(1);
       }},
      {"bad_sample",  // a point-to-point column without its peer, or of another op
       [](auto& r) { r.add_p2p_sample_columns()->set_op("Send"); }},
      {"bad_sample",
       [](auto& r) {
         auto* c = r.add_p2p_sample_columns();
         c->set_op("AllReduce");
         c->set_peer(1);
       }},
      {"too_large",
       [](auto& r) {
         for (int i = 0; i <= kMaxStatsPerReport; ++i) r.add_stats();
       }},
  };
  for (const Case& c : cases) {
    auto r = Good();
    c.mutate(r);
    ReportVerdict v = ValidateReport(r);
    EXPECT_FALSE(v.ok) << c.reason;
    EXPECT_EQ(v.reason, c.reason);
    EXPECT_FALSE(v.detail.empty());
  }
}

}  // namespace
}  // namespace ncclwatch

// Test only: representative answers of the Query API, shared by the CLI's tests (tables_test.cc
// holds their golden text), and UseUtc() so that their times print the same everywhere.
#ifndef NCCLWATCH_AGGREGATOR_CLI_ANSWERS_TEST_UTIL_H_
#define NCCLWATCH_AGGREGATOR_CLI_ANSWERS_TEST_UTIL_H_

#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <string>

#include "ncclwatch/v1/query.pb.h"

namespace ncclwatch::cli {

// Local time becomes UTC for this process (ClockText prints local time).
inline void UseUtc() {
  setenv("TZ", "UTC", 1);
  tzset();
}

inline constexpr uint64_t kSecond = 1'000'000'000;

// A new straggler (3x its own usual) on a named communicator, and a chronic one on an unnamed
// communicator whose node and GPU are unknown. 3.25 and 42.25 probe the rounding of exact ties.
inline ncclwatch::v1::ListStragglersResponse TwoStragglers() {
  ncclwatch::v1::ListStragglersResponse r;
  auto* a = r.add_stragglers();
  a->set_job_id("job-a");
  a->set_comm_name("world");
  a->set_comm_hash(0xab);
  a->set_rank(5);
  a->set_node("node-1");
  a->set_cuda_device(1);
  a->set_global_rank(13);  // the training's RANK
  a->set_local_rank(1);
  a->set_lateness_seconds(0.01234);
  a->set_excess_seconds(0.01);
  a->set_peer_z_score(4.5);
  a->set_history_ratio(3.0);
  a->set_arrived_last_fraction(0.75);
  a->set_since_unix_ns(3723 * kSecond);
  a->set_window_collectives(50);
  auto* b = r.add_stragglers();
  b->set_job_id("job-a");
  b->set_comm_hash(0xcd);
  b->set_rank(2);
  b->set_cuda_device(-1);
  b->set_lateness_seconds(0.002);
  b->set_excess_seconds(0.0015);
  b->set_peer_z_score(3.25);
  b->set_history_ratio(1.2);
  b->set_arrived_last_fraction(0.5);
  b->set_window_collectives(20);
  return r;
}

// A collective missing two ranks (one in a pod, one on an unknown node), a point-to-point hang
// ("SendRecv", seq 0) whose missing rank's pod has no namespace, a collective that every rank
// reached without progress, and a silent rank.
inline ncclwatch::v1::ListHangsResponse ThreeHangsAndASilentRank() {
  ncclwatch::v1::ListHangsResponse r;
  auto* h1 = r.add_hangs();
  h1->set_job_id("job-h");
  h1->set_comm_name("world");
  h1->set_comm_hash(1);
  h1->set_nranks(4);
  h1->set_op("AllReduce");
  h1->set_seq(12);
  h1->set_kind(ncclwatch::v1::HangInfo::MISSING_RANKS);
  auto* m1 = h1->add_missing();
  m1->set_rank(2);
  m1->set_node("node-0");
  m1->set_cuda_device(2);
  m1->set_pod("trainer-0");
  m1->set_pod_namespace("ml");
  m1->set_container("worker");
  auto* m2 = h1->add_missing();
  m2->set_rank(3);
  m2->set_cuda_device(-1);
  h1->set_arrived(2);
  h1->set_age_seconds(42.25);
  h1->set_since_unix_ns(3600 * kSecond);
  auto* h2 = r.add_hangs();
  h2->set_job_id("job-h");
  h2->set_comm_name("pairs");
  h2->set_comm_hash(2);
  h2->set_op("SendRecv");
  h2->set_kind(ncclwatch::v1::HangInfo::MISSING_RANKS);
  auto* m3 = h2->add_missing();
  m3->set_rank(1);
  m3->set_node("node-1");
  m3->set_cuda_device(0);
  m3->set_pod("p");
  h2->set_arrived(1);
  h2->set_age_seconds(5.5);
  h2->set_since_unix_ns(3601 * kSecond);
  auto* h3 = r.add_hangs();
  h3->set_job_id("job-h");
  h3->set_comm_hash(3);
  h3->set_op("Broadcast");
  h3->set_seq(7);
  h3->set_kind(ncclwatch::v1::HangInfo::NO_PROGRESS);
  h3->set_arrived(8);
  h3->set_age_seconds(7.0);
  h3->set_since_unix_ns(3602 * kSecond);
  auto* s = r.add_silent();
  s->set_job_id("job-h");
  s->set_comm_name("world");
  s->set_comm_hash(1);
  s->mutable_rank()->set_rank(6);
  s->mutable_rank()->set_node("node-2");
  s->mutable_rank()->set_cuda_device(6);
  s->set_last_report_unix_ns(3590 * kSecond);
  return r;
}

inline ncclwatch::v1::ListDegradedResponse DegradedWithSuspect() {
  ncclwatch::v1::ListDegradedResponse r;
  auto* d = r.add_comms();
  d->set_job_id("job-d");
  d->set_comm_name("world");
  d->set_comm_hash(0x10);
  d->set_comm_class("hybrid");
  d->set_op("AllReduce");
  d->set_message_size("1-4MB");
  d->set_bus_bw_gbs(12.34);
  d->set_baseline_bus_bw_gbs(45.6);
  d->add_nodes("n1");
  d->add_nodes("n2");
  auto* s = r.add_suspects();
  s->set_job_id("job-d");
  s->set_node("n2");
  s->set_degraded_comms(3);
  return r;
}

inline ncclwatch::v1::ListJobsResponse OneJob() {
  ncclwatch::v1::ListJobsResponse r;
  auto* j = r.add_jobs();
  j->set_job_id("job-a");
  j->set_communicators(3);
  j->set_ranks(16);
  j->add_nodes("a");
  j->add_nodes("b");
  j->set_stragglers(1);
  j->set_degraded_communicators(2);
  j->set_last_report_unix_ns(3723 * kSecond);
  return r;
}

inline ncclwatch::v1::ListCommsResponse TwoComms() {
  ncclwatch::v1::ListCommsResponse r;
  auto* a = r.add_comms();
  a->set_job_id("job-a");
  a->set_comm_name("world");
  a->set_comm_hash(0xab);
  a->set_comm_class("hybrid");
  a->set_nranks(16);
  a->set_n_nodes(2);
  a->set_health("straggler+degraded");
  a->set_last_report_unix_ns(3723 * kSecond);
  auto* b = r.add_comms();
  b->set_job_id("job-a");
  b->set_comm_hash(0xcd);
  b->set_comm_class("nvlink");
  b->set_nranks(8);
  b->set_n_nodes(1);
  b->set_health("ok");
  b->set_last_report_unix_ns(3724 * kSecond);
  return r;
}

// One series of two points (milliseconds 004 and 000; a value %g prints with an exponent), more
// series matched than were returned.
inline ncclwatch::v1::QueryRangeResponse OneSeries() {
  ncclwatch::v1::QueryRangeResponse r;
  auto* ts = r.add_series();
  ts->set_name("nccl_bus_bandwidth_gbs");
  auto* l1 = ts->add_labels();
  l1->set_name("job_id");
  l1->set_value("j");
  auto* l2 = ts->add_labels();
  l2->set_name("rank");
  l2->set_value("5");
  auto* p1 = ts->add_points();
  p1->set_time_ms(3723004);
  p1->set_value(12.5);
  auto* p2 = ts->add_points();
  p2->set_time_ms(3724000);
  p2->set_value(1e-7);
  r.set_truncated(true);
  return r;
}

// Ranks 1 (two collectives) and 0 (one, the earliest, starting at 5 ms), listed out of rank order;
// a communicator name that needs JSON escaping is not part of it (see json_test.cc).
inline ncclwatch::v1::GetTraceResponse TwoRankTrace() {
  ncclwatch::v1::GetTraceResponse t;
  t.set_job_id("job-t");
  t.set_comm_name("world");
  t.set_comm_hash(0xab);
  t.set_nranks(2);
  auto* r1 = t.add_ranks();
  r1->set_rank(1);
  r1->set_node("node-1");
  r1->set_cuda_device(1);
  auto* a = r1->add_ops();
  a->set_op("AllReduce");
  a->set_seq(1);
  a->set_start_ns(5'002'500);
  a->set_duration_ns(1'234'567);
  auto* b = r1->add_ops();
  b->set_op("AllGather");
  b->set_seq(2);
  b->set_start_ns(9'000'000);
  b->set_duration_ns(500);
  auto* r0 = t.add_ranks();
  r0->set_rank(0);
  r0->set_node("node-0");
  r0->set_cuda_device(0);
  auto* c = r0->add_ops();
  c->set_op("AllReduce");
  c->set_seq(1);
  c->set_start_ns(5'000'000);
  c->set_duration_ns(1'237'067);
  return t;
}

}  // namespace ncclwatch::cli

#endif  // NCCLWATCH_AGGREGATOR_CLI_ANSWERS_TEST_UTIL_H_

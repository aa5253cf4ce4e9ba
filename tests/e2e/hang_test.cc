// End to end: a rank that stops arriving at collectives, a rank whose process dies and a node whose
// agent dies, through simjob (real plugin) -> agents -> aggregator. The aggregator must name
// exactly that rank (or node) and its node, through the event stream, the Query API, /federate and
// the CLI, and nothing else.
#include <signal.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/e2e/pipeline.h"

namespace ncclwatch::testing {
namespace {

using ::ncclwatch::testutil::IsOk;

using ncclwatch::v1::Event;

constexpr double kHangThresholdS = 2;
constexpr double kSilentAfterS = 2.5;
constexpr double kFaultAtS = 2;

std::vector<std::string> HangPipelineFlags() {
  return {"--hang-threshold-s=" + std::to_string(kHangThresholdS),
          "--silent-after-s=" + std::to_string(kSilentAfterS)};
}

std::vector<std::string> HangJobArgs(const Pipeline& p, const std::string& job) {
  return {Binaries::Simjob(),
          "--plugin=" + Binaries::Plugin(),
          "--nodes=2",
          "--ranks-per-node=4",
          "--agent-addr=" + p.AgentAddrTemplate(),
          "--job-id=" + job,
          "--duration-s=8",
          "--clock-skew-ms=50",
          "--env=NCCLWATCH_FLUSH_INTERVAL_MS=1000"};
}

std::vector<EventRecorder::Received> OfKind(const std::vector<EventRecorder::Received>& all,
                                            Event::Kind kind, Event::Phase phase) {
  std::vector<EventRecorder::Received> out;
  for (const auto& r : all) {
    if (r.event.kind() == kind && r.event.phase() == phase) out.push_back(r);
  }
  return out;
}

TEST(HangEndToEndTest, ARankThatNeverArrivesIsNamedMissingWithinThreeSeconds) {
  Pipeline p(2, HangPipelineFlags());
  ASSERT_TRUE(p.ok()) << p.error();
  EventRecorder events(p.query());
  auto args = HangJobArgs(p, "e2e-hang");
  args.push_back("--hang-rank=6");
  args.push_back("--hang-after-s=" + std::to_string(kFaultAtS));
  const int64_t launch = absl::GetCurrentTimeNanos();
  auto [code, log] = RunToCompletion(args, p.dir() + "/simjob.log");
  ASSERT_EQ(code, 0) << log;

  ASSERT_TRUE(p.StopAgents()) << p.Logs();
  // Every rank finalized at the job's end, so the hang is closed once the aggregator has seen that.
  EXPECT_TRUE(events.WaitFor(
      [](const Event& e) { return e.kind() == Event::HANG && e.phase() == Event::END; }, 10))
      << p.Logs();
  auto all = events.Stop();
  auto starts = OfKind(all, Event::HANG, Event::START);
  ASSERT_EQ(starts.size(), 1u) << p.Logs();
  const auto& hang = starts[0].event.hang();
  EXPECT_EQ(hang.job_id(), "e2e-hang");
  EXPECT_EQ(hang.kind(), ncclwatch::v1::HangInfo::MISSING_RANKS);
  ASSERT_EQ(hang.missing_size(), 1) << starts[0].event.summary();
  EXPECT_EQ(hang.missing(0).rank(), 6);
  EXPECT_EQ(hang.missing(0).node(), "sim-node-1");
  EXPECT_EQ(hang.arrived(), 7u);
  // First effect: the collective rank 6 never joins starts waiting at the fault time; it becomes
  // a hang by definition kHangThresholdS later. The finding must follow within 3 s of that.
  const double latency_s =
      (starts[0].received_unix_ns - launch) / 1e9 - kFaultAtS - kHangThresholdS;
  std::printf("hang flagged %.2f s after it crossed the threshold: %s\n", latency_s,
              starts[0].event.summary().c_str());
  EXPECT_LE(latency_s, 3.0);
  // Rank 6 kept reporting (it is alive, just elsewhere): not silent. Nobody is a straggler.
  EXPECT_TRUE(OfKind(all, Event::RANK_SILENT, Event::START).empty());
  EXPECT_TRUE(OfKind(all, Event::STRAGGLER, Event::START).empty());
  EXPECT_EQ(OfKind(all, Event::HANG, Event::END).size(), 1u);
}

TEST(HangEndToEndTest, ADeadRankIsSilentAndMissingFromTheHangItCauses) {
  Pipeline p(2, HangPipelineFlags());
  ASSERT_TRUE(p.ok()) << p.error();
  EventRecorder events(p.query());
  auto args = HangJobArgs(p, "e2e-kill");
  args.push_back("--kill-rank=2");
  args.push_back("--kill-after-s=" + std::to_string(kFaultAtS));
  const int64_t launch = absl::GetCurrentTimeNanos();
  auto [code, log] = RunToCompletion(args, p.dir() + "/simjob.log");
  ASSERT_EQ(code, 0) << log;

  // Before the agents stop: the Query API and /federate show the situation as it is.
  grpc::ClientContext ctx;
  ncclwatch::v1::ListHangsResponse list;
  ASSERT_THAT(p.query().ListHangs(&ctx, {}, &list), IsOk());
  auto [cli_code, cli_out] = RunToCompletion(
      {Binaries::Cli(), "hangs", "--aggregator=" + p.AggregatorAddr()}, p.dir() + "/cli.log");
  EXPECT_EQ(cli_code, 3) << cli_out;  // findings
  // The finding as the server words it (communicator name and hash).
  EXPECT_NE(cli_out.find(
                "Finding: rank 2 (global rank 2, node sim-node-0, GPU2) of communicator world 0x"),
            std::string::npos)
      << cli_out;
  EXPECT_NE(cli_out.find(" in job e2e-kill stopped reporting while the other ranks carry on"),
            std::string::npos)
      << cli_out;
  auto [events_code, events_out] = RunToCompletion(
      {Binaries::Cli(), "events", "--job=e2e-kill", "--aggregator=" + p.AggregatorAddr()},
      p.dir() + "/cli-events.log");
  EXPECT_EQ(events_code, 0) << events_out;
  EXPECT_NE(events_out.find("SILENT: rank 2 (global rank 2, node sim-node-0, GPU2)"),
            std::string::npos)
      << events_out;
  EXPECT_NE(events_out.find("HANG: "), std::string::npos) << events_out;
  ASSERT_TRUE(p.StopAgents()) << p.Logs();
  auto all = events.Stop();

  auto silent = OfKind(all, Event::RANK_SILENT, Event::START);
  ASSERT_EQ(silent.size(), 1u) << p.Logs();
  EXPECT_EQ(silent[0].event.silent().rank().rank(), 2);
  EXPECT_EQ(silent[0].event.silent().rank().node(), "sim-node-0");
  const double silent_latency = (silent[0].received_unix_ns - launch) / 1e9 - kFaultAtS;
  std::printf("dead rank flagged silent %.2f s after it died: %s\n", silent_latency,
              silent[0].event.summary().c_str());
  EXPECT_LE(silent_latency, kSilentAfterS + 3.0);

  auto hangs = OfKind(all, Event::HANG, Event::START);
  ASSERT_EQ(hangs.size(), 1u) << p.Logs();
  EXPECT_EQ(hangs[0].event.hang().kind(), ncclwatch::v1::HangInfo::MISSING_RANKS)
      << hangs[0].event.summary();
  ASSERT_EQ(hangs[0].event.hang().missing_size(), 1);
  EXPECT_EQ(hangs[0].event.hang().missing(0).rank(), 2);
  EXPECT_TRUE(OfKind(all, Event::STRAGGLER, Event::START).empty());

  // The surviving ranks finalized at the job's end; the dead one never will: it stays silent in
  // the Query API until its communicator is forgotten.
  EXPECT_EQ(list.silent_size(), 1) << list.DebugString();
}

// The agent of node 1 is killed while the job runs: its four ranks' reports go nowhere, so node 1
// is one NODE_SILENT finding (beside its ranks' RANK_SILENT) and nothing of node 0 is; once the
// agent is back and the plugins have reconnected, the node reports again.
TEST(HangEndToEndTest, ANodeWhoseAgentDiesIsOneSilentNodeUntilItIsBack) {
  Pipeline p(2, HangPipelineFlags());
  ASSERT_TRUE(p.ok()) << p.error();
  EventRecorder events(p.query());
  auto args = HangJobArgs(p, "e2e-node");
  std::replace(args.begin(), args.end(), std::string("--duration-s=8"),
               std::string("--duration-s=14"));
  Process job(args, {}, p.dir() + "/simjob.log");
  // Every rank has reported before the agent dies.
  ASSERT_TRUE(PollUntil(
      [&] {
        grpc::ClientContext ctx;
        ncclwatch::v1::ListCommsRequest request;
        request.set_job_id("e2e-node");
        ncclwatch::v1::ListCommsResponse comms;
        return p.query().ListComms(&ctx, request, &comms).ok() && comms.comms_size() == 1 &&
               comms.comms(0).ranks_size() == 8;
      },
      20))
      << p.Logs();
  const auto is = [](Event::Phase phase) {
    return [phase](const Event& e) { return e.kind() == Event::NODE_SILENT && e.phase() == phase; };
  };
  int64_t killed = 0;
  ASSERT_TRUE(p.RestartAgent(1, SIGKILL, [&] {
    killed = absl::GetCurrentTimeNanos();
    EXPECT_TRUE(events.WaitFor(is(Event::START), 20)) << p.Logs();
  }));
  EXPECT_TRUE(events.WaitFor(is(Event::END), 20)) << p.Logs();
  EXPECT_EQ(job.Wait(), 0) << job.Log();
  ASSERT_TRUE(p.StopAgents()) << p.Logs();
  auto all = events.Stop();

  const auto starts = OfKind(all, Event::NODE_SILENT, Event::START);
  ASSERT_EQ(starts.size(), 1u) << p.Logs();
  const auto& node = starts[0].event.node_silent();
  EXPECT_EQ(starts[0].event.job_id(), "e2e-node");
  EXPECT_EQ(node.node(), "sim-node-1");
  EXPECT_EQ(node.processes(), 4u);
  const double latency_s = (starts[0].received_unix_ns - killed) / 1e9;
  std::printf("node flagged silent %.2f s after its agent died: %s\n", latency_s,
              starts[0].event.summary().c_str());
  EXPECT_LE(latency_s, kSilentAfterS + 3.0);
  EXPECT_EQ(OfKind(all, Event::NODE_SILENT, Event::END).size(), 1u);
  // Its ranks are silent too, each once; nothing of node 0 is, and nothing hung or was late.
  const auto silent = OfKind(all, Event::RANK_SILENT, Event::START);
  EXPECT_EQ(silent.size(), 4u);
  for (const auto& r : silent) {
    EXPECT_EQ(r.event.silent().rank().node(), "sim-node-1") << r.event.summary();
  }
  EXPECT_TRUE(OfKind(all, Event::HANG, Event::START).empty());
  EXPECT_TRUE(OfKind(all, Event::STRAGGLER, Event::START).empty());
}

}  // namespace
}  // namespace ncclwatch::testing

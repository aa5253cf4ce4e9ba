// End to end: a node's NIC loses half its bandwidth mid-run. The job's multi-node (hybrid)
// communicator must be flagged degraded, its NVLink-only node communicators must not, and nothing
// else may be reported. With a single hybrid communicator both nodes are equally suspect, so no
// node is named (tests of the detector cover naming with several hybrid communicators).
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

TEST(DegradedEndToEndTest, AHalvedNicFlagsTheHybridCommunicatorOnlyWithinThreeSeconds) {
  constexpr double kDegradeAtS = 3;
  Pipeline p(2);
  ASSERT_TRUE(p.ok()) << p.error();
  EventRecorder events(p.query());
  const int64_t launch = absl::GetCurrentTimeNanos();
  Process job({Binaries::Simjob(), "--plugin=" + Binaries::Plugin(), "--nodes=2",
               "--ranks-per-node=4", "--agent-addr=" + p.AgentAddrTemplate(), "--job-id=e2e-nic",
               "--duration-s=9", "--node-comm", "--clock-skew-ms=50", "--degrade-node=1",
               "--degrade-factor=0.5", "--degrade-after-s=" + std::to_string(kDegradeAtS),
               "--env=NCCLWATCH_FLUSH_INTERVAL_MS=1000"},
              {}, p.dir() + "/simjob.log");
  // The finding while the job runs (its end ends the finding: docs/detection.md).
  ASSERT_TRUE(events.WaitFor(
      [](const Event& e) { return e.kind() == Event::COMM_DEGRADED && e.phase() == Event::START; },
      30))
      << p.Logs();
  grpc::ClientContext ctx;
  ncclwatch::v1::ListDegradedResponse list;
  ASSERT_THAT(p.query().ListDegraded(&ctx, {}, &list), IsOk());
  ASSERT_EQ(job.Wait(), 0) << job.Log();
  ASSERT_TRUE(p.StopAgents()) << p.Logs();
  auto all = events.Stop();

  std::vector<EventRecorder::Received> degraded;
  for (const auto& r : all) {
    if (r.event.kind() == Event::COMM_DEGRADED && r.event.phase() == Event::START) {
      degraded.push_back(r);
    } else if (r.event.kind() == Event::COMM_DEGRADED && r.event.end_reason() == "job ended") {
      continue;  // the job's end ends it
    } else {
      ADD_FAILURE() << "unexpected event: " << r.event.summary();
    }
  }
  ASSERT_EQ(degraded.size(), 1u) << p.Logs();
  const auto& d = degraded[0].event.degraded();
  EXPECT_EQ(d.comm_class(), "hybrid");
  EXPECT_EQ(d.comm_name(), "world");
  EXPECT_NEAR(d.bus_bw_gbs() / d.baseline_bus_bw_gbs(), 0.5, 0.15) << degraded[0].event.summary();
  const double latency = (degraded[0].received_unix_ns - launch) / 1e9 - kDegradeAtS;
  std::printf("degraded communicator flagged %.2f s after the NIC degraded: %s\n", latency,
              degraded[0].event.summary().c_str());
  EXPECT_LE(latency, 3.0);

  ASSERT_EQ(list.comms_size(), 1) << list.DebugString();
  EXPECT_EQ(list.comms(0).comm_name(), "world");
  EXPECT_EQ(list.suspects_size(), 0) << list.DebugString();
}

}  // namespace
}  // namespace ncclwatch::testing

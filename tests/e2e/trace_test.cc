// End to end: `ncclwatch events --follow`, `jobs` and `comms` on a job with a slow rank; then
// `ncclwatch trace` writes a Chrome/Perfetto trace of one communicator's sampled
// collectives that parses as JSON, with one named track per rank, the GPU clocks of the two nodes
// (50 ms apart) aligned, and the slow rank visibly late.
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/e2e/pipeline.h"

namespace ncclwatch::testing {
namespace {

TEST(TraceEndToEndTest, TraceIsChromeJsonWithOneAlignedTrackPerRank) {
  Pipeline p(2);
  ASSERT_TRUE(p.ok()) << p.error();
  // `events --follow` started before the job prints the job's events as they happen.
  Process follow({Binaries::Cli(), "events", "--follow", "--job=traced", "--wait-s=8",
                  "--aggregator=" + p.AggregatorAddr()},
                 {}, p.dir() + "/cli-follow.log");
  // Its watch is live once it says it waits.
  ASSERT_TRUE(PollUntil(
      [&] { return follow.Log().find("Waiting for new ones") != std::string::npos; }, 10, 20))
      << follow.Log();
  Process job(
      {Binaries::Simjob(), "--plugin=" + Binaries::Plugin(), "--nodes=2", "--ranks-per-node=4",
       "--agent-addr=" + p.AgentAddrTemplate(), "--job-id=traced", "--duration-s=5",
       "--slow-rank=5", "--clock-skew-ms=50", "--env=NCCLWATCH_FLUSH_INTERVAL_MS=500"},
      {}, p.dir() + "/simjob.log");
  ASSERT_TRUE(PollUntil(
      [&] {
        return follow.Log().find("STRAGGLER: rank 5, GPU1 on node sim-node-1") != std::string::npos;
      },
      30))
      << follow.Log() << p.Logs();
  // Its communicator as the CLI lists it while the job runs.
  auto [comms_code, comms_out] = RunToCompletion(
      {Binaries::Cli(), "comms", "--job=traced", "--aggregator=" + p.AggregatorAddr()},
      p.dir() + "/cli-comms.log");
  EXPECT_EQ(comms_code, 0) << comms_out;
  EXPECT_TRUE(std::regex_search(
      comms_out, std::regex(R"(world 0x[0-9a-f]{16}\s+hybrid\s+8\s+2\s+straggler )")))
      << comms_out;
  ASSERT_EQ(job.Wait(), 0) << job.Log();
  ASSERT_TRUE(p.StopAgents()) << p.Logs();
  EXPECT_EQ(follow.Wait(), 0) << follow.Log();
  EXPECT_NE(follow.Log().find("STRAGGLER: rank 5, GPU1 on node sim-node-1 (host "),
            std::string::npos)
      << follow.Log();

  // The job as the CLI lists it once it ended: its findings as they were while it ran.
  auto [jobs_code, jobs_out] = RunToCompletion(
      {Binaries::Cli(), "jobs", "--aggregator=" + p.AggregatorAddr()}, p.dir() + "/cli-jobs.log");
  EXPECT_EQ(jobs_code, 0) << jobs_out;
  EXPECT_TRUE(
      std::regex_search(jobs_out, std::regex(R"(traced\s+ended\s+1\s+8\s+2\s+1\s+0\s+0\s+0 )")))
      << jobs_out;
  EXPECT_NE(jobs_out.find("Job traced ended at "), std::string::npos) << jobs_out;

  const std::string file = p.dir() + "/trace.json";
  auto [cli_code, cli_out] =
      RunToCompletion({Binaries::Cli(), "trace", "--aggregator=" + p.AggregatorAddr(),
                       "--job=traced", "--comm=world", "--since-s=120", "--output=" + file},
                      p.dir() + "/cli.log");
  ASSERT_EQ(cli_code, 0) << cli_out;
  EXPECT_NE(cli_out.find("of 8 ranks (communicator world of job traced)"), std::string::npos)
      << cli_out;

  std::stringstream json;
  json << std::ifstream(file).rdbuf();
  google::protobuf::Struct trace;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.str(), &trace).ok())
      << json.str().substr(0, 2000);
  std::map<int, std::string> track_names;
  std::map<int, int> ops_per_track;
  // Start (µs) of each AllReduce per rank, by seq.
  std::map<int, std::map<int, double>> allreduce_start;
  for (const auto& v : trace.fields().at("traceEvents").list_value().values()) {
    const auto& e = v.struct_value().fields();
    const std::string ph = e.at("ph").string_value();
    if (ph == "M" && e.at("name").string_value() == "thread_name") {
      track_names[static_cast<int>(e.at("tid").number_value())] =
          e.at("args").struct_value().fields().at("name").string_value();
    }
    if (ph != "X") continue;
    const int tid = static_cast<int>(e.at("tid").number_value());
    ++ops_per_track[tid];
    EXPECT_GE(e.at("ts").number_value(), 0);
    EXPECT_GT(e.at("dur").number_value(), 0);
    if (e.at("name").string_value() == "AllReduce") {
      const int seq =
          static_cast<int>(e.at("args").struct_value().fields().at("seq").number_value());
      allreduce_start[seq][tid] = e.at("ts").number_value();
    }
  }
  ASSERT_EQ(track_names.size(), 8u);
  EXPECT_EQ(track_names[5], "rank 5  sim-node-1 GPU1");
  ASSERT_EQ(ops_per_track.size(), 8u);
  for (const auto& [tid, n] : ops_per_track) EXPECT_GT(n, 10) << "rank " << tid;

  // Aligned clocks: punctual ranks on both nodes start within ~0.5 ms of each other although the
  // GPU clocks are 50 ms apart; rank 5 starts ~2 ms after the first.
  int compared = 0;
  for (const auto& [seq, starts] : allreduce_start) {
    if (starts.size() != 8) continue;
    double first = 1e300;
    for (const auto& [tid, ts] : starts) first = std::min(first, ts);
    EXPECT_LT(std::abs(starts.at(4) - starts.at(0)), 500) << "seq " << seq;
    EXPECT_GT(starts.at(5) - first, 1'500) << "seq " << seq;
    ++compared;
  }
  EXPECT_GT(compared, 5);

  // A communicator that does not exist: a readable error, exit 1.
  auto [bad_code, bad_out] =
      RunToCompletion({Binaries::Cli(), "trace", "--aggregator=" + p.AggregatorAddr(),
                       "--job=traced", "--comm=nosuch", "--output=" + p.dir() + "/none.json"},
                      p.dir() + "/cli-bad.log");
  EXPECT_EQ(bad_code, 1);
  EXPECT_NE(bad_out.find("no report of communicator nosuch of job traced"), std::string::npos)
      << bad_out;
}

}  // namespace
}  // namespace ncclwatch::testing

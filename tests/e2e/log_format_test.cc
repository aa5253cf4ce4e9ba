// --log-format json on both daemons, as Loki or Elasticsearch would read their stderr: every line
// one JSON object with time, level, component and message (and the message's fields, when it has
// any), gRPC's own lines included.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "aggregator/cli/json_reader_test_util.h"
#include "gtest/gtest.h"
#include "tests/e2e/pipeline.h"

namespace ncclwatch::testing {
namespace {

using cli::Json;

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(LogFormatTest, WithJsonEveryLineOfBothDaemonsIsOneObject) {
  Pipeline p(2, {"--log-format=json"}, {"--log-format=json"});
  ASSERT_TRUE(p.ok()) << p.error();
  EventRecorder events(p.query());
  // A slow GPU, so that the aggregator logs a finding, with its fields.
  Process job({Binaries::Simjob(), "--plugin=" + Binaries::Plugin(), "--nodes=2",
               "--ranks-per-node=4", "--agent-addr=" + p.AgentAddrTemplate(), "--job-id=logs",
               "--duration-s=5", "--slow-rank=5", "--env=NCCLWATCH_FLUSH_INTERVAL_MS=500"},
              {}, p.dir() + "/simjob.log");
  ASSERT_TRUE(events.WaitFor(
      [](const ncclwatch::v1::Event& e) { return e.kind() == ncclwatch::v1::Event::STRAGGLER; },
      30))
      << p.Logs();
  ASSERT_EQ(job.Wait(), 0) << job.Log();
  ASSERT_TRUE(p.StopAgents()) << p.Logs();
  ASSERT_TRUE(p.StopAggregator()) << p.Logs();
  int finding_lines = 0;
  for (const auto& [file, component] :
       {std::pair{"aggregator.log", "aggregator"}, std::pair{"sim-node-0.log", "agent"},
        std::pair{"sim-node-1.log", "agent"}}) {
    const std::vector<std::string> lines = Lines(p.dir() + "/" + file);
    EXPECT_GE(lines.size(), 3u) << file << ": starting, serving, stopping at least";
    for (const std::string& line : lines) {
      const std::optional<Json> j = cli::ParseJson(line);
      ASSERT_TRUE(j.has_value()) << file << ": not one JSON value: " << line;
      ASSERT_EQ(j->type, Json::kObject) << file << ": " << line;
      std::vector<std::string> keys = {"time", "level", "component", "message"};
      if (j->keys.size() == 5) keys.push_back("fields");  // a message with fields
      EXPECT_EQ(j->keys, keys) << line;
      const Json& fields = (*j)["fields"];
      if (fields.type == Json::kObject) {
        for (const Json& v : fields.values) EXPECT_EQ(v.type, Json::kString) << line;
        if (fields["kind"].string == "STRAGGLER" && fields["phase"].string == "START") {
          ++finding_lines;
          EXPECT_EQ(fields["job_id"].string, "logs") << line;
          EXPECT_EQ(fields["node"].string, "sim-node-1") << line;
          EXPECT_EQ(fields["gpu"].string, "GPU1") << line;
          EXPECT_EQ(fields["global_rank"].string, "5") << line;
        }
      }
      EXPECT_EQ((*j)["component"].string, component) << line;
      EXPECT_EQ((*j)["time"].string.size(), 24u) << line;  // 2026-11-29T12:34:56.789Z
      const std::string& level = (*j)["level"].string;
      EXPECT_TRUE(level == "debug" || level == "info" || level == "warning" || level == "error")
          << line;
      EXPECT_FALSE((*j)["message"].string.empty()) << line;
    }
  }
  EXPECT_EQ(finding_lines, 1) << "the slow GPU's finding, logged once with its fields";
}

}  // namespace
}  // namespace ncclwatch::testing

// --log-format json on both daemons, as Loki or Elasticsearch would read their stderr: every line
// one JSON object with time, level, component and message, gRPC's own lines included.
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
  Pipeline p(1, {"--log-format=json"}, {"--log-format=json"});
  ASSERT_TRUE(p.ok()) << p.error();
  Process job({Binaries::Simjob(), "--plugin=" + Binaries::Plugin(), "--nodes=1",
               "--ranks-per-node=2", "--agent-addr=" + p.AgentAddrTemplate(), "--job-id=logs",
               "--duration-s=2", "--env=NCCLWATCH_FLUSH_INTERVAL_MS=200"},
              {}, p.dir() + "/simjob.log");
  ASSERT_EQ(job.Wait(), 0) << job.Log();
  ASSERT_TRUE(p.StopAgents()) << p.Logs();
  ASSERT_TRUE(p.StopAggregator()) << p.Logs();
  for (const auto& [file, component] :
       {std::pair{"aggregator.log", "aggregator"}, std::pair{"sim-node-0.log", "agent"}}) {
    const std::vector<std::string> lines = Lines(p.dir() + "/" + file);
    EXPECT_GE(lines.size(), 3u) << file << ": starting, serving, stopping at least";
    for (const std::string& line : lines) {
      const std::optional<Json> j = cli::ParseJson(line);
      ASSERT_TRUE(j.has_value()) << file << ": not one JSON value: " << line;
      ASSERT_EQ(j->type, Json::kObject) << file << ": " << line;
      EXPECT_EQ(j->keys, (std::vector<std::string>{"time", "level", "component", "message"}))
          << line;
      EXPECT_EQ((*j)["component"].string, component) << line;
      EXPECT_EQ((*j)["time"].string.size(), 24u) << line;  // 2026-11-29T12:34:56.789Z
      const std::string& level = (*j)["level"].string;
      EXPECT_TRUE(level == "debug" || level == "info" || level == "warning" || level == "error")
          << line;
      EXPECT_FALSE((*j)["message"].string.empty()) << line;
    }
  }
}

}  // namespace
}  // namespace ncclwatch::testing

// simjob drives the real plugin through each ABI version NCCL may use (v4 on 2.27, v5 on 2.28, v6
// on 2.29 and 2.30, v7 on >= 2.31), with no agent at all: the offline Inspector-compatible files
// must show every collective type and the point-to-point operations, for every version. v7 runs
// with what it adds turned on: KernelPhase events (NCCLWATCH_KERNEL_PHASE=1) and user tags.
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/e2e/pipeline.h"

namespace ncclwatch::testing {
namespace {

class AbiVersionTest : public ::testing::TestWithParam<int> {};

TEST_P(AbiVersionTest, EveryOperationTypeIsRecorded) {
  const int abi = GetParam();
  char tmpl[] = "/tmp/ncclwatch-abi-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::vector<std::string> args = {
      Binaries::Simjob(),
      "--plugin=" + Binaries::Plugin(),
      "--abi=" + std::to_string(abi),
      "--nodes=1",
      "--ranks-per-node=2",
      "--duration-s=1.5",
      "--agent-addr=unix://" + dir + "/no-agent.sock",  // nobody listens
      "--env=NCCLWATCH_DUMP_DIR=" + dir + "/rank{rank}",
      "--env=NCCLWATCH_FLUSH_INTERVAL_MS=200"};
  if (abi >= 7) {
    args.push_back("--env=NCCLWATCH_KERNEL_PHASE=1");
    args.push_back("--user-tag=iteration");
  }
  auto [code, log] = RunToCompletion(args, dir + "/simjob.log");
  ASSERT_EQ(code, 0) << log;

  for (int rank = 0; rank < 2; ++rank) {
    std::map<std::string, int> ops;
    std::string prom;
    bool prom_found = false;
    std::regex coll(R"re("coll":"(\w+)","coll_sn":(\d+))re"), p2p(R"re("p2p":"(\w+)")re");
    for (const auto& entry :
         std::filesystem::directory_iterator(dir + "/rank" + std::to_string(rank))) {
      std::ifstream in(entry.path());
      std::stringstream ss;
      ss << in.rdbuf();
      if (entry.path().extension() == ".prom") {
        prom_found = true;
        prom = ss.str();
        continue;
      }
      std::string line;
      while (std::getline(ss, line)) {
        std::smatch m;
        if (std::regex_search(line, m, coll) || std::regex_search(line, m, p2p)) ops[m[1]]++;
      }
    }
    for (const char* op : {"AllReduce", "AllGather", "ReduceScatter", "Send", "Recv"}) {
      EXPECT_GT(ops[op], 10) << "ABI v" << abi << ", rank " << rank << ": " << op;
    }
    // The metrics file was written, and a finalized communicator leaves it: the last write is
    // empty.
    EXPECT_TRUE(prom_found) << "ABI v" << abi << ": no .prom file";
    EXPECT_EQ(prom, "") << "ABI v" << abi;
  }
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Versions, AbiVersionTest, ::testing::Values(4, 5, 6, 7),
                         [](const auto& info) { return "v" + std::to_string(info.param); });

}  // namespace
}  // namespace ncclwatch::testing

// Offline mode against hand-computed NCCL Inspector files (plugin/testdata/offline_expected.*).
//
// 4 ranks; two 8 KiB AllReduces of 10 and 40 us: busBw = 8192 B / t x 2(n-1)/n = 1.2288 and
// 0.3072 GB/s, geometric mean 0.6144, mean time 25 us; one 1 KiB Send of 5 us: 0.2048 GB/s.
#include "plugin/offline_dump.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "gtest/gtest.h"
#include "plugin/composite_sink.h"
#include "plugin/flusher.h"

namespace ncclwatch::plugin {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class NullSink : public ReportSink {
 public:
  void Submit(ncclwatch::v1::RankReport) override {}
  bool Drain(std::chrono::milliseconds) override { return true; }
  uint64_t dropped() const override { return 0; }
};

class OfflineDumpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ncclwatch-dump-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void RunOp(Recorder& rec, CommState* comm, OpDescr d, uint64_t start, uint64_t dur) {
    void* op = rec.StartOp(comm, d);
    rec.StopEvent(op);
    for (uint8_t ch = 0; ch < d.n_channels; ++ch) {
      void* h = rec.StartKernelChannel(op, ch, start);
      rec.RecordKernelChannelStop(h, start + dur);
      rec.StopEvent(h);
    }
  }
  std::string dir_;
};

TEST_F(OfflineDumpTest, FilesMatchHandComputedInspectorOutput) {
  std::string error;
  auto dump = OfflineDump::Open(dir_ + "/inspector", {"node-a", 42, "777", 1}, &error);
  ASSERT_NE(dump, nullptr) << error;
  Recorder rec(64, 64);
  NullSink sink;
  CompositeSink sinks({dump.get(), &sink});
  Flusher flusher(PluginConfig(), rec, ProcessIdentity{"job", "node-a", 42, 0}, sinks);
  CommState* comm = rec.InitComm(CommIdentity{0x1234, "world", 3, 4, 2, 1});
  RunOp(rec, comm, {false, "AllReduce", 0, "ncclFloat32", 2048, "RING", "LL", -1, 2}, 1000, 10000);
  RunOp(rec, comm, {false, "AllReduce", 1, "ncclFloat32", 2048, "RING", "LL", -1, 2}, 5000, 40000);
  RunOp(rec, comm, {true, "Send", 0, "ncclFloat32", 256, nullptr, nullptr, 0, 1}, 9000, 5000);
  flusher.RunOnce(/*report=*/true);

  EXPECT_EQ(dump->prom_path(), dir_ + "/inspector/nccl_inspector_metrics_GPU1-pid42.prom");
  EXPECT_EQ(dump->log_path(), dir_ + "/inspector/node-a-pid42.log");
  std::string prom = ReadFile(dump->prom_path());
  EXPECT_EQ(prom, ReadFile(NCCLWATCH_TESTDATA "/offline_expected.prom"));

  std::string jsonl =
      std::regex_replace(ReadFile(dump->log_path()), std::regex(R"("dump_timestamp_us":\d+)"),
                         R"("dump_timestamp_us":T)");
  EXPECT_EQ(jsonl, ReadFile(NCCLWATCH_TESTDATA "/offline_expected.jsonl"));

  // promtool parses it; the one lint finding allowed is the unit of Inspector's fixed name.
  std::string cmd = "promtool check metrics < " + dump->prom_path() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string findings;
  char buf[512];
  while (fgets(buf, sizeof(buf), p) != nullptr) findings += buf;
  int status = pclose(p);
  int code = WEXITSTATUS(status);
  ASSERT_TRUE(code == 0 || code == 3) << "promtool could not parse the file (is the prometheus "
                                         "package installed?):\n"
                                      << findings;
  std::istringstream lines(findings);
  std::string line;
  while (std::getline(lines, line)) {
    EXPECT_NE(line.find("_microseconds use base unit \"seconds\""), std::string::npos) << line;
  }

  // A finalized communicator disappears from the metrics file, as Inspector's does.
  flusher.FinalizeComm(comm);
  EXPECT_EQ(ReadFile(dump->prom_path()), "");
}

TEST_F(OfflineDumpTest, UnusableDirectoryIsReportedNotFatal) {
  std::string error;
  std::string file = dir_ + "/a-file";
  std::ofstream(file) << "x";
  EXPECT_EQ(OfflineDump::Open(file + "/sub", {"h", 1, "", -1}, &error), nullptr);
  EXPECT_NE(error.find("cannot create"), std::string::npos) << error;
}

}  // namespace
}  // namespace ncclwatch::plugin

// CompositeSink on its own, and the flusher's side of the sink contract (report_sink.h): which
// hooks it calls, in which order, and that it makes no per-operation call no sink wants.
#include "plugin/composite_sink.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "plugin/flusher.h"
#include "plugin/offline_dump.h"

namespace ncclwatch::plugin {
namespace {

using std::chrono::milliseconds;

// Stands in for the agent client: keeps the reports, and answers dropped() and Drain() as told.
class FakeAgentSink : public ReportSink {
 public:
  void Submit(ncclwatch::v1::RankReport report) override { reports.push_back(std::move(report)); }
  bool Drain(milliseconds timeout) override {
    drain_timeouts.push_back(timeout);
    return drain_result;
  }
  uint64_t dropped() const override { return dropped_count; }

  std::vector<ncclwatch::v1::RankReport> reports;
  std::vector<milliseconds> drain_timeouts;
  bool drain_result = true;
  uint64_t dropped_count = 0;
};

// Writes every call it gets, hooks included, as one line of `log`: the order is the contract.
class RecordingSink : public ReportSink {
 public:
  explicit RecordingSink(bool wants_operations) : wants_operations_(wants_operations) {}

  void Submit(ncclwatch::v1::RankReport report) override {
    log.push_back(std::string(report.final() ? "final report " : "report ") +
                  report.identity().comm_name());
  }
  bool Drain(milliseconds) override { return true; }
  uint64_t dropped() const override { return 0; }
  bool wants_operations() const override { return wants_operations_; }
  void OnOperation(const CommState& comm, const Completion& c, int64_t drained_unix_ns) override {
    EXPECT_TRUE(wants_operations_) << "an operation delivered to a sink that did not want it";
    EXPECT_GT(drained_unix_ns, 0);
    log.push_back("op " + comm.identity().comm_name + " " + c.func + (c.timed ? "" : " untimed"));
  }
  void OnCommunicatorFinalized(const CommState& comm) override {
    log.push_back("finalized " + comm.identity().comm_name);
  }
  void OnRoundEnd() override { log.push_back("round end"); }

  std::vector<std::string> log;

 private:
  const bool wants_operations_;
};

ncclwatch::v1::RankReport Report(const std::string& comm_name, bool final = false) {
  ncclwatch::v1::RankReport report;
  report.mutable_identity()->set_comm_name(comm_name);
  report.set_final(final);
  return report;
}

TEST(CompositeSinkTest, EverySinkSeesEveryReportAndEveryHook) {
  RecordingSink dump_like(true);
  FakeAgentSink agent;
  CompositeSink sinks({&dump_like, &agent});
  CommState comm(CommIdentity{7, "world", 0, 2, 1, 0}, 64);

  sinks.Submit(Report("world"));
  sinks.OnRoundEnd();
  sinks.Submit(Report("world", /*final=*/true));
  sinks.OnCommunicatorFinalized(comm);

  EXPECT_EQ(dump_like.log, (std::vector<std::string>{"report world", "round end",
                                                     "final report world", "finalized world"}));
  ASSERT_EQ(agent.reports.size(), 2u);
  EXPECT_EQ(agent.reports[0].identity().comm_name(), "world");
  EXPECT_FALSE(agent.reports[0].final());
  EXPECT_TRUE(agent.reports[1].final());
}

TEST(CompositeSinkTest, OperationsGoOnlyToTheSinksThatWantThem) {
  RecordingSink wants(true);
  RecordingSink does_not(false);  // fails the test if it gets an operation
  FakeAgentSink agent;
  CommState comm(CommIdentity{7, "world", 0, 2, 1, 0}, 64);
  Completion c;
  c.func = "AllReduce";

  CompositeSink with_dump({&wants, &does_not, &agent});
  EXPECT_TRUE(with_dump.wants_operations());
  with_dump.OnOperation(comm, c, 1);
  EXPECT_EQ(wants.log, std::vector<std::string>{"op world AllReduce"});
  EXPECT_TRUE(does_not.log.empty());

  CompositeSink without({&does_not, &agent});
  EXPECT_FALSE(without.wants_operations());
}

TEST(CompositeSinkTest, DroppedAndDrainAreTheAgentClients) {
  RecordingSink dump_like(true);
  FakeAgentSink agent;
  CompositeSink sinks({&dump_like, &agent});

  agent.dropped_count = 5;
  EXPECT_EQ(sinks.dropped(), 5u);

  agent.drain_result = false;
  EXPECT_FALSE(sinks.Drain(milliseconds(2000)));
  agent.drain_result = true;
  EXPECT_TRUE(sinks.Drain(milliseconds(2000)));
  // Each drain of the agent fits in the caller's timeout.
  ASSERT_EQ(agent.drain_timeouts.size(), 2u);
  for (milliseconds t : agent.drain_timeouts) EXPECT_LE(t, milliseconds(2000));
}

// A real recorder, flusher and offline dump beside a fake agent client, as in offline mode.
class SinkContractTest : public ::testing::Test {
 protected:
  SinkContractTest() : recorder_(64, 64) {
    comm_ = recorder_.InitComm(CommIdentity{0x1234, "world", 0, 2, 1, 0});
  }
  void RunTimedOp(const char* func, bool p2p, uint64_t seq) {
    void* op = recorder_.StartOp(
        comm_, OpDescr{p2p, func, seq, "ncclFloat32", 256, "RING", "LL", p2p ? 1 : -1, 1});
    recorder_.StopEvent(op);
    void* ch = recorder_.StartKernelChannel(op, 0, 1000);
    recorder_.RecordKernelChannelStop(ch, 6000);
    recorder_.StopEvent(ch);
  }
  // A copy-engine collective: completed at stop, without GPU times.
  void RunUntimedOp() {
    OpDescr d{false, "AllGather", 9, "ncclFloat32", 256, "CE", "MC", -1, 0};
    d.copy_engine = true;
    recorder_.StopEvent(recorder_.StartOp(comm_, d));
  }
  Recorder recorder_;
  CommState* comm_;
};

TEST_F(SinkContractTest, FlusherCallsTheHooksInOrder) {
  RecordingSink sink(true);
  Flusher flusher(PluginConfig(), recorder_, ProcessIdentity{"j", "h", 1, 0}, sink);
  RunTimedOp("AllReduce", false, 0);
  RunTimedOp("Send", true, 0);
  RunUntimedOp();
  flusher.RunOnce(/*report=*/true);
  RunTimedOp("AllReduce", false, 1);
  flusher.RunOnce(/*report=*/false);  // a drain only: no report, no round end
  flusher.FinalizeComm(comm_);
  EXPECT_EQ(sink.log,
            (std::vector<std::string>{
                "op world AllReduce", "op world Send", "op world AllGather untimed", "report world",
                "round end", "op world AllReduce", "final report world", "finalized world"}));
}

TEST_F(SinkContractTest, NoOperationCallsWhenNoSinkWantsThem) {
  RecordingSink sink(false);  // fails the test if it gets an operation
  Flusher flusher(PluginConfig(), recorder_, ProcessIdentity{"j", "h", 1, 0}, sink);
  RunTimedOp("AllReduce", false, 0);
  RunUntimedOp();
  flusher.RunOnce(/*report=*/true);
  EXPECT_EQ(sink.log, (std::vector<std::string>{"report world", "round end"}));
}

TEST_F(SinkContractTest, OfflineDumpBesideTheAgentClient) {
  char tmpl[] = "/tmp/ncclwatch-composite-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::string error;
  auto dump = OfflineDump::Open(dir, {"node-a", 42, "777", 0}, &error);
  ASSERT_NE(dump, nullptr) << error;
  EXPECT_TRUE(dump->wants_operations());
  EXPECT_EQ(dump->dropped(), 0u);  // it queues nothing, so never drops

  FakeAgentSink agent;
  agent.dropped_count = 3;
  CompositeSink sinks({dump.get(), &agent});
  Flusher flusher(PluginConfig(), recorder_, ProcessIdentity{"j", "h", 1, 0}, sinks);
  RunTimedOp("AllReduce", false, 0);
  RunTimedOp("Send", true, 0);
  RunUntimedOp();
  flusher.RunOnce(/*report=*/true);

  // The agent client gets the reports, and the reports carry its drop count.
  ASSERT_EQ(agent.reports.size(), 1u);
  EXPECT_EQ(agent.reports[0].drops().reports_dropped(), 3u);
  EXPECT_EQ(agent.reports[0].stats_size(), 3);
  // The dump sees the operations: one JSON line per timed one, p2p numbered from 1.
  std::ifstream log(dump->log_path());
  std::vector<std::string> lines;
  for (std::string line; std::getline(log, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("\"coll\":\"AllReduce\""), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("\"p2p\":\"Send\",\"p2p_sn\":1,"), std::string::npos) << lines[1];
  // ... and the metrics of the periodic report.
  std::ifstream prom(dump->prom_path());
  std::string metrics((std::istreambuf_iterator<char>(prom)), std::istreambuf_iterator<char>());
  EXPECT_NE(metrics.find("nccl_bus_bandwidth_gbs{"), std::string::npos) << metrics;

  flusher.FinalizeComm(comm_);
  ASSERT_EQ(agent.reports.size(), 2u);
  EXPECT_TRUE(agent.reports[1].final());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ncclwatch::plugin

// The agent dies mid-stream and comes back: the training job (simjob, real plugin) must finish
// normally, and the plugins must reconnect on their own and resume reporting within 2 s.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <optional>

#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "common/sync.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ncclwatch/v1/report.grpc.pb.h"
#include "tests/e2e/pipeline.h"

namespace ncclwatch::testing {
namespace {

using ::ncclwatch::testutil::IsOk;

// A stand-in agent on a unix socket that records when reports arrive.
class RecordingAgent final : public ncclwatch::v1::Agent::CallbackService {
 public:
  explicit RecordingAgent(const std::string& socket_path) {
    unlink(socket_path.c_str());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + socket_path, grpc::InsecureServerCredentials());
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~RecordingAgent() override { Kill(); }
  bool ok() const { return server_ != nullptr; }

  // Ends every stream at once, as a crashed agent would.
  void Kill() {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
  }

  // Waits for the first report; returns when it arrived, or nothing after `timeout`.
  std::optional<absl::Time> WaitForFirstReport(absl::Duration timeout) {
    ncclwatch::MutexLock lock(&mu_);
    auto arrived = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return first_.has_value(); };
    mu_.AwaitWithTimeout(absl::Condition(&arrived), timeout);
    return first_;
  }

  grpc::ServerReadReactor<ncclwatch::v1::RankReport>* StreamReports(
      grpc::CallbackServerContext*, ncclwatch::v1::StreamSummary*) override {
    class Reader : public grpc::ServerReadReactor<ncclwatch::v1::RankReport> {
     public:
      explicit Reader(RecordingAgent* agent) : agent_(agent) { StartRead(&report_); }
      void OnReadDone(bool ok) override {
        if (!ok) {
          Finish(grpc::Status::OK);
          return;
        }
        agent_->Record();
        StartRead(&report_);
      }
      void OnDone() override { delete this; }

     private:
      RecordingAgent* agent_;
      ncclwatch::v1::RankReport report_;
    };
    return new Reader(this);
  }

 private:
  void Record() {
    ncclwatch::MutexLock lock(&mu_);
    if (!first_) first_ = absl::Now();
  }
  std::unique_ptr<grpc::Server> server_;
  ncclwatch::Mutex mu_;
  std::optional<absl::Time> first_ ABSL_GUARDED_BY(mu_);
};

TEST(AgentOutageTest, JobFinishesAndReportsResumeWithinTwoSecondsOfTheAgentsReturn) {
  char tmpl[] = "/tmp/ncclwatch-outage-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::string socket = dir + "/agent-0.sock";
  auto first_agent = std::make_unique<RecordingAgent>(socket);
  ASSERT_TRUE(first_agent->ok());

  Process simjob(
      {Binaries::Simjob(), "--plugin=" + Binaries::Plugin(), "--nodes=1", "--ranks-per-node=2",
       "--duration-s=7", "--agent-addr=unix://" + socket, "--env=NCCLWATCH_FLUSH_INTERVAL_MS=200"},
      {}, dir + "/simjob.log");
  ASSERT_TRUE(first_agent->WaitForFirstReport(absl::Seconds(10)).has_value())
      << "the plugins never reported\n"
      << simjob.Log();

  first_agent->Kill();  // mid-stream: the plugins' streams break
  // The outage itself: the agent stays away for 1.5 s while the job keeps running.
  absl::SleepFor(absl::Milliseconds(1500));

  RecordingAgent second_agent(socket);
  ASSERT_TRUE(second_agent.ok());
  absl::Time back = absl::Now();
  std::optional<absl::Time> resumed = second_agent.WaitForFirstReport(absl::Seconds(10));
  ASSERT_TRUE(resumed.has_value()) << "reports did not resume\n" << simjob.Log();
  double seconds = absl::ToDoubleSeconds(*resumed - back);
  std::printf("reports resumed %.2f s after the agent came back\n", seconds);
  EXPECT_LE(seconds, 2.0);

  EXPECT_EQ(simjob.Wait(), 0) << simjob.Log();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ncclwatch::testing

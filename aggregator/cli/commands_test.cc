// The commands against a real gRPC server on 127.0.0.1 port 0 serving canned answers
// (fake_query_test_util.h): what they print, their error lines and exit codes, and how --wait-s
// and --follow use the Watch stream. Nothing sleeps: a test that waits on a deadline measures it.
#include "aggregator/cli/commands.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "aggregator/cli/answers_test_util.h"
#include "aggregator/cli/chrome_trace.h"
#include "aggregator/cli/fake_query_test_util.h"
#include "aggregator/cli/json.h"
#include "aggregator/cli/tables.h"
#include "gtest/gtest.h"

namespace ncclwatch::cli {
namespace {

using ncclwatch::v1::Event;

// A Console whose out and err are in-memory streams.
class CapturedConsole {
 public:
  CapturedConsole()
      : out_(open_memstream(&out_buf_, &out_size_)), err_(open_memstream(&err_buf_, &err_size_)) {}
  ~CapturedConsole() {
    std::fclose(out_);
    std::fclose(err_);
    std::free(out_buf_);
    std::free(err_buf_);
  }
  Console console() const { return {out_, err_}; }
  std::string out() {
    std::fflush(out_);
    return std::string(out_buf_, out_size_);
  }
  std::string err() {
    std::fflush(err_);
    return std::string(err_buf_, err_size_);
  }

 private:
  char* out_buf_ = nullptr;
  size_t out_size_ = 0;
  char* err_buf_ = nullptr;
  size_t err_size_ = 0;
  std::FILE* out_;
  std::FILE* err_;
};

Event MakeEvent(Event::Kind kind, Event::Phase phase, const std::string& job, uint64_t time_ns,
                const std::string& summary) {
  Event e;
  e.set_kind(kind);
  e.set_phase(phase);
  e.set_time_unix_ns(time_ns);
  e.set_summary(summary);
  switch (kind) {
    case Event::STRAGGLER:
      e.mutable_straggler()->set_job_id(job);
      break;
    case Event::HANG:
      e.mutable_hang()->set_job_id(job);
      break;
    case Event::RANK_SILENT:
      e.mutable_silent()->set_job_id(job);
      break;
    case Event::COMM_DEGRADED:
      e.mutable_degraded()->set_job_id(job);
      break;
    case Event::NODE_NETWORK_SUSPECT:
      e.mutable_suspect()->set_job_id(job);
      break;
    default:
      break;
  }
  return e;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class CommandsTest : public ::testing::Test {
 protected:
  void SetUp() override { UseUtc(); }

  // Starts the server on `fake_` as configured so far, and points `config_` at it.
  void Serve() {
    server_ = std::make_unique<FakeQueryServer>(&fake_);
    ASSERT_NE(server_->port(), 0);
    stub_ = server_->NewStub();
    config_.aggregator = server_->address();
  }

  FakeQuery fake_;
  std::unique_ptr<FakeQueryServer> server_;
  std::unique_ptr<ncclwatch::v1::Query::Stub> stub_;
  CommandConfig config_;
  CapturedConsole captured_;
};

TEST_F(CommandsTest, StragglersPrintsTheTableAndExitsThreeForFindings) {
  fake_.stragglers = {TwoStragglers()};
  Serve();
  EXPECT_EQ(Stragglers(*stub_, config_, captured_.console()), kExitFindings);
  EXPECT_EQ(captured_.out(), StragglersText(TwoStragglers()));
  EXPECT_EQ(captured_.err(), "");
  EXPECT_EQ(fake_.calls("ListStragglers"), 1);
  EXPECT_EQ(fake_.calls("Watch"), 0) << "no watch without --wait-s";
}

TEST(CommandTableTest, HelpListsEveryCommandWithItsTextInAColumn) {
  const std::string help = CommandsHelp();
  EXPECT_EQ(help.rfind("Commands:\n", 0), 0u) << help;
  for (const CommandSpec& c : Commands()) {
    EXPECT_NE(help.find("\n  " + std::string(c.name)), std::string::npos) << c.name;
  }
  // A command with an argument shows it; a second line of help is indented to the column.
  EXPECT_NE(help.find("\n  query SEL    stored points of the series matching a Prometheus "
                      "selector, e.g.\n               'nccl_bus_bandwidth_gbs"),
            std::string::npos)
      << help;
  EXPECT_NE(help.find("\n  jobs         jobs that have reported"), std::string::npos) << help;
}

TEST_F(CommandsTest, RunCommandDispatchesByNameAndRefusesABadCommandLine) {
  fake_.jobs = {OneJob()};
  Serve();
  EXPECT_EQ(RunCommand(*stub_, config_, {"jobs"}, captured_.console()), 0);
  EXPECT_EQ(fake_.calls("ListJobs"), 1);
  EXPECT_EQ(RunCommand(*stub_, config_, {"no-such"}, captured_.console()), kExitUsage);
  EXPECT_EQ(RunCommand(*stub_, config_, {"query"}, captured_.console()), kExitUsage);
  EXPECT_EQ(RunCommand(*stub_, config_, {"jobs", "extra"}, captured_.console()), kExitUsage);
  EXPECT_EQ(captured_.err(),
            "ncclwatch: unknown command 'no-such' (see ncclwatch --help)\n"
            "ncclwatch: query needs one selector argument (see --help)\n"
            "ncclwatch: jobs takes no argument (see --help)\n");
  EXPECT_EQ(fake_.calls("ListJobs"), 1) << "a refused command line calls nothing";
  EXPECT_EQ(fake_.calls("QueryRange"), 0);
}

TEST_F(CommandsTest, NothingFlaggedExitsZero) {
  Serve();
  EXPECT_EQ(Stragglers(*stub_, config_, captured_.console()), kExitNothingFound);
  EXPECT_EQ(Hangs(*stub_, config_, captured_.console()), kExitNothingFound);
  EXPECT_EQ(Degraded(*stub_, config_, captured_.console()), kExitNothingFound);
  EXPECT_EQ(captured_.err(), "");
}

// A mistyped --job is an error naming the jobs the aggregator knows, not a healthy-looking job.
TEST_F(CommandsTest, AnUnknownJobFailsAndNamesTheKnownOnes) {
  fake_.jobs = {OneJob()};
  fake_.stragglers = {TwoStragglers()};
  Serve();
  config_.job = "jbo-a";
  config_.comm = "world";
  EXPECT_EQ(Stragglers(*stub_, config_, captured_.console()), kExitFailed);
  EXPECT_EQ(Comms(*stub_, config_, captured_.console()), kExitFailed);
  EXPECT_EQ(Events(*stub_, config_, captured_.console()), kExitFailed);
  EXPECT_EQ(Trace(*stub_, config_, captured_.console()), kExitFailed);
  EXPECT_EQ(captured_.out(), "");
  const std::string line =
      "ncclwatch: no job 'jbo-a' at the aggregator at " + config_.aggregator + ": it knows job-a\n";
  EXPECT_EQ(captured_.err(), line + line + line + line);
  EXPECT_EQ(fake_.calls("ListStragglers") + fake_.calls("ListComms") + fake_.calls("ListEvents") +
                fake_.calls("GetTrace"),
            0);
  config_.job = "job-a";
  EXPECT_EQ(Stragglers(*stub_, config_, captured_.console()), kExitFindings);
}

TEST_F(CommandsTest, EveryListingPrintsItsTextOrItsJson) {
  fake_.hangs = {ThreeHangsAndASilentRank()};
  fake_.degraded = {DegradedWithSuspect()};
  fake_.jobs = {OneJob()};
  fake_.comms = {TwoComms()};
  Serve();
  EXPECT_EQ(Hangs(*stub_, config_, captured_.console()), kExitFindings);
  EXPECT_EQ(Degraded(*stub_, config_, captured_.console()), kExitFindings);
  EXPECT_EQ(Jobs(*stub_, config_, captured_.console()), 0);
  EXPECT_EQ(Comms(*stub_, config_, captured_.console()), 0);
  config_.json = true;
  EXPECT_EQ(Hangs(*stub_, config_, captured_.console()), kExitFindings);
  EXPECT_EQ(Jobs(*stub_, config_, captured_.console()), 0);
  EXPECT_EQ(captured_.out(), HangsText(ThreeHangsAndASilentRank()) +
                                 DegradedText(DegradedWithSuspect()) + JobsText(OneJob()) +
                                 CommsText(TwoComms()) + ProtoJson(ThreeHangsAndASilentRank()) +
                                 "\n" + ProtoJson(OneJob()) + "\n");
  EXPECT_EQ(captured_.err(), "");
}

TEST_F(CommandsTest, AnUnreachableAggregatorGivesAReadableErrorAndExitsOne) {
  // A unix socket in a fresh, empty directory: nothing can be listening there.
  char tmpl[] = "/tmp/ncclwatch-cli-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  config_.aggregator = std::string("unix://") + tmpl + "/no-aggregator.sock";
  stub_ = ncclwatch::v1::Query::NewStub(
      grpc::CreateChannel(config_.aggregator, grpc::InsecureChannelCredentials()));
  EXPECT_EQ(Stragglers(*stub_, config_, captured_.console()), 1);
  EXPECT_EQ(Events(*stub_, config_, captured_.console()), 1);
  EXPECT_EQ(captured_.out(), "");
  const std::string err = captured_.err();
  const std::string start =
      "ncclwatch: cannot reach the aggregator at " + config_.aggregator + " (";
  const std::string end =
      "). Is ncclwatch-aggregator running there? Use --aggregator HOST:PORT or "
      "NCCLWATCH_AGGREGATOR.\n";
  ASSERT_EQ(err.rfind(start, 0), 0u) << err;
  const size_t first_line = err.find('\n') + 1;
  EXPECT_EQ(err.substr(first_line - end.size(), end.size()), end) << err;
  EXPECT_EQ(err.substr(first_line).rfind(start, 0), 0u) << "one line per failed command: " << err;
  rmdir(tmpl);
}

TEST_F(CommandsTest, ARefusedCallPrintsTheAggregatorsAnswer) {
  fake_.unary_status = grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "not yours");
  Serve();
  EXPECT_EQ(Jobs(*stub_, config_, captured_.console()), 1);
  EXPECT_EQ(captured_.out(), "");
  EXPECT_EQ(captured_.err(),
            "ncclwatch: aggregator at " + config_.aggregator + " answered: not yours\n");
}

TEST_F(CommandsTest, EveryCallCarriesTheBearerToken) {
  fake_.token = "s3cret";
  fake_.comms = {TwoComms()};
  Serve();
  EXPECT_EQ(Comms(*stub_, config_, captured_.console()), 1);
  EXPECT_EQ(captured_.err(), "ncclwatch: aggregator at " + config_.aggregator +
                                 " answered: missing or wrong token\n");
  config_.token = "s3cret";
  EXPECT_EQ(Comms(*stub_, config_, captured_.console()), 0);
  EXPECT_EQ(captured_.out(), CommsText(TwoComms()));
}

// A job that ended is still known (its answer is empty: its findings ended with it); stderr says
// so and where to look, so that the empty answer does not read as "it was healthy".
TEST_F(CommandsTest, AnEndedJobsEmptyAnswerSaysTheJobEnded) {
  ncclwatch::v1::ListJobsResponse jobs = OneJob();
  jobs.mutable_jobs(0)->set_state("ended");
  jobs.mutable_jobs(0)->set_ended_unix_ns(3723 * kSecond);
  jobs.mutable_jobs(0)->set_end_reason("every rank sent its final report");
  fake_.jobs = {jobs};
  fake_.stragglers = {ncclwatch::v1::ListStragglersResponse()};
  Serve();
  config_.job = jobs.jobs(0).job_id();
  EXPECT_EQ(Stragglers(*stub_, config_, captured_.console()), 0);
  EXPECT_EQ(captured_.out(), StragglersText({}));
  EXPECT_EQ(captured_.err(),
            absl::StrCat("ncclwatch: job '", config_.job, "' ended at ", ClockText(3723 * kSecond),
                         " (every rank sent its final report); its findings ended with it: "
                         "`ncclwatch events --job ",
                         config_.job, "` lists them, `ncclwatch comms --job ", config_.job,
                         "` shows its communicators as they last were\n"));
}

// --wait-s: the watch opens before the first list; only a START of the command's kind for --job
// ends the wait (the token goes on the watch too).
TEST_F(CommandsTest, WaitReturnsAsSoonAsAStartEventOfTheWantedKindArrives) {
  fake_.token = "s3cret";
  fake_.jobs = {OneJob()};
  fake_.stragglers = {ncclwatch::v1::ListStragglersResponse(), TwoStragglers()};
  fake_.watch_events = {
      MakeEvent(Event::STRAGGLER, Event::END, "job-a", 1, "ended"),
      MakeEvent(Event::HANG, Event::START, "job-a", 2, "another kind"),
      MakeEvent(Event::STRAGGLER, Event::START, "job-b", 3, "another job"),
      MakeEvent(Event::STRAGGLER, Event::START, "job-a", 4, "the one"),
  };
  Serve();
  config_.token = "s3cret";
  config_.job = "job-a";
  config_.wait_s = 60;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Stragglers(*stub_, config_, captured_.console()), kExitFindings);
  EXPECT_LT(SecondsSince(start), 30) << "returned on the event, not at the end of --wait-s";
  EXPECT_EQ(captured_.out(), StragglersText(TwoStragglers()));
  // Progress on stderr only: stdout stays the answer.
  EXPECT_EQ(captured_.err(), "ncclwatch: nothing flagged yet; waiting up to 60 s for a finding\n");
  EXPECT_EQ(fake_.calls("Watch"), 1);
  EXPECT_EQ(fake_.calls("ListStragglers"), 2);
}

TEST_F(CommandsTest, WaitDoesNotWaitWhenSomethingIsFlaggedAlready) {
  fake_.hangs = {ThreeHangsAndASilentRank()};
  Serve();
  config_.wait_s = 60;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Hangs(*stub_, config_, captured_.console()), kExitFindings);
  EXPECT_LT(SecondsSince(start), 30);
  EXPECT_EQ(captured_.out(), HangsText(ThreeHangsAndASilentRank()));
  EXPECT_EQ(fake_.calls("Watch"), 1) << "the watch opens before the first list";
  EXPECT_EQ(fake_.calls("ListHangs"), 1);
}

TEST_F(CommandsTest, WaitDoesNotWaitWhenARootCauseIsFoundAlready) {
  ncclwatch::v1::ListStragglersResponse roots;
  auto* root = roots.add_root_causes();
  root->set_job_id("job-a");
  root->set_cuda_device(1);
  fake_.stragglers = {roots};
  Serve();
  config_.wait_s = 60;
  EXPECT_EQ(Stragglers(*stub_, config_, captured_.console()), kExitFindings);
  EXPECT_EQ(captured_.out(), StragglersText(roots));
  EXPECT_EQ(fake_.calls("ListStragglers"), 1);
}

TEST_F(CommandsTest, WaitForHangsEndsOnASilentRank) {
  fake_.hangs = {ncclwatch::v1::ListHangsResponse(), ThreeHangsAndASilentRank()};
  fake_.watch_events = {MakeEvent(Event::RANK_SILENT, Event::START, "job-h", 1, "silent")};
  Serve();
  config_.wait_s = 60;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Hangs(*stub_, config_, captured_.console()), kExitFindings);
  EXPECT_LT(SecondsSince(start), 30);
  EXPECT_EQ(captured_.out(), HangsText(ThreeHangsAndASilentRank()));
  EXPECT_EQ(fake_.calls("ListHangs"), 2);
}

// A degraded communicator is a finding by itself (a plain DDP or FSDP job has one hybrid
// communicator and never a suspect node): `degraded` exits 3 on it, and --wait-s ends on it.
TEST_F(CommandsTest, ADegradedCommunicatorWithoutASuspectNodeIsAFindingAndEndsTheWait) {
  ncclwatch::v1::ListDegradedResponse comm_only = DegradedWithSuspect();
  comm_only.clear_suspects();
  fake_.degraded = {ncclwatch::v1::ListDegradedResponse(), comm_only, comm_only};
  fake_.watch_events = {MakeEvent(Event::COMM_DEGRADED, Event::START, "job-d", 1, "slow")};
  Serve();
  config_.wait_s = 60;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Degraded(*stub_, config_, captured_.console()), kExitFindings);
  EXPECT_LT(SecondsSince(start), 30);  // not the 60 s of --wait-s
  EXPECT_EQ(fake_.calls("ListDegraded"), 2);
  config_.wait_s = 0;
  EXPECT_EQ(Degraded(*stub_, config_, captured_.console()), kExitFindings);
  EXPECT_EQ(captured_.out(), DegradedText(comm_only) + DegradedText(comm_only));
}

TEST_F(CommandsTest, EventsListsTheStoredOnesWithinLimitAndSince) {
  ncclwatch::v1::ListEventsResponse stored;
  *stored.add_events() = MakeEvent(Event::HANG, Event::START, "job-a", 3723 * kSecond, "hung");
  stored.set_next_page_token("more");
  fake_.events = {stored};
  fake_.jobs = {OneJob()};
  Serve();
  config_.job = "job-a";
  config_.since_s = 600;
  config_.limit = 1'000'000;
  const uint64_t before = static_cast<uint64_t>(absl::GetCurrentTimeNanos());
  EXPECT_EQ(Events(*stub_, config_, captured_.console()), 0);
  config_.json = true;
  config_.limit = 0;
  EXPECT_EQ(Events(*stub_, config_, captured_.console()), 0);
  EXPECT_EQ(captured_.out(), EventLine(stored.events(0)) + ProtoJson(stored) + "\n");
  const ncclwatch::v1::ListEventsRequest request = fake_.last_events_request();
  EXPECT_EQ(request.job_id(), "job-a");
  EXPECT_EQ(request.limit(), 1u) << "--limit is clamped to [1, 100000]";
  EXPECT_GE(request.since_unix_ns(), before - 600 * kSecond);
  EXPECT_LE(request.since_unix_ns(), before - 599 * kSecond);
  EXPECT_EQ(fake_.calls("Watch"), 0);
  // What the limit left out is said, on stderr.
  const std::string note =
      "ncclwatch: showing the oldest 1 events of the last 600 s; more are stored (raise --limit "
      "or lower --since-s)\n";
  EXPECT_EQ(captured_.err(), note + note);
}

TEST_F(CommandsTest, EventsSaysWhenThereAreNone) {
  Serve();
  config_.since_s = 120;
  EXPECT_EQ(Events(*stub_, config_, captured_.console()), 0);
  EXPECT_EQ(captured_.out(), "No detection event in the last 120 s.\n");
}

// --follow: stored events, then new ones of --job from the watch, each printed once, until the
// stream ends.
TEST_F(CommandsTest, EventsFollowPrintsNewEventsOnceUntilTheStreamEnds) {
  const Event a = MakeEvent(Event::STRAGGLER, Event::START, "job-a", 3723 * kSecond, "a");
  const Event b = MakeEvent(Event::STRAGGLER, Event::END, "job-a", 3724 * kSecond, "b");
  const Event other = MakeEvent(Event::HANG, Event::START, "job-b", 3725 * kSecond, "other");
  const Event c = MakeEvent(Event::HANG, Event::START, "job-a", 3726 * kSecond, "c");
  ncclwatch::v1::ListEventsResponse stored;
  *stored.add_events() = a;
  *stored.add_events() = b;
  fake_.events = {stored};
  fake_.jobs = {OneJob()};
  fake_.watch_events = {b, other, c};
  fake_.watch_end = grpc::Status::OK;
  Serve();
  config_.job = "job-a";
  config_.follow = true;
  EXPECT_EQ(Events(*stub_, config_, captured_.console()), 0);
  EXPECT_EQ(captured_.out(), EventLine(a) + EventLine(b) + EventLine(c));
  config_.json = true;
  EXPECT_EQ(Events(*stub_, config_, captured_.console()), 0);
  EXPECT_EQ(captured_.out(), EventLine(a) + EventLine(b) + EventLine(c) + ProtoJson(a) + "\n" +
                                 ProtoJson(b) + "\n" + ProtoJson(c) + "\n");
  EXPECT_EQ(captured_.err(), "");
}

TEST_F(CommandsTest, EventsFollowEndsQuietlyAtWaitAndLoudlyOnAnError) {
  fake_.watch_events = {MakeEvent(Event::HANG, Event::START, "job-a", 3723 * kSecond, "new")};
  Serve();
  config_.follow = true;
  // Long enough for a sanitizer build to list the stored events and read the new one first.
  config_.wait_s = 1;
  EXPECT_EQ(Events(*stub_, config_, captured_.console()), 0) << "the end of --wait-s is no error";
  EXPECT_EQ(captured_.out(),
            "No detection event in the last 3600 s. Waiting for new ones (Ctrl-C to stop).\n" +
                EventLine(fake_.watch_events[0]));
  EXPECT_EQ(captured_.err(), "");

  // A refusal is an error, even one that comes after --wait-s is over; the wait here is long so
  // that the refusal, not the deadline, ends the stream.
  FakeQuery refusing;
  refusing.watch_end = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "too many watchers");
  FakeQueryServer server(&refusing);
  config_.aggregator = server.address();
  config_.wait_s = 600;
  CapturedConsole captured;
  EXPECT_EQ(Events(*server.NewStub(), config_, captured.console()), 1);
  EXPECT_EQ(captured.err(),
            "ncclwatch: aggregator at " + server.address() + " answered: too many watchers\n");
}

TEST_F(CommandsTest, QueryPrintsThePointsOfTheLastSinceSeconds) {
  fake_.query_range = {OneSeries()};
  Serve();
  config_.since_s = 60;
  config_.step_s = 0.5;
  EXPECT_EQ(Query(*stub_, config_, "nccl_bus_bandwidth_gbs{rank=\"5\"}", captured_.console()), 0);
  EXPECT_EQ(captured_.out(), QueryText(OneSeries(), "nccl_bus_bandwidth_gbs{rank=\"5\"}", 60));
  const ncclwatch::v1::QueryRangeRequest request = fake_.last_query_request();
  EXPECT_EQ(request.selector(), "nccl_bus_bandwidth_gbs{rank=\"5\"}");
  EXPECT_EQ(request.end_unix_ms() - request.start_unix_ms(), 60'000u);
  EXPECT_EQ(request.step_ms(), 500u);
}

class TraceCommandTest : public CommandsTest {
 protected:
  void SetUp() override {
    CommandsTest::SetUp();
    fake_.jobs.resize(1);
    fake_.jobs[0].add_jobs()->set_job_id("job-t");
    char tmpl[] = "/tmp/ncclwatch-cli-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::remove((dir_ + "/t.json").c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_;
};

TEST_F(TraceCommandTest, WritesTheChromeTraceAndSaysWhere) {
  fake_.trace = {TwoRankTrace()};
  Serve();
  config_.job = "job-t";
  config_.comm = "world";
  config_.since_s = 30;
  config_.output = dir_ + "/t.json";
  EXPECT_EQ(Trace(*stub_, config_, captured_.console()), 0);
  EXPECT_EQ(captured_.out(), TraceWrittenText(TwoRankTrace(), "job-t", config_.output));
  std::ifstream file(config_.output);
  std::stringstream content;
  content << file.rdbuf();
  EXPECT_EQ(content.str(), ChromeTrace(TwoRankTrace()));
  const ncclwatch::v1::GetTraceRequest request = fake_.last_trace_request();
  EXPECT_EQ(request.job_id(), "job-t");
  EXPECT_EQ(request.comm(), "world");
  EXPECT_EQ(request.end_unix_ms() - request.start_unix_ms(), 30'000u);
}

TEST_F(TraceCommandTest, OutputDashWritesTheTraceToStdout) {
  fake_.trace = {TwoRankTrace()};
  Serve();
  config_.job = "job-t";
  config_.comm = "world";
  config_.output = "-";
  EXPECT_EQ(Trace(*stub_, config_, captured_.console()), 0);
  EXPECT_EQ(captured_.out(), ChromeTrace(TwoRankTrace()));
  EXPECT_EQ(captured_.err(), "");
  std::ifstream none("-");
  EXPECT_FALSE(none.good()) << "no file named '-'";
}

TEST_F(TraceCommandTest, NeedsJobAndCommAndAWritableOutput) {
  Serve();
  config_.job = "job-t";
  EXPECT_EQ(Trace(*stub_, config_, captured_.console()), 1);
  EXPECT_EQ(fake_.calls("GetTrace"), 0);
  config_.comm = "world";
  config_.output = dir_ + "/missing/t.json";
  EXPECT_EQ(Trace(*stub_, config_, captured_.console()), 1);
  EXPECT_EQ(captured_.out(), "");
  EXPECT_EQ(captured_.err(),
            "ncclwatch: trace needs --job and --comm (a communicator name such as world, or its 0x "
            "hash)\n"
            "ncclwatch: cannot write " +
                config_.output + ": No such file or directory\n");
}

}  // namespace
}  // namespace ncclwatch::cli

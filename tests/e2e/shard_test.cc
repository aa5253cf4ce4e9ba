// Several aggregators as one service: twelve jobs of a 3D-parallel model (tests/loadgen) go through
// two real agents to three real aggregators, each job whole to the one its id hashes to; any
// aggregator answers the Query API for all twelve. Then a fourth aggregator joins: only the jobs it
// takes over move, nothing acknowledged is lost, and the moved jobs' findings come back on it.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "aggregator/server/shard_router.h"
#include "common/rendezvous.h"
#include "common/status_matchers.h"
#include "common/sync.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ncclwatch/v1/report.grpc.pb.h"
#include "tests/e2e/pipeline.h"
#include "tests/e2e/process.h"
#include "tests/e2e/prometheus_server.h"
#include "tests/loadgen/job_reports.h"
#include "tests/simjob/job_common.h"

namespace ncclwatch::testing {
namespace {

using ::ncclwatch::testutil::IsOk;

constexpr int kJobs = 12;
constexpr int kAgents = 2;  // node n of every job reports through agent n
constexpr int64_t kIntervalNs = 500'000'000;

std::string JobId(int j) { return absl::StrCat("train-", j < 10 ? "0" : "", j); }
// The job's slow GPU: its plugin's pid (tests/loadgen reports 100000 + rank).
uint32_t SlowPid(int j) { return 100000 + static_cast<uint32_t>(j % 8); }

// A call's client context; `local` asks one aggregator for its own state only, as a peer does.
std::unique_ptr<grpc::ClientContext> Context(bool local = false) {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  if (local) c->AddMetadata(kShardHopHeader, "1");
  return c;
}

std::set<std::string> Jobs(ncclwatch::v1::Query::Stub& q, bool local = false,
                           bool running_only = false) {
  ncclwatch::v1::ListJobsResponse r;
  std::set<std::string> jobs;
  if (q.ListJobs(Context(local).get(), {}, &r).ok()) {
    for (const auto& j : r.jobs()) {
      if (!running_only || j.state() == "running") jobs.insert(j.job_id());
    }
  }
  return jobs;
}

// The root causes one query names for `job` (pids), through whichever aggregator `q` is.
std::set<uint32_t> RootCausePids(ncclwatch::v1::Query::Stub& q, const std::string& job) {
  ncclwatch::v1::ListStragglersRequest req;
  req.set_job_id(job);
  ncclwatch::v1::ListStragglersResponse r;
  std::set<uint32_t> pids;
  if (!q.ListStragglers(Context().get(), req, &r).ok()) return pids;
  for (const auto& rc : r.root_causes()) {
    EXPECT_EQ(rc.job_id(), job);
    pids.insert(rc.pid());
  }
  return pids;
}

uint64_t Ingested(ncclwatch::v1::Query::Stub& q) {
  ncclwatch::v1::Stats s;
  return q.GetStats(Context().get(), {}, &s).ok() ? s.reports_ingested() : 0;
}

// Every event through `q`, paged `page` at a time.
std::vector<ncclwatch::v1::Event> AllEvents(ncclwatch::v1::Query::Stub& q, uint32_t page,
                                            bool local = false) {
  std::vector<ncclwatch::v1::Event> out;
  ncclwatch::v1::ListEventsRequest req;
  req.set_limit(page);
  for (int pages = 0; pages < 10000; ++pages) {
    ncclwatch::v1::ListEventsResponse r;
    const grpc::Status s = q.ListEvents(Context(local).get(), req, &r);
    EXPECT_THAT(s, IsOk()) << s.error_message();
    if (!s.ok()) break;
    out.insert(out.end(), r.events().begin(), r.events().end());
    if (r.next_page_token().empty()) break;
    req.set_page_token(r.next_page_token());
  }
  return out;
}

class ShardedService {
 public:
  ShardedService() {
    for (int i = 0; i < 4; ++i) {
      names_.push_back(absl::StrCat("agg-", i));
      ports_.push_back(FreePort());
    }
  }

  // The --shard-peers / --aggregator list of the first `n` aggregators.
  std::string Members(int n) const {
    std::vector<std::string> m;
    for (int i = 0; i < n; ++i) m.push_back(absl::StrCat(names_[i], "=127.0.0.1:", ports_[i]));
    return absl::StrJoin(m, ",");
  }
  std::vector<std::string> Flags(int i, int n) const {
    // --history-step-s=1: the stored detection series (paged below) within a second.
    return {absl::StrCat("--grpc-port=", ports_[i]), "--shard-peers=" + Members(n),
            "--shard-self=" + names_[i], "--history-step-s=1"};
  }
  std::vector<std::string> Names(int n) const { return {names_.begin(), names_.begin() + n}; }

  bool StartAggregator(int i, int n) {
    aggregators_.push_back(std::make_unique<Pipeline>(0, Flags(i, n)));
    return aggregators_.back()->ok();
  }
  Pipeline& aggregator(int i) { return *aggregators_[i]; }

  bool StartAgents(int n) {
    agents_.clear();
    for (int a = 0; a < kAgents; ++a) {
      const std::string socket = absl::StrCat("unix://", dir_.path(), "/agent-", a, ".sock");
      sockets_[a] = socket;
      agents_.push_back(std::make_unique<Process>(
          std::vector<std::string>{
              Binaries::Agent(), "--listen=" + socket, "--aggregator=" + Members(n),
              "--http-port=0", absl::StrCat("--node-name=shard-node-", a),
              "--batch-interval-ms=100", absl::StrCat("--spool-dir=", dir_.path(), "/spool-", a),
              "--pod-resources-socket="},
          std::map<std::string, std::string>{}, absl::StrCat(dir_.path(), "/agent-", a, ".log"),
          "--ready-fd"));
      if (agents_.back()->ReadyValue("http_port") <= 0) return false;
    }
    return true;
  }
  // SIGTERM: each agent pushes what it holds and exits 0.
  bool StopAgents() {
    bool ok = true;
    for (auto& agent : agents_) {
      agent->Signal(SIGTERM);
      ok &= agent->Wait() == 0;
    }
    agents_.clear();
    return ok;
  }
  std::string AgentLogs() const {
    std::string out;
    for (const auto& a : agents_) out += a->Log();
    return out;
  }

  // Sends one interval of every job's reports (node n through agent n); returns how many the
  // agents accepted.
  uint64_t Feed(std::vector<std::unique_ptr<loadgen::JobReports>>& jobs, int64_t end_ns) {
    uint64_t accepted = 0;
    for (int a = 0; a < kAgents; ++a) {
      auto stub = ncclwatch::v1::Agent::NewStub(
          grpc::CreateChannel(sockets_[a], grpc::InsecureChannelCredentials()));
      grpc::ClientContext context;
      ncclwatch::v1::StreamSummary summary;
      auto writer = stub->StreamReports(&context, &summary);
      for (auto& job : jobs) {
        std::vector<ncclwatch::v1::RankReport> reports;
        job->NodeReports(a, end_ns, &reports);
        for (const auto& r : reports) {
          if (!writer->Write(r)) break;
        }
      }
      writer->WritesDone();
      EXPECT_THAT(writer->Finish(), IsOk());
      accepted += summary.accepted();
    }
    return accepted;
  }

 private:
  ScopedTempDir dir_{"ncclwatch-shard"};
  std::vector<std::string> names_;
  std::vector<int> ports_;
  std::vector<std::unique_ptr<Pipeline>> aggregators_;
  std::vector<std::unique_ptr<Process>> agents_;
  std::string sockets_[kAgents];
};

std::vector<std::unique_ptr<loadgen::JobReports>> MakeJobs(int64_t t0) {
  std::vector<std::unique_ptr<loadgen::JobReports>> jobs;
  for (int j = 0; j < kJobs; ++j) {
    simjob::JobModelConfig m;
    m.tp = 2;
    m.pp = 2;
    m.dp = 2;
    m.gpus_per_node = 4;  // two nodes: one per agent
    m.program.microbatches = 4;
    m.program.layers = 1;
    m.program.layer_fwd_ns = 20'000'000;
    m.program.optimizer_ns = 40'000'000;
    m.seed = 7 + static_cast<uint64_t>(j);
    m.t0_ns = t0;
    m.warmup_iterations = 2;
    m.clock_skew_ns = 20'000'000;
    // Each job's own slow GPU, from 4 s on.
    m.slow.push_back({.rank = j % 8, .factor = 1.5, .at_ns = t0 + 4'000'000'000});
    loadgen::JobReportsOptions o;
    o.job_id = JobId(j);
    o.stride = 4;
    jobs.push_back(std::make_unique<loadgen::JobReports>(m, o));
  }
  return jobs;
}

TEST(ShardEndToEndTest, TwelveJobsOnThreeAggregatorsAnsweredByAnyThenAFourthTakesSomeOver) {
  ShardedService service;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(service.StartAggregator(i, 3)) << service.aggregator(i).error();
  }
  ASSERT_TRUE(service.StartAgents(3)) << service.AgentLogs();
  const std::vector<std::string> three = service.Names(3);
  const std::vector<std::string> four = service.Names(4);
  std::map<int, std::set<std::string>> owned3;  // aggregator -> its jobs
  for (int j = 0; j < kJobs; ++j)
    owned3[static_cast<int>(RendezvousOwner(JobId(j), three))].insert(JobId(j));

  // A Watch on one aggregator streams every aggregator's findings.
  grpc::ClientContext watch_context;
  auto watch = service.aggregator(1).query().Watch(&watch_context, {});
  watch->WaitForInitialMetadata();  // subscribed
  ncclwatch::Mutex watched_mu;
  std::set<std::string> watched_root_causes;  // job ids
  std::thread watcher([&] {
    ncclwatch::v1::Event e;
    while (watch->Read(&e)) {
      if (e.phase() == ncclwatch::v1::Event::START && e.has_root_cause()) {
        ncclwatch::MutexLock lock(&watched_mu);
        watched_root_causes.insert(e.root_cause().job_id());
      }
    }
  });

  int64_t end_ns = (simjob::NowNs() / kIntervalNs + 1) * kIntervalNs;
  auto jobs = MakeJobs(end_ns);
  uint64_t accepted = 0;
  // Every job's slow GPU named through one address (aggregator 0), whichever aggregator has it.
  auto all_found = [&](const std::vector<int>& which) {
    for (int j : which) {
      if (RootCausePids(service.aggregator(0).query(), JobId(j)) !=
          std::set<uint32_t>{SlowPid(j)}) {
        return false;
      }
    }
    return true;
  };
  std::vector<int> every_job(kJobs);
  for (int j = 0; j < kJobs; ++j) every_job[j] = j;
  bool found = false;
  for (int k = 0; k < 80 && !found; ++k, end_ns += kIntervalNs) {
    simjob::SleepUntil(end_ns);  // the jobs' pace: one flush interval of their plugins
    accepted += service.Feed(jobs, end_ns);
    found = k >= 8 && all_found(every_job);
  }
  ASSERT_TRUE(found) << "not every job's slow GPU was named within 40 s";
  ASSERT_TRUE(service.StopAgents()) << service.AgentLogs();

  // The watch saw every job's root cause, whichever aggregator found it.
  std::set<std::string> all;
  for (int j = 0; j < kJobs; ++j) all.insert(JobId(j));
  EXPECT_TRUE(PollUntil(
      [&] {
        ncclwatch::MutexLock lock(&watched_mu);
        return watched_root_causes == all;
      },
      20));
  watch_context.TryCancel();
  watcher.join();

  // Each job is whole on the aggregator its id hashes to, and nowhere else.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Jobs(service.aggregator(i).query(), /*local=*/true), owned3[i]) << "aggregator " << i;
  }
  // Any address lists and answers for all twelve; no other root cause anywhere.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Jobs(service.aggregator(i).query()), all) << "through aggregator " << i;
  }
  {
    ncclwatch::v1::ListStragglersResponse r;
    ASSERT_THAT(service.aggregator(2).query().ListStragglers(Context().get(), {}, &r), IsOk());
    std::set<std::pair<std::string, uint32_t>> causes, want;
    for (const auto& rc : r.root_causes()) causes.insert({rc.job_id(), rc.pid()});
    for (int j = 0; j < kJobs; ++j) want.insert({JobId(j), SlowPid(j)});
    EXPECT_EQ(causes, want);
  }
  // Events: one address pages through every aggregator's, oldest first, none twice or missing.
  std::vector<ncclwatch::v1::Event> merged = AllEvents(service.aggregator(1).query(), 7);
  size_t local_total = 0;
  for (int i = 0; i < 3; ++i) {
    local_total += AllEvents(service.aggregator(i).query(), 1000, /*local=*/true).size();
  }
  EXPECT_EQ(merged.size(), local_total);
  EXPECT_GE(merged.size(), static_cast<size_t>(kJobs));
  EXPECT_TRUE(std::is_sorted(merged.begin(), merged.end(), [](const auto& a, const auto& b) {
    return a.time_unix_ns() < b.time_unix_ns();
  }));
  // Series: one address pages through every aggregator's, each series once; a selector naming a
  // job is answered by its owner.
  {
    auto series = [](ncclwatch::v1::Query::Stub& q, const std::string& selector, uint32_t page,
                     bool local) {
      std::multiset<std::string> out;
      ncclwatch::v1::QueryRangeRequest req;
      req.set_selector(selector);
      req.set_max_series(page);
      for (int pages = 0; pages < 1000; ++pages) {
        ncclwatch::v1::QueryRangeResponse r;
        const grpc::Status s = q.QueryRange(Context(local).get(), req, &r);
        EXPECT_THAT(s, IsOk()) << s.error_message();
        if (!s.ok()) break;
        EXPECT_LE(r.series_size(), static_cast<int>(page));
        for (const auto& ts : r.series()) out.insert(ts.DebugString().substr(0, 200));
        if (r.next_page_token().empty()) break;
        req.set_page_token(r.next_page_token());
      }
      return out;
    };
    std::multiset<std::string> locals;
    for (int i = 0; i < 3; ++i) {
      auto mine = series(service.aggregator(i).query(), "ncclwatch_hang", 1000, true);
      locals.insert(mine.begin(), mine.end());
    }
    const auto merged_series = series(service.aggregator(0).query(), "ncclwatch_hang", 5, false);
    EXPECT_EQ(merged_series.size(), locals.size());
    EXPECT_GE(merged_series.size(), static_cast<size_t>(kJobs));  // a series per communicator
    ASSERT_FALSE(owned3[2].empty());
    const std::string job = *owned3[2].begin();
    EXPECT_EQ(series(service.aggregator(0).query(), "ncclwatch_hang{job_id=\"" + job + "\"}", 1000,
                     false),
              series(service.aggregator(2).query(), "ncclwatch_hang{job_id=\"" + job + "\"}", 1000,
                     true));
  }
  // Every acknowledged report was ingested (summed over the three).
  EXPECT_TRUE(PollUntil([&] { return Ingested(service.aggregator(0).query()) == accepted; }, 20))
      << Ingested(service.aggregator(0).query()) << " ingested of " << accepted << " accepted";

  // A fourth aggregator joins: it starts, the others restart knowing it, the agents list it.
  ASSERT_TRUE(service.StartAggregator(3, 4)) << service.aggregator(3).error();
  for (int i = 0; i < 3; ++i) {
    service.aggregator(i).set_aggregator_flags(service.Flags(i, 4));
    ASSERT_TRUE(service.aggregator(i).RestartAggregator()) << service.aggregator(i).error();
  }
  std::vector<int> moved;
  for (int j = 0; j < kJobs; ++j) {
    const std::string now = four[RendezvousOwner(JobId(j), four)];
    if (now == four[3]) {
      moved.push_back(j);
    } else {
      EXPECT_EQ(now, three[RendezvousOwner(JobId(j), three)]) << JobId(j) << " moved between old";
    }
  }
  ASSERT_FALSE(moved.empty());
  EXPECT_LE(moved.size(), static_cast<size_t>(kJobs / 3));
  ASSERT_TRUE(service.StartAgents(4)) << service.AgentLogs();
  end_ns = std::max(end_ns, (simjob::NowNs() / kIntervalNs + 1) * kIntervalNs);
  found = false;
  for (int k = 0; k < 80 && !found; ++k, end_ns += kIntervalNs) {
    simjob::SleepUntil(end_ns);
    accepted += service.Feed(jobs, end_ns);
    found = Jobs(service.aggregator(3).query(), /*local=*/true, /*running_only=*/true).size() ==
                moved.size() &&
            all_found(moved);
  }
  ASSERT_TRUE(found) << "the moved jobs' slow GPUs were not named again within 40 s";
  // The new aggregator judged them afresh: their finding is its own.
  for (int j : moved) {
    EXPECT_EQ(RootCausePids(service.aggregator(3).query(), JobId(j)),
              std::set<uint32_t>{SlowPid(j)});
  }
  std::set<std::string> moved_ids;
  for (int j : moved) moved_ids.insert(JobId(j));
  EXPECT_EQ(Jobs(service.aggregator(3).query(), /*local=*/true), moved_ids);
  // The jobs that stayed are still judged where they were; the list through any address has
  // each job once.
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Jobs(service.aggregator(i).query()), all) << "through aggregator " << i;
  }
  EXPECT_TRUE(all_found(every_job));
  // The old aggregators saw the moved jobs stop at once: an ended job, not a hang or silent ranks.
  {
    ncclwatch::v1::ListHangsResponse hangs;
    ASSERT_THAT(service.aggregator(1).query().ListHangs(Context().get(), {}, &hangs), IsOk());
    EXPECT_EQ(hangs.hangs_size(), 0) << hangs.DebugString();
    EXPECT_EQ(hangs.silent_size(), 0) << hangs.DebugString();
    for (const auto& e : AllEvents(service.aggregator(2).query(), 50)) {
      EXPECT_TRUE(e.kind() != ncclwatch::v1::Event::HANG &&
                  e.kind() != ncclwatch::v1::Event::RANK_SILENT &&
                  e.kind() != ncclwatch::v1::Event::RANKS_UNREPORTED)
          << e.summary();
    }
  }
  std::printf("%zu of %d jobs moved to the fourth aggregator\n", moved.size(), kJobs);
  ASSERT_TRUE(service.StopAgents()) << service.AgentLogs();
  // Nothing acknowledged was lost: the restarted aggregators replayed every batch they had
  // acknowledged, and the four together ingested every report the agents accepted.
  EXPECT_TRUE(PollUntil([&] { return Ingested(service.aggregator(3).query()) == accepted; }, 20))
      << Ingested(service.aggregator(3).query()) << " ingested of " << accepted << " accepted";
}

}  // namespace
}  // namespace ncclwatch::testing

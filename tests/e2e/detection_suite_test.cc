// The detection scenario suite: simulated jobs (simjob, the real plugin) -> agents -> aggregator,
// one fresh pipeline per scenario, each asserting that the aggregator finds exactly the injected
// faults -- the right rank, node or communicator, nothing else -- at a 1 s plugin flush interval.
// At the end it prints precision, recall and detection latency per scenario; docs/detection.md
// keeps those figures. The goal is 3 s from the fault's first effect; the assertion is a ceiling
// (kLatencyCeilingS) that holds on a loaded 2-core machine, so that a slow CI machine cannot fail
// the suite by chance while a finding that comes far too late still does.
//
// The findings are read back from RocksDB through Query.ListEvents after the jobs have ended, the
// agents have forwarded everything and the aggregator has restarted (it runs a last detection pass
// on SIGTERM), so the list is complete without waiting on the clock. Latency is the event's
// detection timestamp minus the moment the fault first took effect (job t0 + offset); simjob,
// the agents and the aggregator share this machine's CLOCK_REALTIME.
//
// A scenario is judged only if the simulator kept to its schedule: simjob's ranks are processes of
// this machine, and one that the scheduler holds back for longer than the hang threshold really
// does keep its peers waiting -- the data then shows a hang that the scenario did not inject. The
// same goes for a rank's simulated proxy thread: one that delivers a kernel's stop late shows the
// operation in flight after its peers finished it. Every rank reports how far behind schedule its
// user thread and its proxy thread ever ran; beyond kMaxSimulatorLagS the scenario is run
// once more, and if the simulator falls behind again it is reported as not judged (skipped, with
// the lag), never as passed.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "aggregator/findings/findings.h"
#include "gtest/gtest.h"
#include "tests/e2e/detection_scenarios.h"
#include "tests/e2e/pipeline.h"

namespace ncclwatch::testing {
namespace {

using ncclwatch::v1::Event;

constexpr double kLatencyCeilingS = 10.0;  // what fails the suite
// The thresholds the suite runs the aggregator with: a hang is a collective in flight for 1 s
// (default 10 s), a rank is silent after 2 s without reports while its peers carry on (default
// 5 s). Everything else is at its default.
const std::vector<std::string> kAggregatorFlags = {"--hang-threshold-s=1", "--silent-after-s=2"};
// Half the hang threshold above: a rank held back longer than that by this machine's scheduler
// could make its peers' collectives look hung.
constexpr double kMaxSimulatorLagS = 0.5;

// The subject of a finding: what on-call would go and look at.
std::string Subject(const Event& e) {
  switch (e.kind()) {
    case Event::STRAGGLER:
      if (e.has_root_cause()) {  // a GPU slow itself
        return e.root_cause().node() + " GPU" + std::to_string(e.root_cause().cuda_device());
      }
      return e.straggler().comm_name() + " rank " + std::to_string(e.straggler().rank()) +
             (e.straggler().origin_not_found() ? " origin not found" : "");
    case Event::NODE_STRAGGLER:
      return (e.node_straggler().comm_name().empty() ? "" : e.node_straggler().comm_name() + " ") +
             "node " + e.node_straggler().node() +
             (e.node_straggler().origin_not_found() ? " origin not found" : "");
    case Event::RANKS_UNREPORTED: {
      if (e.coverage().comms_size() == 0) return "?";
      std::string s = e.coverage().comms(0).comm_name() + " ranks";
      for (int r : e.coverage().comms(0).unreported()) s += " " + std::to_string(r);
      return s;
    }
    case Event::HANG: {
      std::string s = e.hang().comm_name();
      if (e.hang().kind() == ncclwatch::v1::HangInfo::NO_PROGRESS) return s + " no progress";
      s += " missing";
      for (const auto& m : e.hang().missing()) s += " " + std::to_string(m.rank());
      return s;
    }
    case Event::RANK_SILENT:
      return e.silent().comm_name() + " rank " + std::to_string(e.silent().rank().rank());
    case Event::COMM_DEGRADED:
      return e.degraded().comm_name() + " " + e.degraded().comm_class();
    case Event::NODE_NETWORK_SUSPECT:
      return "node " + e.suspect().node();
    case Event::NODE_SILENT:
      return "node " + e.node_silent().node();
    default:
      return "?";
  }
}

std::string Key(Event::Kind kind, const std::string& job, const std::string& subject) {
  return Event::Kind_Name(kind) + " " + job + " " + subject;
}

// t0 of a simjob run, from its "  t0 <s>.<ns> (now + ..." line; -1 if absent.
int64_t ParseT0(const std::string& log) {
  const size_t at = log.find("  t0 ");
  if (at == std::string::npos) return -1;
  long long s = 0;
  long long ns = 0;
  if (std::sscanf(log.c_str() + at, "  t0 %lld.%lld", &s, &ns) != 2) return -1;
  return s * 1'000'000'000 + ns;
}

struct Outcome {
  std::string name;
  bool judged = true;    // false: the simulator fell behind twice (see the file comment)
  double max_lag_s = 0;  // of the simulator, in the run that was judged (or the last one)
  int expected = 0;
  int found = 0;        // expected findings that appeared
  int reported = 0;     // START events
  int true_starts = 0;  // START events that are the first of an expected finding
  double max_latency_s = 0;
  double mean_latency_s = 0;
  bool over_goal = false;  // some finding later than its goal
};

std::vector<Outcome>& Outcomes() {
  static std::vector<Outcome> outcomes;
  return outcomes;
}

// What one run of a scenario produced.
struct ScenarioRun {
  std::string error;  // infrastructure failure (not a detection verdict)
  std::vector<Event> events;
  std::map<std::string, int64_t> t0;  // by job
  double max_lag_s = 0;               // the furthest any simulated rank fell behind its schedule
  std::map<std::string, int64_t> min_steps;  // by job: the fewest steps any of its ranks ran
  std::string logs;
};

// The furthest behind schedule any rank of a simjob run ever was (its user thread or its proxy
// thread), and the fewest steps any rank ran, from the per-rank "steps=N max_lag_us=M
// proxy_lag_us=P" lines; -1 steps when there is no such line.
std::pair<double, int64_t> SimulatorProgress(const Job& job, const std::string& log) {
  int64_t min_steps = INT64_MAX;
  int64_t user_lag_us = 0;
  int64_t proxy_lag_us = 0;
  int ranks = 0;
  for (size_t at = log.find("steps="); at != std::string::npos; at = log.find("steps=", at + 1)) {
    long long steps = 0;
    long long user = 0;
    long long proxy = 0;
    if (std::sscanf(log.c_str() + at, "steps=%lld max_lag_us=%lld proxy_lag_us=%lld", &steps, &user,
                    &proxy) != 3) {
      continue;
    }
    min_steps = std::min<int64_t>(min_steps, steps);
    user_lag_us = std::max<int64_t>(user_lag_us, user);
    proxy_lag_us = std::max<int64_t>(proxy_lag_us, proxy);
    ++ranks;
  }
  if (ranks == 0) return {0, -1};
  std::printf(
      "job %s: every rank ran >= %lld steps, at most %.1f ms behind schedule (proxy threads "
      "%.1f ms)\n",
      job.id.c_str(), static_cast<long long>(min_steps), user_lag_us / 1e3, proxy_lag_us / 1e3);
  return {std::max(user_lag_us, proxy_lag_us) / 1e6, min_steps};
}

ScenarioRun RunScenario(const Scenario& sc) {
  ScenarioRun run;
  Pipeline p(sc.nodes, kAggregatorFlags);
  if (!p.ok()) {
    run.error = p.error();
    return run;
  }
  // Start every job, then wait for all of them.
  std::vector<std::unique_ptr<Process>> jobs;
  for (const Job& job : sc.jobs) {
    std::vector<std::string> argv = {Binaries::Simjob(), "--plugin=" + Binaries::Plugin(),
                                     "--agent-addr=" + p.AgentAddrTemplate(), "--job-id=" + job.id,
                                     "--env=NCCLWATCH_FLUSH_INTERVAL_MS=1000"};
    argv.insert(argv.end(), job.args.begin(), job.args.end());
    jobs.push_back(std::make_unique<Process>(argv, std::map<std::string, std::string>{},
                                             p.dir() + "/simjob-" + job.id + ".log"));
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i]->Wait() != 0) {
      run.error = "simjob failed:\n" + jobs[i]->Log();
      return run;
    }
    const int64_t t0 = ParseT0(jobs[i]->Log());
    if (t0 <= 0) {
      run.error = "no t0 in simjob's log:\n" + jobs[i]->Log();
      return run;
    }
    run.t0[sc.jobs[i].id] = t0;
    const auto [lag_s, min_steps] = SimulatorProgress(sc.jobs[i], jobs[i]->Log());
    if (min_steps < 0) {
      run.error = "no per-rank progress line in simjob's log:\n" + jobs[i]->Log();
      return run;
    }
    run.max_lag_s = std::max(run.max_lag_s, lag_s);
    run.min_steps[sc.jobs[i].id] = min_steps;
  }
  if (!p.StopAgents()) {
    run.error = "agents: " + p.Logs();
    return run;
  }
  if (!p.RestartAggregator()) {
    run.error = p.error();
    return run;
  }
  grpc::ClientContext ctx;
  ncclwatch::v1::ListEventsResponse events;
  if (grpc::Status s = p.query().ListEvents(&ctx, {}, &events); !s.ok()) {
    run.error = "ListEvents: " + s.error_message();
    return run;
  }
  run.events.assign(events.events().begin(), events.events().end());
  run.logs = p.Logs();
  return run;
}

class DetectionSuite : public ::testing::TestWithParam<Scenario> {};

TEST_P(DetectionSuite, FindsExactlyTheInjectedFaults) {
  const Scenario& sc = GetParam();
  Outcome out;
  out.name = sc.name;
  out.expected = static_cast<int>(sc.expected.size());
  ScenarioRun run = RunScenario(sc);
  ASSERT_TRUE(run.error.empty()) << run.error;
  if (run.max_lag_s > kMaxSimulatorLagS) {
    std::printf(
        "%s: the simulator fell %.2f s behind its schedule (limit %.2f s): running it "
        "again\n",
        sc.name.c_str(), run.max_lag_s, kMaxSimulatorLagS);
    run = RunScenario(sc);
    ASSERT_TRUE(run.error.empty()) << run.error;
  }
  out.max_lag_s = run.max_lag_s;
  if (run.max_lag_s > kMaxSimulatorLagS) {
    out.judged = false;
    Outcomes().push_back(out);
    GTEST_SKIP() << sc.name << ": not judged: the simulator fell " << run.max_lag_s
                 << " s behind its schedule twice (limit " << kMaxSimulatorLagS
                 << " s); this machine is too loaded to tell its own lag from a hang";
  }

  // Every rank ran at least job.min_steps steps: keeping up with the rate is part of the scenario.
  for (const Job& job : sc.jobs) EXPECT_GE(run.min_steps[job.id], job.min_steps) << job.id;
  std::map<std::string, const Expected*> expected;
  for (const Expected& e : sc.expected) expected[Key(e.kind, e.job, e.subject)] = &e;
  std::set<std::string> found;
  double latency_sum = 0;
  for (const Event& e : run.events) {
    if (e.phase() != Event::START) continue;
    ++out.reported;
    const std::string& job = aggregator::EventJobId(e);
    const std::string key = Key(e.kind(), job, Subject(e));
    auto it = expected.find(key);
    if (it == expected.end() || !found.insert(key).second) {
      ADD_FAILURE() << sc.name << ": unexpected finding: " << key << "\n  " << e.summary();
      continue;
    }
    ++out.true_starts;
    const double latency =
        (static_cast<int64_t>(e.time_unix_ns()) - run.t0[job]) / 1e9 - it->second->effect_s;
    latency_sum += latency;
    out.max_latency_s = std::max(out.max_latency_s, latency);
    out.over_goal = out.over_goal || latency > it->second->goal_s;
    EXPECT_LE(latency, kLatencyCeilingS) << sc.name << ": " << key << " took " << latency << " s";
    EXPECT_GE(latency, 0) << sc.name << ": " << key << " was reported before the fault\n  "
                          << e.summary();
  }
  for (const auto& [key, want] : expected) {
    EXPECT_TRUE(found.count(key)) << sc.name << ": missed " << key << "\n" << run.logs;
  }
  out.found = static_cast<int>(found.size());
  out.mean_latency_s = out.found > 0 ? latency_sum / out.found : 0;
  Outcomes().push_back(out);
}

std::string ScenarioName(const ::testing::TestParamInfo<Scenario>& info) {
  std::string name;
  for (char c : info.param.name) {
    if (std::isalnum(static_cast<unsigned char>(c))) name += c;
  }
  return std::to_string(info.index) + "_" + name.substr(0, 40);
}

INSTANTIATE_TEST_SUITE_P(Scenarios, DetectionSuite, ::testing::ValuesIn(Scenarios()), ScenarioName);

// Prints the per-scenario table once every scenario has run.
class SummaryPrinter : public ::testing::Environment {
 public:
  void TearDown() override {
    std::printf("\n%-52s %8s %9s %6s %9s %9s %9s\n", "scenario", "expected", "precision", "recall",
                "mean lat", "max lat", "sim lag");
    int expected = 0, found = 0, reported = 0, true_starts = 0, over_goal = 0, not_judged = 0;
    for (const Outcome& o : Outcomes()) {
      if (!o.judged) {
        std::printf("%-52s %8d %9s %6s %9s %9s %8.2fs  not judged\n", o.name.c_str(), o.expected,
                    "-", "-", "-", "-", o.max_lag_s);
        ++not_judged;
        continue;
      }
      const double precision =
          o.reported == 0 ? 1.0 : static_cast<double>(o.true_starts) / o.reported;
      const double recall = o.expected == 0 ? 1.0 : static_cast<double>(o.found) / o.expected;
      std::printf("%-52s %8d %9.2f %6.2f", o.name.c_str(), o.expected, precision, recall);
      if (o.found > 0) {
        std::printf(" %8.2fs %8.2fs", o.mean_latency_s, o.max_latency_s);
      } else {
        std::printf(" %9s %9s", "-", "-");
      }
      std::printf(" %8.2fs%s\n", o.max_lag_s, o.over_goal ? "  over its goal" : "");
      over_goal += o.over_goal ? 1 : 0;
      expected += o.expected;
      found += o.found;
      reported += o.reported;
      true_starts += o.true_starts;
    }
    std::printf("%-52s %8d %9.2f %6.2f\n", "all scenarios judged", expected,
                reported == 0 ? 1.0 : static_cast<double>(true_starts) / reported,
                expected == 0 ? 1.0 : static_cast<double>(found) / expected);
    std::printf(
        "latency: goal 3 s (gradual faults: their own), ceiling %.0f s; %d scenario(s) over their "
        "goal; %d not judged (simulator behind schedule by more than %.1f s)\n",
        kLatencyCeilingS, over_goal, not_judged, kMaxSimulatorLagS);
    std::fflush(stdout);
  }
};

const auto* const kSummary = ::testing::AddGlobalTestEnvironment(new SummaryPrinter);

}  // namespace
}  // namespace ncclwatch::testing

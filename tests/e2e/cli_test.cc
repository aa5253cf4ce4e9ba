// The `ncclwatch` CLI as scripts use it, against the real pipeline: JSON with every field (rank 0
// and zero counters included, communicator hashes in hex, times also in RFC 3339), the exit codes
// (0 nothing flagged, 1 failed, 3 findings), an unknown --job, and `events --follow` carrying on
// across an aggregator restart.
#include <signal.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/e2e/pipeline.h"

namespace ncclwatch::testing {
namespace {

using ::ncclwatch::testutil::IsOk;

std::vector<std::string> Cli(const Pipeline& p, std::vector<std::string> args) {
  args.insert(args.begin(), {Binaries::Cli(), "--aggregator=" + p.AggregatorAddr()});
  return args;
}

// Mistakes on the command line exit 2 with one line naming the problem (and the flag meant, when
// one is close) before anything is asked; `ncclwatch COMMAND --help` shows that command.
TEST(CliEndToEndTest, ABadCommandLineExitsTwoAndACommandHasItsOwnHelp) {
  const std::string dir = ::testing::TempDir();
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"stragglers", "--jbo=x"}, "ncclwatch: unknown flag --jbo, did you mean --job?"},
      {{"comms", "-job", "nope"},
       "ncclwatch: unknown flag -job: flags take two dashes, did you mean --job?"},
      {{"events", "--since-s=-5"}, "ncclwatch: flag --since-s must be positive"},
      {{"stragglers", "--wait-s", "soon"}, "ncclwatch: flag --wait-s: 'soon' is not a number"},
      {{"stragglers", "nope-job"}, "ncclwatch: stragglers takes no argument (see --help)"},
      {{"stragglerz"}, "ncclwatch: unknown command 'stragglerz'"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {Binaries::Cli(), "--aggregator=127.0.0.1:1"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    auto [code, out] = RunToCompletion(argv, dir + "/cli-usage.log");
    EXPECT_EQ(code, 2) << c.args[0] << ": " << out;
    EXPECT_EQ(out.rfind(c.says, 0), 0u) << "expected '" << c.says << "', got: " << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  }
  auto [help, help_out] =
      RunToCompletion({Binaries::Cli(), "stragglers", "--help"}, dir + "/cli-help.log");
  EXPECT_EQ(help, 0) << help_out;
  EXPECT_EQ(help_out.rfind("Usage: ncclwatch stragglers [flags]", 0), 0u) << help_out;
  for (const char* part :
       {"--wait-s", "--job", "--aggregator", "Example:\n  ncclwatch stragglers"}) {
    EXPECT_NE(help_out.find(part), std::string::npos) << part << " in " << help_out;
  }
  EXPECT_EQ(help_out.find("--step-s"), std::string::npos) << "not a stragglers flag: " << help_out;
}

TEST(CliEndToEndTest, ScriptsGetCompleteJsonExitCodesAndAFollowThatSurvivesARestart) {
  Pipeline p(2, {"--hang-threshold-s=2"});
  ASSERT_TRUE(p.ok()) << p.error();
  // Rank 0 is the slow one: its zeros must all be there.
  Process job({Binaries::Simjob(), "--plugin=" + Binaries::Plugin(), "--nodes=2",
               "--ranks-per-node=2", "--agent-addr=" + p.AgentAddrTemplate(), "--job-id=cli",
               "--duration-s=30", "--slow-rank=0", "--env=NCCLWATCH_FLUSH_INTERVAL_MS=200"},
              {}, p.dir() + "/simjob.log");

  // Findings: exit 3, the answer on stdout, the wait on stderr.
  auto [found, found_out] = RunToCompletion(Cli(p, {"stragglers", "--job=cli", "--wait-s=30"}),
                                            p.dir() + "/cli-stragglers.log");
  EXPECT_EQ(found, 3) << found_out;
  EXPECT_NE(found_out.find("Root cause: rank 0, GPU0 on node sim-node-0"), std::string::npos)
      << found_out;
  // Nothing flagged: exit 0.
  auto [clean, clean_out] =
      RunToCompletion(Cli(p, {"hangs", "--job=cli"}), p.dir() + "/cli-hangs.log");
  EXPECT_EQ(clean, 0) << clean_out;
  // A mistyped job: exit 1, and what is known.
  auto [typo, typo_out] =
      RunToCompletion(Cli(p, {"stragglers", "--job=cil"}), p.dir() + "/cli-typo.log");
  EXPECT_EQ(typo, 1) << typo_out;
  EXPECT_NE(typo_out.find("ncclwatch: no job 'cil' at the aggregator at " + p.AggregatorAddr() +
                          ": it knows cli"),
            std::string::npos)
      << typo_out;

  // JSON: rank 0 has its rank, zero counts are there, hashes are hex, times also RFC 3339.
  auto [json, json_out] =
      RunToCompletion(Cli(p, {"stragglers", "--job=cli", "--json"}), p.dir() + "/cli-json.log");
  EXPECT_EQ(json, 3) << json_out;
  EXPECT_NE(json_out.find("\"rank\":0,"), std::string::npos) << json_out;
  EXPECT_NE(json_out.find("\"comm_hash\":\"0x"), std::string::npos) << json_out;
  EXPECT_NE(json_out.find("_utc\":\"20"), std::string::npos) << json_out;
  auto [jobs, jobs_out] = RunToCompletion(Cli(p, {"jobs", "--json"}), p.dir() + "/cli-jobs.log");
  EXPECT_EQ(jobs, 0) << jobs_out;
  EXPECT_NE(jobs_out.find("\"hung_communicators\":0"), std::string::npos) << jobs_out;
  auto [comms, comms_out] =
      RunToCompletion(Cli(p, {"comms", "--job=cli", "--json"}), p.dir() + "/cli-comms.log");
  EXPECT_EQ(comms, 0) << comms_out;
  EXPECT_NE(comms_out.find("{\"rank\":0,\"node\":\"sim-node-0\""), std::string::npos) << comms_out;

  // events --follow: the straggler's START before the restart, its END ("job ended") after it.
  Process follow(Cli(p, {"events", "--follow", "--json", "--job=cli", "--since-s=600"}), {},
                 p.dir() + "/cli-follow.log");
  ASSERT_TRUE(
      PollUntil([&] { return follow.Log().find("\"phase\":\"START\"") != std::string::npos; }, 30))
      << follow.Log();
  ASSERT_TRUE(p.RestartAggregator(SIGKILL)) << p.error() << p.Logs();
  ASSERT_EQ(job.Wait(), 0) << job.Log();
  EXPECT_TRUE(PollUntil(
      [&] { return follow.Log().find("\"end_reason\":\"job ended\"") != std::string::npos; }, 30))
      << follow.Log() << p.Logs();
  const std::string log = follow.Log();
  EXPECT_NE(log.find("ncclwatch: lost the aggregator at " + p.AggregatorAddr()), std::string::npos)
      << log;
  EXPECT_NE(log.find("ncclwatch: reconnected to the aggregator at " + p.AggregatorAddr()),
            std::string::npos)
      << log;
  follow.Signal(SIGTERM);
  follow.Wait();
}

}  // namespace
}  // namespace ncclwatch::testing

#include "common/config.h"

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/status_matchers.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ncclwatch {
namespace {

using ::ncclwatch::testutil::IsOk;

struct Fixture {
  std::string listen = "unix:///run/x.sock";
  int64_t port = 9472;
  double ratio = 0.2;
  bool verbose = false;
  ConfigTable table{"prog", "A test program."};
  Fixture() {
    table.AddString("listen", "T_LISTEN", &listen, "Where to listen.");
    table.AddInt("http-port", "T_PORT", &port, "HTTP port.");
    table.AddDouble("ratio", "", &ratio, "A ratio.");
    table.AddBool("verbose", "T_VERBOSE", &verbose, "Talk more.");
  }
};

using ::ncclwatch::testutil::EnvFrom;

TEST(ConfigTableTest, DefaultsEnvironmentThenFlags) {
  Fixture f;
  const char* argv[] = {"prog", "--http-port=1234", "--ratio", "0.5", "pos1", "--verbose"};
  auto parsed = f.table.Parse(6, argv, EnvFrom({{"T_PORT", "99"}, {"T_LISTEN", "host:1"}}));
  ASSERT_THAT(parsed, IsOk());
  EXPECT_EQ(f.listen, "host:1");  // from the environment
  EXPECT_EQ(f.port, 1234);        // flag beats environment
  EXPECT_DOUBLE_EQ(f.ratio, 0.5);
  EXPECT_TRUE(f.verbose);
  EXPECT_EQ(*parsed, std::vector<std::string>{"pos1"});
  EXPECT_FALSE(f.table.help_requested());
}

TEST(ConfigTableTest, NegatedBoolAndHelp) {
  Fixture f;
  f.verbose = true;
  const char* argv[] = {"prog", "--no-verbose", "-h"};
  ASSERT_TRUE(f.table.Parse(3, argv, EnvFrom({})).ok());
  EXPECT_FALSE(f.verbose);
  EXPECT_TRUE(f.table.help_requested());
}

TEST(ConfigTableTest, VersionIsAskedForAndListedInTheHelp) {
  Fixture f;
  const char* argv[] = {"prog", "--version"};
  ASSERT_TRUE(f.table.Parse(2, argv, EnvFrom({})).ok());
  EXPECT_TRUE(f.table.version_requested());
  EXPECT_FALSE(f.table.help_requested());
  EXPECT_NE(f.table.HelpText().find("--version"), std::string::npos);
}

TEST(ConfigTableTest, ADaemonsLogLevelIsValidatedFromTheEnvironmentAndTheFlag) {
  const char* argv[] = {"prog"};
  setenv("NCCLWATCH_LOG_LEVEL", "verbose", 1);
  Fixture bad;
  EXPECT_EQ(bad.table.ParseDaemonCommandLine(1, argv), 2) << "a typo is an error, not 'info'";
  const char* flag[] = {"prog", "--log-level=WARNING"};
  Fixture good;
  EXPECT_EQ(good.table.ParseDaemonCommandLine(2, flag), std::nullopt) << "the flag wins";
  EXPECT_NE(good.table.HelpText().find("NCCLWATCH_LOG_LEVEL"), std::string::npos);
  unsetenv("NCCLWATCH_LOG_LEVEL");
  SetMinLogSeverity(LogSeverity::kInfo);
  LogSeverity severity;
  EXPECT_TRUE(ParseLogSeverity("Debug", &severity));
  EXPECT_EQ(severity, LogSeverity::kDebug);
  EXPECT_FALSE(ParseLogSeverity("", &severity));
}

TEST(ConfigTableTest, ErrorsNameTheCulprit) {
  Fixture f;
  const char* unknown[] = {"prog", "--bogus=1"};
  auto s = f.table.Parse(2, unknown, EnvFrom({}));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("unknown flag --bogus"), std::string::npos);

  // A typo names the flag meant; a flag written with one dash says so.
  const char* typo[] = {"prog", "--http-prot=1"};
  s = f.table.Parse(2, typo, EnvFrom({}));
  EXPECT_EQ(s.status().message(),
            "unknown flag --http-prot, did you mean --http-port? (see prog --help)");
  const char* far[] = {"prog", "--colour"};
  s = f.table.Parse(2, far, EnvFrom({}));
  EXPECT_EQ(s.status().message(), "unknown flag --colour (see prog --help)");
  const char* one_dash[] = {"prog", "-ratio", "2"};
  s = f.table.Parse(3, one_dash, EnvFrom({}));
  EXPECT_EQ(s.status().message(),
            "unknown flag -ratio: flags take two dashes, did you mean --ratio? (see prog --help)");
  const char* dash_word[] = {"prog", "-"};  // a lone dash is a word (stdin, stdout)
  EXPECT_THAT(f.table.Parse(2, dash_word, EnvFrom({})), IsOk());

  const char* bad_int[] = {"prog", "--http-port", "abc"};
  s = f.table.Parse(3, bad_int, EnvFrom({}));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("--http-port: 'abc' is not an integer"), std::string::npos);

  const char* missing[] = {"prog", "--listen"};
  s = f.table.Parse(2, missing, EnvFrom({}));
  EXPECT_NE(s.status().message().find("needs a value"), std::string::npos);

  Fixture g;
  auto env_status = g.table.ParseEnv(EnvFrom({{"T_VERBOSE", "maybe"}}));
  EXPECT_EQ(env_status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(env_status.message().find("T_VERBOSE"), std::string::npos);
}

TEST(ConfigTableTest, HelpListsEveryEntryWithDefault) {
  Fixture f;
  std::string help = f.table.HelpText();
  EXPECT_NE(help.find("--listen  $T_LISTEN"), std::string::npos) << help;
  EXPECT_NE(help.find("(default: 9472)"), std::string::npos);
  EXPECT_NE(help.find("(default: unix:///run/x.sock)"), std::string::npos);
  EXPECT_NE(help.find("--help"), std::string::npos);
  EXPECT_EQ(f.table.Describe(), "listen=unix:///run/x.sock http-port=9472 ratio=0.2 verbose=false");
}

}  // namespace
}  // namespace ncclwatch

namespace ncclwatch {
namespace {

using ::ncclwatch::testutil::StatusIs;
using ::testing::HasSubstr;

struct Ranged {
  int64_t slots = 1024;
  double fraction = 0.2;
  absl::Duration keep = absl::Hours(24);
  ConfigTable table{"prog", ""};
  Ranged() {
    table.AddInt("slots", "T_SLOTS", &slots, "Slots.",
                 Range::Between(64, 1 << 18, " (2 KiB each)"));
    table.AddDouble("fraction", "", &fraction, "A fraction.", Range::Open(0, 1));
    table.AddDuration("keep", "T_KEEP", &keep, "How long.", Range::Between(60, 86400 * 30));
  }
  absl::Status Parse(std::vector<const char*> args) {
    args.insert(args.begin(), "prog");
    return table.Parse(static_cast<int>(args.size()), args.data(), EnvFrom({})).status();
  }
};

TEST(ConfigRangeTest, AValueOutsideItsRangeIsRefusedNamingBoth) {
  Ranged r;
  EXPECT_THAT(r.Parse({"--slots=10"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "flag --slots must be in [64, 262144] (2 KiB each), not 10"));
  EXPECT_THAT(r.Parse({"--fraction=1"}), StatusIs(absl::StatusCode::kInvalidArgument,
                                                  "flag --fraction must be in (0, 1), not 1"));
  EXPECT_THAT(r.Parse({"--fraction=nan"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not a number")));
  EXPECT_EQ(r.slots, 1024);
  ASSERT_THAT(r.Parse({"--slots=64", "--fraction=0.5"}), IsOk());
  EXPECT_EQ(r.slots, 64);
  EXPECT_DOUBLE_EQ(r.fraction, 0.5);
}

TEST(ConfigRangeTest, RangesSayThemselvesInWords) {
  EXPECT_EQ(Range::AtLeast(1).Text(), "at least 1");
  EXPECT_EQ(Range::Positive().Text(), "positive");
  EXPECT_EQ(Range::Between(0.25, 60).Text(), "in [0.25, 60]");
  EXPECT_EQ(Range::Open(0, 1).Text(), "in (0, 1)");
  EXPECT_EQ(Range{}.Text(), "any number");
  EXPECT_EQ(Range::Between(60, 86400).Text(/*duration=*/true), "in [1m, 1d]");
  EXPECT_TRUE(Range::Positive().Contains(1e-9));
  EXPECT_FALSE(Range::Positive().Contains(0));
}

TEST(ConfigRangeTest, DurationsAreReadInTheirUnitsAndPrintedShortest) {
  Ranged r;
  ASSERT_THAT(r.Parse({"--keep=36h"}), IsOk());
  EXPECT_EQ(r.keep, absl::Hours(36));
  ASSERT_THAT(r.Parse({"--keep=90m"}), IsOk());
  EXPECT_EQ(r.keep, absl::Minutes(90));
  ASSERT_THAT(r.Parse({"--keep=3600"}), IsOk());  // a bare number is seconds
  EXPECT_EQ(r.keep, absl::Hours(1));
  EXPECT_THAT(r.Parse({"--keep=2w"}), StatusIs(absl::StatusCode::kInvalidArgument,
                                               HasSubstr("flag --keep: '2w' is not a duration")));
  EXPECT_THAT(r.Parse({"--keep=30s"}), StatusIs(absl::StatusCode::kInvalidArgument,
                                                "flag --keep must be in [1m, 30d], not 30s"));
  EXPECT_EQ(DurationText(absl::Hours(24 * 15)), "15d");
  EXPECT_EQ(DurationText(absl::Hours(36)), "36h");
  EXPECT_EQ(DurationText(absl::Seconds(1.5)), "1.5s");
  EXPECT_EQ(DurationText(absl::ZeroDuration()), "0s");
  // The help shows the default as one would write it.
  EXPECT_THAT(r.table.HelpText(), HasSubstr("How long. (default: 1d)"));
}

TEST(ConfigRangeTest, ThePluginsEnvironmentTakesTheNearestBoundWithAWarning) {
  Ranged r;
  std::vector<std::string> warnings;
  ASSERT_THAT(r.table.ParseEnv(EnvFrom({{"T_SLOTS", "10"}, {"T_KEEP", "90d"}}), &warnings), IsOk());
  EXPECT_EQ(r.slots, 64);
  EXPECT_EQ(r.keep, absl::Hours(24 * 30));
  EXPECT_THAT(warnings,
              ::testing::ElementsAre("T_SLOTS=10 is outside [64, 262144] (2 KiB each); using 64",
                                     "T_KEEP=90d is outside [1m, 30d]; using 30d"));
  // Without a place for warnings, out of range is an error as on a command line.
  EXPECT_THAT(r.table.ParseEnv(EnvFrom({{"T_SLOTS", "10"}})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("environment variable T_SLOTS must be in [64, 262144]")));
}

}  // namespace
}  // namespace ncclwatch

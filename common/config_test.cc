#include "common/config.h"

#include <cstdlib>
#include <map>
#include <string>

#include "common/log.h"
#include "common/status_matchers.h"
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

ConfigTable::EnvLookup EnvFrom(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

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

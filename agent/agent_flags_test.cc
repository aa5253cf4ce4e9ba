#include "agent/agent_flags.h"

#include <fstream>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ncclwatch::agent {
namespace {

using ::ncclwatch::testutil::IsOk;
using ::ncclwatch::testutil::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The agent's command line `args` as its main parses and checks it, without environment.
absl::StatusOr<AgentSetup> Checked(std::vector<std::string> args) {
  AgentFlags flags;
  flags.node_name = "node-1";
  ConfigTable table("ncclwatch-agent", "");
  RegisterAgentFlags(table, flags);
  std::vector<const char*> argv = {"ncclwatch-agent"};
  for (const auto& a : args) argv.push_back(a.c_str());
  auto parsed = table.Parse(static_cast<int>(argv.size()), argv.data(),
                            [](const char*) -> const char* { return nullptr; });
  if (!parsed.ok()) return parsed.status();
  return AgentSetupFromFlags(flags, "node-1-abcd");
}

TEST(AgentFlagsTest, TheDefaultsMakeTheDocumentedOptions) {
  auto setup = Checked({});
  ASSERT_THAT(setup.status(), IsOk());
  const AgentServerOptions& o = setup->options;
  EXPECT_EQ(o.listen, "unix:///run/ncclwatch/agent.sock");
  EXPECT_THAT(o.aggregators, ElementsAre("localhost:9470"));
  EXPECT_EQ(o.node_name, "node-1");
  EXPECT_EQ(o.agent_id, "node-1-abcd");
  EXPECT_EQ(o.plugins.mode, 0660u);
  EXPECT_EQ(o.socket_dir_mode, 0755u);
  EXPECT_EQ(o.http_port, 9472);
  EXPECT_EQ(o.streams.max_streams, 1024);
  EXPECT_EQ(o.streams.idle_timeout, absl::Seconds(600));
  EXPECT_DOUBLE_EQ(o.streams.bytes_per_s, 4.0 * (1 << 20));
  EXPECT_DOUBLE_EQ(o.streams.burst_bytes, 16.0 * (1 << 20));  // 4 s' worth, at least 16 MiB
  EXPECT_EQ(o.inspector_series_bytes, size_t{16} << 20);
  EXPECT_EQ(o.unready_after, absl::Seconds(60));
  EXPECT_EQ(o.shutdown_timeout, absl::Seconds(5));
  EXPECT_EQ(o.pod_resources_refresh, absl::Seconds(10));
  EXPECT_TRUE(o.spool_fsync);
  EXPECT_EQ(o.forwarding.token, nullptr);
  EXPECT_FALSE(setup->tls);
  EXPECT_TRUE(setup->warnings.empty());
}

TEST(AgentFlagsTest, SeveralAggregatorsAreOneShardedServiceSharingTheSpool) {
  auto setup = Checked({"--aggregator= a=h1:9470, b=h2:9470 ,", "--spool-dir=/tmp/spool",
                        "--spool-max-bytes=131072"});
  ASSERT_THAT(setup.status(), IsOk());
  EXPECT_THAT(setup->options.aggregators, ElementsAre("a=h1:9470", "b=h2:9470"));
  // 64 KiB each is the least a spool share may be.
  EXPECT_THAT(
      Checked({"--aggregator=a:1,b:2,c:3", "--spool-dir=/tmp/spool", "--spool-max-bytes=131072"})
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("--spool-max-bytes must be at least 64 KiB per aggregator")));
  EXPECT_THAT(Checked({"--aggregator= , "}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--aggregator needs at least one host:port")));
}

TEST(AgentFlagsTest, AValueOutOfItsRangeNamesTheFlag) {
  EXPECT_THAT(Checked({"--max-plugin-streams=0"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("flag --max-plugin-streams must be at least 1, not 0")));
  EXPECT_THAT(Checked({"--max-queued-bytes=1000"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("flag --max-queued-bytes must be at least 1048576")));
  EXPECT_THAT(Checked({"--plugin-stream-mib-per-s=0"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be positive")));
  EXPECT_THAT(Checked({"--max-plugin-connections=2000000"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("flag --max-plugin-connections must be in [1, 1048576]")));
  EXPECT_THAT(Checked({"--socket-mode=0999"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--socket-mode=0999 is not an octal file mode")));
}

TEST(AgentFlagsTest, ATcpListenerOthersCanReachNeedsToBeAskedFor) {
  EXPECT_THAT(Checked({"--listen-tcp=0.0.0.0:9473"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("refusing --listen-tcp=0.0.0.0:9473")));
  EXPECT_THAT(Checked({"--listen-tcp=127.0.0.1:9473"}).status(), IsOk());
  EXPECT_THAT(Checked({"--listen-tcp=0.0.0.0:9473", "--insecure-tcp"}).status(), IsOk());
}

TEST(AgentFlagsTest, ATokenWithoutTlsIsSentButWarnedAbout) {
  const std::string path = ::testing::TempDir() + "/agent_flags_test.token";
  std::ofstream(path) << "s3cret\n";
  auto setup = Checked({"--aggregator-token-file=" + path});
  ASSERT_THAT(setup.status(), IsOk());
  EXPECT_EQ(setup->options.forwarding.token, setup->token.get());
  ASSERT_NE(setup->token, nullptr);
  EXPECT_THAT(setup->warnings, ElementsAre(HasSubstr("the token crosses the network in clear")));
  EXPECT_FALSE(Checked({"--aggregator-token-file=/nonexistent/token"}).ok());
  EXPECT_FALSE(Checked({"--aggregator-ca-file=/nonexistent/ca.pem"}).ok());
}

}  // namespace
}  // namespace ncclwatch::agent

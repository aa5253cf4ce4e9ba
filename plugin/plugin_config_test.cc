#include "plugin/plugin_config.h"

#include <map>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "gtest/gtest.h"

namespace ncclwatch::plugin {
namespace {

using ::ncclwatch::testutil::EnvFrom;

TEST(PluginConfigTest, ANumberOutOfRangeTakesTheNearestBoundAndSaysWhy) {
  PluginConfig config;
  std::vector<std::string> warnings;
  ASSERT_TRUE(LoadPluginConfig(config,
                               EnvFrom({{"NCCLWATCH_OP_POOL_SIZE", "10"},
                                        {"NCCLWATCH_RING_SIZE", "100000000"},
                                        {"NCCLWATCH_FLUSH_INTERVAL_MS", "5"},
                                        {"NCCLWATCH_SAMPLE_STRIDE", "6"}}),
                               &warnings)
                  .ok());
  EXPECT_EQ(config.op_pool_size, 64);
  EXPECT_EQ(config.ring_size, 1 << 18);
  EXPECT_EQ(config.flush_interval_ms, 10);
  EXPECT_EQ(config.sample_stride, 4);  // the power of two below
  EXPECT_EQ(warnings, (std::vector<std::string>{
                          "NCCLWATCH_FLUSH_INTERVAL_MS=5 is outside [10, 60000]; using 10",
                          "NCCLWATCH_OP_POOL_SIZE=10 is outside [64, 262144] (2.6 KiB of address "
                          "space per slot); using 64",
                          "NCCLWATCH_RING_SIZE=100000000 is outside [64, 262144] (112 bytes per "
                          "entry, per communicator); using 262144",
                          "NCCLWATCH_SAMPLE_STRIDE=6 is not a power of two; using 4"}));
  // Without a place for warnings, the same values are brought in range all the same.
  PluginConfig quiet;
  ASSERT_TRUE(LoadPluginConfig(quiet, EnvFrom({{"NCCLWATCH_OP_POOL_SIZE", "10"}})).ok());
  EXPECT_EQ(quiet.op_pool_size, 64);
}

TEST(PluginConfigTest, AValueThatDoesNotParseTurnsThePluginOffWithTheVariableNamed) {
  PluginConfig config;
  const absl::Status status = LoadPluginConfig(config, EnvFrom({{"NCCLWATCH_RING_SIZE", "lots"}}));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("NCCLWATCH_RING_SIZE"), std::string::npos) << status;
}

TEST(PluginConfigTest, ABareSocketPathIsAUnixAddress) {
  PluginConfig config;
  ASSERT_TRUE(LoadPluginConfig(config, EnvFrom({{"NCCLWATCH_AGENT_ADDR", "/run/a.sock"}})).ok());
  EXPECT_EQ(config.agent_addr, "unix:///run/a.sock");
}

}  // namespace
}  // namespace ncclwatch::plugin

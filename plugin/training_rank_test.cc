#include "plugin/training_rank.h"

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace ncclwatch::plugin {
namespace {

TrainingRank From(const std::map<std::string, std::string>& env) {
  return TrainingRankFromEnv([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(TrainingRankTest, TorchrunsVariables) {
  const TrainingRank r = From({{"RANK", "5"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "16"}});
  EXPECT_EQ(r.global, 5);
  EXPECT_EQ(r.local, 1);
}

TEST(TrainingRankTest, SlurmsVariablesWhenTheLauncherSetsNoRank) {
  const TrainingRank r = From({{"SLURM_PROCID", "1027"}, {"SLURM_LOCALID", "3"}});
  EXPECT_EQ(r.global, 1027);
  EXPECT_EQ(r.local, 3);
}

TEST(TrainingRankTest, NcclwatchRankComesFirst) {
  const TrainingRank r = From({{"NCCLWATCH_RANK", "7"}, {"RANK", "5"}, {"SLURM_PROCID", "2"}});
  EXPECT_EQ(r.global, 7);
  EXPECT_EQ(r.local, -1) << "no local rank anywhere";
}

TEST(TrainingRankTest, WhatIsNotAPlainNumberIsSkipped) {
  EXPECT_EQ(From({{"RANK", ""}, {"SLURM_PROCID", "4"}}).global, 4);
  EXPECT_EQ(From({{"RANK", "-1"}, {"SLURM_PROCID", "4"}}).global, 4);
  EXPECT_EQ(From({{"RANK", "5x"}}).global, -1);
  EXPECT_EQ(From({{"RANK", " 5"}}).global, -1);
  EXPECT_EQ(From({{"RANK", "99999999999999999999"}}).global, -1);
  EXPECT_EQ(From({{"RANK", "1048575"}}).global, 1048575);
  EXPECT_EQ(From({{"RANK", "1048576"}}).global, -1);
  EXPECT_EQ(From({}).global, -1);
}

}  // namespace
}  // namespace ncclwatch::plugin

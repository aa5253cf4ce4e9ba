#include "common/status_matchers.h"

#include "gtest/gtest.h"

namespace ncclwatch::testutil {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(StatusMatchersTest, IsOkTakesStatusAndStatusOr) {
  EXPECT_THAT(absl::OkStatus(), IsOk());
  EXPECT_THAT(absl::StatusOr<int>(3), IsOk());
  EXPECT_THAT(absl::NotFoundError("gone"), Not(IsOk()));
  EXPECT_THAT(absl::StatusOr<int>(absl::InternalError("x")), Not(IsOk()));
}

TEST(StatusMatchersTest, StatusIsComparesTheCodeAndOptionallyTheMessage) {
  const absl::Status bad = absl::InvalidArgumentError("missing match[] parameter");
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(bad, Not(StatusIs(absl::StatusCode::kNotFound)));
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("match[]")));
  EXPECT_THAT(bad, Not(StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("selector"))));
  EXPECT_THAT(absl::StatusOr<int>(absl::UnavailableError("retry")),
              StatusIs(absl::StatusCode::kUnavailable, "retry"));
}

TEST(StatusMatchersTest, AFailureNamesTheStatus) {
  ::testing::StringMatchResultListener listener;
  EXPECT_FALSE(
      ::testing::ExplainMatchResult(IsOk(), absl::DataLossError("damaged batch"), &listener));
  EXPECT_THAT(listener.str(), HasSubstr("DATA_LOSS"));
  EXPECT_THAT(listener.str(), HasSubstr("damaged batch"));
}

}  // namespace
}  // namespace ncclwatch::testutil

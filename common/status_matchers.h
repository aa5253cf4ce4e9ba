// gMock matchers for absl::Status and absl::StatusOr<T> (and grpc::Status, rocksdb::Status), for
// tests:
//
//   EXPECT_THAT(store->Put(...), IsOk());
//   EXPECT_THAT(ParseSelector("{"), StatusIs(absl::StatusCode::kInvalidArgument));
//   EXPECT_THAT(Open(dir), StatusIs(absl::StatusCode::kNotFound, HasSubstr("no such")));
//
// A failure prints the status (code and message), where ASSERT_TRUE(s.ok()) prints only "false".
#ifndef NCCLWATCH_COMMON_STATUS_MATCHERS_H_
#define NCCLWATCH_COMMON_STATUS_MATCHERS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace ncclwatch::testutil {

inline absl::Status StatusOf(const absl::Status& status) { return status; }
template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}
// grpc::Status (its codes are absl's canonical ones), without including gRPC here.
template <typename S>
requires requires(const S& s) {
  s.error_code();
  s.error_message();
}
absl::Status StatusOf(const S& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}
// rocksdb::Status: OK, or its text under kUnknown (its codes are not absl's).
template <typename S>
requires requires(const S& s) {
  s.IsNotFound();
  s.ToString();
}
absl::Status StatusOf(const S& s) {
  return s.ok() ? absl::OkStatus() : absl::UnknownError(s.ToString());
}

MATCHER(IsOk, negation ? "is not OK" : "is OK") {
  const absl::Status status = StatusOf(arg);
  if (!status.ok()) *result_listener << "the status is " << status;
  return status.ok();
}

MATCHER_P(StatusIs, code,
          std::string(negation ? "has not" : "has") + " status code " +
              absl::StatusCodeToString(code)) {
  const absl::Status status = StatusOf(arg);
  *result_listener << "the status is " << status;
  return status.code() == code;
}

MATCHER_P2(StatusIs, code, message,
           std::string(negation ? "has not" : "has") + " status code " +
               absl::StatusCodeToString(code) + " and a message that " +
               ::testing::DescribeMatcher<std::string>(message, negation)) {
  const absl::Status status = StatusOf(arg);
  *result_listener << "the status is " << status;
  return status.code() == code && ::testing::Matches(message)(std::string(status.message()));
}

}  // namespace ncclwatch::testutil

#endif  // NCCLWATCH_COMMON_STATUS_MATCHERS_H_

// Time units for tests, in the nanoseconds every timestamp of the project is kept in:
//
//   using ::ncclwatch::testutil::kS;
//   detector.Tick(t0 + 10 * kS);
//
// One definition, so that test files compiled together (a unity build) share it.
#ifndef NCCLWATCH_COMMON_TEST_TIME_H_
#define NCCLWATCH_COMMON_TEST_TIME_H_

#include <cstdint>

namespace ncclwatch::testutil {

inline constexpr int64_t kS = 1'000'000'000;  // a second

}  // namespace ncclwatch::testutil

#endif  // NCCLWATCH_COMMON_TEST_TIME_H_

// Small helpers shared by the unit tests of several folders:
//
//   using ::ncclwatch::testutil::kS;            // a second, in the nanoseconds timestamps are in
//   detector.Tick(t0 + 10 * kS);
//   table.Parse(argc, argv, EnvFrom({{"NCCLWATCH_RING_SIZE", "lots"}}));   // a made-up environment
//
// One definition each, so that test files compiled together (a unity build) share them.
#ifndef NCCLWATCH_COMMON_TEST_UTIL_H_
#define NCCLWATCH_COMMON_TEST_UTIL_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "common/config.h"

namespace ncclwatch::testutil {

inline constexpr int64_t kS = 1'000'000'000;  // a second

// An environment holding only `vars`, for ConfigTable::Parse and the plugin's LoadPluginConfig.
inline ConfigTable::EnvLookup EnvFrom(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

}  // namespace ncclwatch::testutil

#endif  // NCCLWATCH_COMMON_TEST_UTIL_H_

#include "common/daemon.h"

#include "gtest/gtest.h"

namespace ncclwatch {
namespace {

TEST(IsLoopbackHostTest, OnlyAddressesOfThisMachineAlone) {
  for (const char* host : {"localhost", "127.0.0.1", "127.1.2.3", "::1", "[::1]"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"0.0.0.0", "::", "[::]", "10.0.0.7", "128.0.0.1", "aggregator.svc", "",
                           "127.0.0.1.example.com", "::ffff:10.0.0.1"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

}  // namespace
}  // namespace ncclwatch

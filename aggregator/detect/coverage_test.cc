#include "aggregator/detect/coverage.h"

#include <vector>

#include "common/test_util.h"
#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

using ::ncclwatch::testutil::kS;

CommCoverage Comm(uint64_t hash, int nranks, std::vector<int> unreported, int64_t first_ns) {
  CommCoverage c;
  c.comm = CommKey{"job", hash};
  c.comm_name = "c" + std::to_string(hash);
  c.nranks = nranks;
  c.n_nodes = 4;
  c.unreported_count = static_cast<int>(unreported.size());
  c.unreported = std::move(unreported);
  c.reporting = {"n0", "n1", "n2"};
  c.first_report_ns = first_ns;
  return c;
}

TEST(CoverageTest, OneFindingPerJobOnceTheGapOutlastsTheGrace) {
  CoverageDetector d(CoverageOptions{2 * kS});
  const std::vector<CommCoverage> comms = {Comm(1, 2, {}, 0), Comm(2, 2, {1}, 0),
                                           Comm(3, 8, {6, 7}, 0)};
  // Ranks report at slightly different times: within the grace, nothing is said.
  EXPECT_TRUE(d.Evaluate(comms, kS).empty());
  EXPECT_FALSE(d.Incomplete(comms[2].comm));
  std::vector<CoverageChange> changes = d.Evaluate(comms, 2 * kS);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_TRUE(changes[0].start);
  ASSERT_EQ(changes[0].view.comms.size(), 2u);
  EXPECT_EQ(changes[0].view.comms[0].comm.comm_hash, 3u);  // largest first
  EXPECT_EQ(changes[0].view.comms[0].unreported, (std::vector<int>{6, 7}));
  EXPECT_EQ(changes[0].view.since_ns, 2 * kS);
  EXPECT_TRUE(d.Incomplete(comms[2].comm));
  EXPECT_FALSE(d.Incomplete(comms[0].comm));
  // Still incomplete: no new finding; the same since.
  EXPECT_TRUE(d.Evaluate(comms, 3 * kS).empty());
  EXPECT_EQ(d.gaps().at("job").since_ns, 2 * kS);
  // Every rank reported at last: it ends.
  changes = d.Evaluate({Comm(1, 2, {}, 0), Comm(2, 2, {}, 0), Comm(3, 8, {}, 0)}, 4 * kS);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].start);
  EXPECT_TRUE(d.gaps().empty());
  EXPECT_FALSE(d.Incomplete(comms[2].comm));
}

}  // namespace
}  // namespace ncclwatch::aggregator

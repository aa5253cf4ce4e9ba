#include "plugin/gpu_uuid.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ncclwatch::plugin {
namespace {

using Uuids = std::vector<std::string>;

constexpr char kA[] = "GPU-aaaaaaaa-0000-0000-0000-000000000000";
constexpr char kB[] = "GPU-bbbbbbbb-0000-0000-0000-000000000000";
constexpr char kC[] = "GPU-cccccccc-0000-0000-0000-000000000000";

TEST(GpuUuidTest, DevicePluginListAloneIsIndexedByOrdinal) {
  const std::string nvidia = std::string(kA) + "," + kB;
  Uuids uuids = VisibleGpuUuids(nullptr, nvidia.c_str());
  EXPECT_EQ(uuids, (Uuids{kA, kB}));
  EXPECT_EQ(GpuUuidOf(uuids, 0), kA);
  EXPECT_EQ(GpuUuidOf(uuids, 1), kB);
  EXPECT_EQ(GpuUuidOf(uuids, 2), "");
  EXPECT_EQ(GpuUuidOf(uuids, -1), "");
}

TEST(GpuUuidTest, NumericCudaListSelectsFromTheDevicePluginList) {
  const std::string nvidia = std::string(kA) + "," + kB + "," + kC;
  // CUDA ordinal 0 is the third device the container sees, ordinal 1 the first.
  EXPECT_EQ(VisibleGpuUuids("2,0", nvidia.c_str()), (Uuids{kC, kA}));
  // An index the runtime list does not have is unknown, not an error.
  EXPECT_EQ(VisibleGpuUuids("1,7", nvidia.c_str()), (Uuids{kB, ""}));
}

TEST(GpuUuidTest, UuidsInCudaVisibleDevicesWin) {
  const std::string cuda = std::string(kC) + ", MIG-11111111-2222-3333-4444-555555555555";
  EXPECT_EQ(VisibleGpuUuids(cuda.c_str(), kA),
            (Uuids{kC, "MIG-11111111-2222-3333-4444-555555555555"}));
  EXPECT_EQ(VisibleGpuUuids(cuda.c_str(), nullptr),
            (Uuids{kC, "MIG-11111111-2222-3333-4444-555555555555"}));
}

TEST(GpuUuidTest, UuidPrefixIsCompletedOnlyWhenUnambiguous) {
  const std::string nvidia = std::string(kA) + "," + kB;
  EXPECT_EQ(VisibleGpuUuids("GPU-bbbb", nvidia.c_str()), (Uuids{kB}));
  // Both start with "GPU-": left as given (CUDA would refuse it too).
  EXPECT_EQ(VisibleGpuUuids("GPU-", nvidia.c_str()), (Uuids{"GPU-"}));
  // Nothing to complete it against.
  EXPECT_EQ(VisibleGpuUuids("GPU-bbbb", nullptr), (Uuids{"GPU-bbbb"}));
}

TEST(GpuUuidTest, CudaListEndsAtTheFirstInvalidEntry) {
  const std::string nvidia = std::string(kA) + "," + kB + "," + kC;
  EXPECT_EQ(VisibleGpuUuids("1,-1,2", nvidia.c_str()), (Uuids{kB}));
  EXPECT_EQ(VisibleGpuUuids("0,x,2", nvidia.c_str()), (Uuids{kA}));
}

TEST(GpuUuidTest, NothingKnownWithoutUuids) {
  // Bare metal.
  EXPECT_TRUE(VisibleGpuUuids(nullptr, nullptr).empty());
  EXPECT_EQ(VisibleGpuUuids("0,1", nullptr), (Uuids{"", ""}));
  // The runtime was given indices or "all": no UUID to report.
  EXPECT_EQ(GpuUuidOf(VisibleGpuUuids(nullptr, "all"), 0), "");
  EXPECT_EQ(GpuUuidOf(VisibleGpuUuids("0", "0,1"), 0), "");
  // CUDA_VISIBLE_DEVICES set but empty hides every GPU, whatever the runtime list says.
  EXPECT_TRUE(VisibleGpuUuids("", kA).empty());
  EXPECT_EQ(GpuUuidOf(VisibleGpuUuids(nullptr, ""), 0), "");
}

}  // namespace
}  // namespace ncclwatch::plugin

#include "agent/pod_resources.h"

#include <stdlib.h>

#include <filesystem>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "agent/agent_test_util.h"
#include "common/status_matchers.h"
#include "common/sync.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "k8s/podresources_v1.grpc.pb.h"

namespace ncclwatch::agent {

void PrintTo(const PodRef& ref, std::ostream* os) {
  *os << ref.pod_namespace << "/" << ref.pod << " container " << ref.container << " ("
      << ref.resource_name << ")";
}

namespace {

using ::ncclwatch::testutil::IsOk;

constexpr char kGpuA[] = "GPU-aaaaaaaa-1111-2222-3333-444444444444";
constexpr char kGpuB[] = "GPU-bbbbbbbb-1111-2222-3333-444444444444";
constexpr char kMigC[] = "MIG-cccccccc-1111-2222-3333-444444444444";
constexpr char kFailures[] = "ncclwatch_agent_pod_resources_refresh_failures_total";

// The pod `uuid` is attributed to, "<none>" when none: readable failures, no empty optional deref.
std::string PodOf(const PodResolver& resolver, std::string_view uuid) {
  std::optional<PodRef> ref = resolver.Lookup(uuid);
  return ref ? ref->pod : "<none>";
}

// Two pods with GPUs; the second container also holds a NIC, whose id is made to look like a GPU
// UUID so that a lookup would find it if the resource name were not checked.
::v1::ListPodResourcesResponse TwoPods() {
  ::v1::ListPodResourcesResponse answer;
  AddDevices(AddPod(&answer, "ml", "trainer-0", "pytorch"), "nvidia.com/gpu", {kGpuA, kGpuB});
  ::v1::ContainerResources* server = AddPod(&answer, "serving", "infer-1", "server");
  AddDevices(server, "nvidia.com/mig-1g.10gb", {kMigC});
  AddDevices(server, "example.com/rdma-nic", {"GPU-not-a-gpu-0000"});
  AddPod(&answer, "kube-system", "coredns-1", "coredns");  // no devices at all
  return answer;
}

class PodResolverTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.empty()); }

  void Serve() { ASSERT_TRUE(kubelet_.Serve(socket_)); }

  PodResolverOptions Options() const {
    PodResolverOptions o;
    o.socket_path = socket_;
    return o;
  }
  uint64_t Failures(const char* reason) {
    return metrics_.GetCounter(kFailures, "", {{"reason", reason}})->value();
  }
  double GaugeValue(const char* name) { return metrics_.GetGauge(name, "")->value(); }

  TempDir tmp_;
  const std::string dir_ = tmp_.path();
  const std::string socket_ = dir_ + "/kubelet.sock";
  MetricRegistry metrics_;
  FakeKubelet kubelet_;
};

TEST_F(PodResolverTest, AttributesGpusOfEveryPodAndIgnoresOtherDevices) {
  kubelet_.SetAnswer(TwoPods());
  Serve();
  PodResolver resolver(Options(), metrics_);
  ASSERT_THAT(resolver.RefreshNow(), IsOk());

  EXPECT_EQ(resolver.Lookup(kGpuA), (PodRef{"ml", "trainer-0", "pytorch", "nvidia.com/gpu"}));
  EXPECT_EQ(resolver.Lookup(kGpuB), (PodRef{"ml", "trainer-0", "pytorch", "nvidia.com/gpu"}));
  EXPECT_EQ(resolver.Lookup(kMigC),
            (PodRef{"serving", "infer-1", "server", "nvidia.com/mig-1g.10gb"}));
  EXPECT_FALSE(resolver.Lookup("GPU-not-a-gpu-0000").has_value());  // example.com/rdma-nic
  EXPECT_FALSE(resolver.Lookup("GPU-00000000-0000-0000-0000-000000000000").has_value());
  EXPECT_FALSE(resolver.Lookup("").has_value());
  EXPECT_EQ(resolver.gpus(), 3u);
  EXPECT_EQ(resolver.refreshes(), 1u);
  EXPECT_EQ(kubelet_.calls(), 1);

  EXPECT_EQ(GaugeValue("ncclwatch_agent_pod_resources_gpus"), 3);
  EXPECT_GT(GaugeValue("ncclwatch_agent_pod_resources_last_success_timestamp_seconds"), 1.6e9);
  EXPECT_EQ(metrics_.GetCounter("ncclwatch_agent_pod_resources_refreshes_total", "")->value(), 1u);
  for (const char* reason : {"socket_missing", "unavailable", "deadline_exceeded", "other"}) {
    EXPECT_EQ(Failures(reason), 0u) << reason;
  }
  // Failure series exist from the start, at zero.
  EXPECT_NE(metrics_.Render().find(std::string(kFailures) + "{reason=\"socket_missing\"} 0"),
            std::string::npos)
      << metrics_.Render();
}

TEST_F(PodResolverTest, RefreshNowShowsTheKubeletsNewAnswer) {
  kubelet_.SetAnswer(TwoPods());
  Serve();
  PodResolver resolver(Options(), metrics_);
  ASSERT_THAT(resolver.RefreshNow(), IsOk());
  ASSERT_EQ(PodOf(resolver, kGpuA), "trainer-0");

  // trainer-0 ended; GPU A went to a new pod, GPU B is free, the MIG slice is unchanged.
  ::v1::ListPodResourcesResponse next;
  AddDevices(AddPod(&next, "ml", "trainer-1", "pytorch"), "nvidia.com/gpu", {kGpuA});
  AddDevices(AddPod(&next, "serving", "infer-1", "server"), "nvidia.com/mig-1g.10gb", {kMigC});
  kubelet_.SetAnswer(next);
  EXPECT_EQ(PodOf(resolver, kGpuA), "trainer-0");  // nothing changes before the refresh

  ASSERT_THAT(resolver.RefreshNow(), IsOk());
  EXPECT_EQ(resolver.Lookup(kGpuA), (PodRef{"ml", "trainer-1", "pytorch", "nvidia.com/gpu"}));
  EXPECT_FALSE(resolver.Lookup(kGpuB).has_value());
  EXPECT_EQ(PodOf(resolver, kMigC), "infer-1");
  EXPECT_EQ(resolver.gpus(), 2u);
  EXPECT_EQ(GaugeValue("ncclwatch_agent_pod_resources_gpus"), 2);
}

TEST_F(PodResolverTest, MissingSocketIsCountedAndRetriedUntilTheKubeletAppears) {
  PodResolver resolver(Options(), metrics_);  // nothing listens at socket_ yet
  absl::Status status = resolver.RefreshNow();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_FALSE(resolver.Lookup(kGpuA).has_value());
  EXPECT_EQ(resolver.gpus(), 0u);
  EXPECT_EQ(Failures("socket_missing"), 1u);
  EXPECT_EQ(resolver.RefreshNow().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Failures("socket_missing"), 2u);
  EXPECT_EQ(resolver.refreshes(), 2u);
  EXPECT_EQ(GaugeValue("ncclwatch_agent_pod_resources_last_success_timestamp_seconds"), 0);

  // The kubelet comes up: the same resolver (and channel) recovers.
  kubelet_.SetAnswer(TwoPods());
  Serve();
  ASSERT_THAT(resolver.RefreshNow(), IsOk());
  EXPECT_EQ(PodOf(resolver, kGpuA), "trainer-0");
  EXPECT_EQ(Failures("socket_missing"), 2u);
}

TEST_F(PodResolverTest, AFailedCallKeepsTheLastAnswer) {
  kubelet_.SetAnswer(TwoPods());
  Serve();
  PodResolver resolver(Options(), metrics_);
  ASSERT_THAT(resolver.RefreshNow(), IsOk());

  kubelet_.SetAnswer(::v1::ListPodResourcesResponse());
  kubelet_.FailNext(grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(resolver.RefreshNow().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Failures("unavailable"), 1u);
  EXPECT_EQ(PodOf(resolver, kGpuA), "trainer-0");  // stale beats nothing
  EXPECT_EQ(resolver.gpus(), 3u);

  kubelet_.FailNext(grpc::StatusCode::UNIMPLEMENTED);  // e.g. a kubelet without this version
  EXPECT_EQ(resolver.RefreshNow().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(Failures("unimplemented"), 1u);

  // The next good answer (now: no pods) replaces it.
  ASSERT_THAT(resolver.RefreshNow(), IsOk());
  EXPECT_FALSE(resolver.Lookup(kGpuA).has_value());
  EXPECT_EQ(resolver.gpus(), 0u);
}

TEST_F(PodResolverTest, TimeSlicedReplicasNameTheirGpuAndAGpuSharedByPodsIsLeftOut) {
  ::v1::ListPodResourcesResponse answer;
  // GPU A: two replicas, both in one container -> still one owner.
  AddDevices(AddPod(&answer, "ml", "solo", "main"), "nvidia.com/gpu",
             {"GPU-aaaaaaaa-1111-2222-3333-444444444444::0",
              "GPU-aaaaaaaa-1111-2222-3333-444444444444::3"});
  // GPU B: replicas in two pods -> no single owner.
  AddDevices(AddPod(&answer, "ml", "left", "main"), "nvidia.com/gpu",
             {"GPU-bbbbbbbb-1111-2222-3333-444444444444::1"});
  AddDevices(AddPod(&answer, "ml", "right", "main"), "nvidia.com/gpu",
             {"GPU-bbbbbbbb-1111-2222-3333-444444444444::2"});
  kubelet_.SetAnswer(answer);
  Serve();
  PodResolver resolver(Options(), metrics_);
  ASSERT_THAT(resolver.RefreshNow(), IsOk());
  EXPECT_EQ(PodOf(resolver, kGpuA), "solo");
  EXPECT_FALSE(resolver.Lookup(kGpuB).has_value());
  EXPECT_EQ(resolver.gpus(), 1u);
  EXPECT_EQ(GaugeValue("ncclwatch_agent_pod_resources_shared_gpus"), 1);
}

TEST_F(PodResolverTest, GpuResourceNamesAreConfigurable) {
  kubelet_.SetAnswer(TwoPods());
  Serve();
  PodResolverOptions options = Options();
  options.gpu_resources = {"example.com/rdma-nic"};
  PodResolver resolver(options, metrics_);
  ASSERT_THAT(resolver.RefreshNow(), IsOk());
  EXPECT_EQ(resolver.Lookup("GPU-not-a-gpu-0000").value_or(PodRef{}).resource_name,
            "example.com/rdma-nic");
  EXPECT_FALSE(resolver.Lookup(kGpuA).has_value());
}

TEST_F(PodResolverTest, BackgroundThreadRefreshesEveryIntervalUntilStopped) {
  kubelet_.SetAnswer(TwoPods());
  Serve();
  PodResolverOptions options = Options();
  options.refresh_interval = absl::Milliseconds(5);
  PodResolver resolver(options, metrics_);
  resolver.Start();
  ASSERT_TRUE(resolver.AwaitRefreshes(3, absl::Seconds(30)));
  EXPECT_EQ(PodOf(resolver, kGpuA), "trainer-0");
  resolver.Stop();
  const uint64_t done = resolver.refreshes();
  const int calls = kubelet_.calls();
  // Every call came from a refresh; a refresh that Stop() cancelled (in flight, or started between
  // the kubelet client's stop and the loop's) may not have reached the kubelet.
  EXPECT_GE(calls, 3);
  EXPECT_LE(calls, static_cast<int>(done));
  // Stopped for good: no call reaches the kubelet any more.
  EXPECT_EQ(resolver.RefreshNow().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(kubelet_.calls(), calls);
  EXPECT_EQ(PodOf(resolver, kGpuA), "trainer-0");  // lookups still answer
}

TEST_F(PodResolverTest, StopCancelsACallInFlight) {
  kubelet_.Hang();  // a kubelet that accepts the call and never answers
  Serve();
  PodResolverOptions options = Options();
  options.call_timeout = absl::Seconds(60);
  PodResolver resolver(options, metrics_);
  resolver.Start();
  ASSERT_TRUE(kubelet_.arrived().WaitForNotificationWithTimeout(absl::Seconds(30)));
  const absl::Time start = absl::Now();
  resolver.Stop();  // would take the 60 s deadline without the cancellation
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_EQ(resolver.refreshes(), 1u);
  EXPECT_EQ(resolver.gpus(), 0u);
  // Shutting down is not a kubelet failure.
  EXPECT_EQ(metrics_.GetCounter("ncclwatch_agent_pod_resources_refreshes_total", "")->value(), 0u);
  for (const char* reason : {"unavailable", "deadline_exceeded", "other"}) {
    EXPECT_EQ(Failures(reason), 0u) << reason;
  }
}

TEST(IsGpuResourceTest, ExactNamesAndStarPrefixes) {
  const std::vector<std::string> patterns = {"nvidia.com/gpu", "nvidia.com/mig-*"};
  EXPECT_TRUE(IsGpuResource("nvidia.com/gpu", patterns));
  EXPECT_TRUE(IsGpuResource("nvidia.com/mig-1g.10gb", patterns));
  EXPECT_TRUE(IsGpuResource("nvidia.com/mig-", patterns));
  EXPECT_FALSE(IsGpuResource("nvidia.com/gpu.shared", patterns));
  EXPECT_FALSE(IsGpuResource("nvidia.com/mig", patterns));
  EXPECT_FALSE(IsGpuResource("amd.com/gpu", patterns));
  EXPECT_FALSE(IsGpuResource("", patterns));
  EXPECT_FALSE(IsGpuResource("nvidia.com/gpu", {}));
}

}  // namespace
}  // namespace ncclwatch::agent

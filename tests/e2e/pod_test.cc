// GPU -> pod attribution end to end: the plugin names its GPU's UUID (from the environment the
// NVIDIA device plugin gives a container), the agent asks a kubelet pod-resources server of our
// own which pod holds that GPU, and the aggregator shows the pod next to the rank.
#include <csignal>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "common/status_matchers.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "k8s/podresources_v1.grpc.pb.h"
#include "tests/e2e/pipeline.h"
#include "tests/e2e/process.h"

namespace ncclwatch::testing {
namespace {

using ::ncclwatch::testutil::IsOk;

// simjob --gpu-uuids gives rank r of node n this UUID (FakeGpuUuid in tests/simjob/options.h).
std::string SimjobGpuUuid(int node, int rank) {
  return absl::StrFormat("GPU-00000000-0000-0000-0000-%06d%06d", node, rank);
}

// The kubelet's answer: node 0's four GPUs belong to two pods of the "ml" namespace.
class FakeKubelet final : public ::v1::PodResourcesLister::Service {
 public:
  grpc::Status List(grpc::ServerContext*, const ::v1::ListPodResourcesRequest*,
                    ::v1::ListPodResourcesResponse* response) override {
    for (int pod = 0; pod < 2; ++pod) {
      auto* p = response->add_pod_resources();
      p->set_name("trainer-" + std::to_string(pod));
      p->set_namespace_("ml");
      auto* container = p->add_containers();
      container->set_name("pytorch");
      auto* gpus = container->add_devices();
      gpus->set_resource_name("nvidia.com/gpu");
      gpus->add_device_ids(SimjobGpuUuid(0, 2 * pod));
      gpus->add_device_ids(SimjobGpuUuid(0, 2 * pod + 1));
      auto* nic = container->add_devices();  // not a GPU: ignored
      nic->set_resource_name("rdma/hca");
      nic->add_device_ids("mlx5_0");
    }
    return grpc::Status::OK;
  }
};

TEST(PodEndToEndTest, RanksAreShownWithThePodAndContainerHoldingTheirGpu) {
  ScopedTempDir kubelet_dir("ncclwatch-kubelet");
  FakeKubelet kubelet;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + kubelet_dir.path() + "/kubelet.sock",
                           grpc::InsecureServerCredentials());
  builder.RegisterService(&kubelet);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);

  Pipeline p(1, {},
             {"--pod-resources-socket=" + kubelet_dir.path() + "/kubelet.sock",
              "--pod-resources-refresh-s=1"});
  ASSERT_TRUE(p.ok()) << p.error();
  // Checked while the job runs: once it ends, its communicators are forgotten (jobs lists it).
  Process job({Binaries::Simjob(), "--plugin=" + Binaries::Plugin(), "--nodes=1",
               "--ranks-per-node=4", "--gpu-uuids", "--agent-addr=" + p.AgentAddrTemplate(),
               "--job-id=pods", "--duration-s=30", "--env=NCCLWATCH_FLUSH_INTERVAL_MS=200"},
              {}, p.dir() + "/simjob.log");

  // The aggregator keeps each rank's identity as last reported.
  ncclwatch::v1::ListCommsResponse comms;
  ASSERT_TRUE(PollUntil(
      [&] {
        grpc::ClientContext context;
        ncclwatch::v1::ListCommsRequest request;
        request.set_job_id("pods");
        comms.Clear();
        if (!p.query().ListComms(&context, request, &comms).ok()) return false;
        for (const auto& c : comms.comms()) {
          if (c.ranks_size() < 4) return false;
          for (const auto& r : c.ranks()) {
            if (r.pod().empty()) return false;
          }
        }
        return comms.comms_size() > 0;
      },
      20))
      << comms.DebugString() << p.Logs();
  for (const auto& c : comms.comms()) {
    for (const auto& r : c.ranks()) {
      EXPECT_EQ(r.gpu_uuid(), SimjobGpuUuid(0, r.rank()));
      EXPECT_EQ(r.pod(), "trainer-" + std::to_string(r.rank() / 2));
      EXPECT_EQ(r.pod_namespace(), "ml");
      EXPECT_EQ(r.container(), "pytorch");
    }
  }
  // And so does the CLI's JSON.
  auto [cli_code, cli_out] = RunToCompletion(
      {Binaries::Cli(), "--aggregator=" + p.AggregatorAddr(), "comms", "--job=pods", "--json"},
      p.dir() + "/cli.log");
  EXPECT_EQ(cli_code, 0) << cli_out;
  EXPECT_NE(cli_out.find("\"trainer-1\""), std::string::npos) << cli_out;
  EXPECT_NE(cli_out.find("\"pytorch\""), std::string::npos) << cli_out;
  job.Signal(SIGTERM);
  job.Wait();
  server->Shutdown();
}

}  // namespace
}  // namespace ncclwatch::testing

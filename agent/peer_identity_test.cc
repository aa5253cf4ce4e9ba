// The kernel's word on a plugin's pod: cgroup paths of every kubelet layout, the kubelet's pod log
// directories, SO_PEERCRED on a real socket, and the agent stamping reports from it end to end.
#include "agent/peer_identity.h"

#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "agent/agent_server.h"
#include "agent/agent_test_util.h"
#include "agent/pod_resources.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace ncclwatch::agent {
namespace {

constexpr char kUid[] = "1f0c5a3e-2b4d-4c6e-8f00-123456789abc";
constexpr char kUidUnderscores[] = "1f0c5a3e_2b4d_4c6e_8f00_123456789abc";
const std::string kContainer(64, 'e');

TEST(PodFromCgroupTest, ReadsThePodUidAndContainerOfEveryKubeletLayout) {
  const CgroupPod expected{kUid, kContainer};
  // cgroup v2, systemd driver, containerd.
  EXPECT_EQ(PodFromCgroup(absl::StrCat("0::/kubepods.slice/kubepods-burstable.slice/"
                                       "kubepods-burstable-pod",
                                       kUidUnderscores, ".slice/cri-containerd-", kContainer,
                                       ".scope\n")),
            expected);
  // Guaranteed QoS (no QoS level), CRI-O.
  EXPECT_EQ(PodFromCgroup(absl::StrCat("0::/kubepods.slice/kubepods-pod", kUidUnderscores,
                                       ".slice/crio-", kContainer, ".scope")),
            expected);
  // cgroup v1, cgroupfs driver: one line per hierarchy; the first with a pod answers.
  EXPECT_EQ(PodFromCgroup(absl::StrCat("13:name=systemd:/\n12:memory:/kubepods/besteffort/pod",
                                       kUid, "/", kContainer, "\n11:cpu:/kubepods/besteffort/pod",
                                       kUid, "/", kContainer, "\n")),
            expected);
  // Seen from inside the agent's own cgroup namespace: a path relative to the agent's container.
  EXPECT_EQ(PodFromCgroup(absl::StrCat("0::/../../kubepods-besteffort-pod", kUidUnderscores,
                                       ".slice/cri-containerd-", kContainer, ".scope")),
            expected);
  // A process in the pod's cgroup itself (no container level).
  EXPECT_EQ(PodFromCgroup(absl::StrCat("0::/kubepods/pod", kUid)), (CgroupPod{kUid, ""}));
}

TEST(PodFromCgroupTest, ProcessesOutsideAnyPodHaveNone) {
  EXPECT_EQ(PodFromCgroup("0::/user.slice/user-1000.slice/session-3.scope\n"), std::nullopt);
  EXPECT_EQ(PodFromCgroup("0::/\n"), std::nullopt);
  EXPECT_EQ(PodFromCgroup(""), std::nullopt);
  // "pod<uid>" alone is not enough: the path must be under the kubelet's kubepods tree.
  EXPECT_EQ(PodFromCgroup(absl::StrCat("0::/system.slice/pod", kUid)), std::nullopt);
  // Not a UID: wrong length, wrong separators, not hex.
  EXPECT_EQ(PodFromCgroup("0::/kubepods/burstable/pod1234/abc"), std::nullopt);
  EXPECT_EQ(PodFromCgroup("0::/kubepods/burstable/podzf0c5a3e-2b4d-4c6e-8f00-123456789abc"),
            std::nullopt);
  EXPECT_EQ(PodFromCgroup("0::/kubepods/burstable/pod1f0c5a3e.2b4d.4c6e.8f00.123456789abc"),
            std::nullopt);
  EXPECT_EQ(PodFromCgroup("garbage without colons"), std::nullopt);
}

TEST(ParsePodLogDirTest, NamespacePodAndUid) {
  auto parsed = ParsePodLogDir(absl::StrCat("ml-team_trainer-0_", kUid));
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->first, kUid);
  EXPECT_EQ(parsed->second, (PodName{"ml-team", "trainer-0"}));
  EXPECT_FALSE(ParsePodLogDir(kUid).has_value());
  EXPECT_FALSE(ParsePodLogDir(absl::StrCat("ns__", kUid)).has_value());
  EXPECT_FALSE(ParsePodLogDir(absl::StrCat("_pod_", kUid)).has_value());
  EXPECT_FALSE(ParsePodLogDir("ns_pod_not-a-uid").has_value());
  EXPECT_FALSE(ParsePodLogDir(absl::StrCat("ns_pod_", kUidUnderscores)).has_value());
}

class PeerIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.empty()); }

  // Makes `proc` show this process in the pod `uid`, as /proc/<pid>/cgroup would.
  void PlaceThisProcessInPod(const std::string& proc, const std::string& uid_underscores) {
    const std::string pid_dir = proc + "/" + std::to_string(getpid());
    std::filesystem::create_directories(pid_dir);
    std::ofstream(pid_dir + "/cgroup")
        << "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" << uid_underscores
        << ".slice/cri-containerd-" << kContainer << ".scope\n";
  }

  // The agent on this test's socket, attributing by the kernel through the stand-in /proc, pod
  // log directories and kubelet under dir_.
  AgentServerOptions KernelAttributionOptions(const std::string& aggregator) const {
    AgentServerOptions options;
    options.listen = "unix://" + dir_ + "/agent.sock";
    options.aggregators = {aggregator};
    options.node_name = "node-t";
    options.agent_id = "node-t-test";
    options.http_port = 0;
    options.plugins.proc_dir = dir_ + "/proc";
    options.pod_logs_dir = dir_ + "/pods";
    options.pod_resources_socket = dir_ + "/kubelet.sock";
    return options;
  }

  TempDir tmp_;
  const std::string dir_ = tmp_.path();
};

TEST_F(PeerIdentityTest, TheKernelNamesTheProcessAtTheOtherEndOfASocket) {
  PlaceThisProcessInPod(dir_ + "/proc", kUidUnderscores);
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  std::optional<PeerIdentity> peer = IdentifyPeer(fds[0], dir_ + "/proc");
  ASSERT_TRUE(peer.has_value());
  EXPECT_EQ(peer->pid, getpid());
  EXPECT_EQ(peer->uid, getuid());
  EXPECT_EQ(peer->gid, getgid());
  EXPECT_EQ(peer->pod, (CgroupPod{kUid, kContainer}));
  // Without a proc directory (or one without the pid) the pid is known, the pod is not.
  peer = IdentifyPeer(fds[0], "");
  ASSERT_TRUE(peer.has_value());
  EXPECT_EQ(peer->pid, getpid());
  EXPECT_FALSE(peer->pod.has_value());
  EXPECT_FALSE(peer->cgroup_unreadable);  // not looked for
  // A pid whose cgroup cannot be read (the process is gone): nobody the agent can name.
  peer = IdentifyPeer(fds[0], dir_ + "/elsewhere");
  EXPECT_FALSE(peer->pod.has_value());
  EXPECT_TRUE(peer->cgroup_unreadable);
  close(fds[0]);
  close(fds[1]);
}

TEST_F(PeerIdentityTest, PodDirectoryRescansOnAMissAtMostOncePerInterval) {
  const std::string pods = dir_ + "/pods";
  std::filesystem::create_directories(pods + "/ml_trainer-0_" + kUid);
  std::filesystem::create_directories(pods + "/not-a-pod-dir");
  PodDirectory eager(pods, absl::ZeroDuration());
  EXPECT_EQ(eager.Find(kUid), (PodName{"ml", "trainer-0"}));
  const std::string later = "22222222-2b4d-4c6e-8f00-123456789abc";
  PodDirectory lazy(pods, absl::InfiniteDuration());
  EXPECT_FALSE(lazy.Find(later).has_value());  // first scan
  std::filesystem::create_directories(pods + "/ml_trainer-1_" + later);
  EXPECT_EQ(eager.Find(later), (PodName{"ml", "trainer-1"}));  // a miss rescans
  EXPECT_FALSE(lazy.Find(later).has_value());                  // but not more often than asked
  EXPECT_FALSE(PodDirectory(dir_ + "/absent").Find(kUid).has_value());
}

TEST(PeerTableTest, FindsConnectionsByTheirGrpcPeerName) {
  PeerTable table;
  auto identity = std::make_shared<const PeerIdentity>(PeerIdentity{42, 1000, 1000, {}});
  table.Record(7, identity);
  EXPECT_EQ(PeerTable::PeerName(7), "fd:7");
  EXPECT_EQ(table.Find("fd:7"), identity);
  EXPECT_EQ(table.Find("fd:8"), nullptr);
  EXPECT_EQ(table.Find("fd:"), nullptr);
  EXPECT_EQ(table.Find("fd:7x"), nullptr);
  EXPECT_EQ(table.Find("ipv4:127.0.0.1:5000"), nullptr);
  auto later = std::make_shared<const PeerIdentity>(PeerIdentity{43, 0, 0, {}});
  table.Record(7, later);  // the descriptor number reused by a new connection
  EXPECT_EQ(table.Find("fd:7"), later);
}

// Sends one report naming `gpu` and claiming prod-ns/victim-pod-0, over the plugin socket
// `address`; the agent accepts it.
void SendReport(const std::string& address, const std::string& gpu) {
  EXPECT_EQ(SendClaimingReport(address, gpu, "job-" + gpu).accepted(), 1u);
}

TEST_F(PeerIdentityTest, TheAgentStampsThePodTheKernelNamesAndDropsAGpuOfAnotherPod) {
  constexpr char kVictimGpu[] = "GPU-99999999-1111-2222-3333-444444444444";
  constexpr char kOwnGpu[] = "GPU-aaaaaaaa-1111-2222-3333-444444444444";
  const std::string victim_uid = "99999999-2b4d-4c6e-8f00-123456789abc";
  // This test process plays a plugin in pod ml/attacker-0; prod-ns/victim-pod-0 runs beside it.
  PlaceThisProcessInPod(dir_ + "/proc", kUidUnderscores);
  std::filesystem::create_directories(dir_ + "/pods/ml_attacker-0_" + kUid);
  std::filesystem::create_directories(dir_ + "/pods/prod-ns_victim-pod-0_" + victim_uid);
  FakeKubelet kubelet;
  ::v1::ListPodResourcesResponse answer;
  AddDevices(AddPod(&answer, "prod-ns", "victim-pod-0", "trainer"), "nvidia.com/gpu", {kVictimGpu});
  AddDevices(AddPod(&answer, "ml", "attacker-0", "pytorch"), "nvidia.com/gpu", {kOwnGpu});
  kubelet.SetAnswer(answer);
  ASSERT_TRUE(kubelet.Serve(dir_ + "/kubelet.sock"));
  StandInAggregator aggregator;
  const std::string aggregator_address = aggregator.Serve();
  ASSERT_FALSE(aggregator_address.empty());

  const AgentServerOptions options = KernelAttributionOptions(aggregator_address);
  AgentServer server(options);
  ASSERT_TRUE(server.Start().ok());
  ASSERT_TRUE(server.pod_resolver()->AwaitRefreshes(1, absl::Seconds(30)));
  ASSERT_EQ(server.pod_resolver()->gpus(), 2u);
  SendReport(options.listen, kVictimGpu);
  SendReport(options.listen, kOwnGpu);
  auto metrics = httplib::Client("127.0.0.1", server.http_port()).Get("/metrics");
  server.Stop();

  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("ncclwatch_agent_gpu_claims_refused_total 1\n"), std::string::npos);
  EXPECT_NE(metrics->body.find("ncclwatch_agent_reports_attributed_total{source=\"kernel\"} 2\n"),
            std::string::npos);
  EXPECT_NE(metrics->body.find("ncclwatch_agent_plugin_connections_total{peer=\"pod\"} 2\n"),
            std::string::npos);
  ncclwatch::MutexLock lock(&aggregator.mu);
  int seen = 0;
  for (const ncclwatch::v1::NodeBatch& batch : aggregator.batches) {
    for (const auto& r : batch.reports()) {
      ++seen;
      // Never the pod the report claims, whatever GPU it names.
      EXPECT_EQ(r.identity().pod_namespace(), "ml");
      EXPECT_EQ(r.identity().pod(), "attacker-0");
      if (r.identity().job_id() == absl::StrCat("job-", kVictimGpu)) {
        EXPECT_EQ(r.identity().gpu_uuid(), "") << "another pod's GPU is not kept";
        EXPECT_EQ(r.identity().container(), "");
      } else {
        EXPECT_EQ(r.identity().gpu_uuid(), kOwnGpu);
        EXPECT_EQ(r.identity().container(), "pytorch");
      }
    }
  }
  EXPECT_EQ(seen, 2);
}

// The connecting process exited before the agent read its cgroup (fork, let the child connect
// and exit, send on the inherited socket): the kernel cannot name the sender, so the report is
// attributed to no pod, and its GPU claim is dropped. It had been taken for a host process and
// stamped with the pod owning the GPU it claimed.
TEST_F(PeerIdentityTest, ASenderTheKernelCanNoLongerNameGetsNoPodFromTheGpuItClaims) {
  constexpr char kVictimGpu[] = "GPU-99999999-1111-2222-3333-444444444444";
  const std::string victim_uid = "99999999-2b4d-4c6e-8f00-123456789abc";
  std::filesystem::create_directories(dir_ + "/proc");  // and no entry for this process
  std::filesystem::create_directories(dir_ + "/pods/prod-ns_victim-pod-0_" + victim_uid);
  FakeKubelet kubelet;
  ::v1::ListPodResourcesResponse answer;
  AddDevices(AddPod(&answer, "prod-ns", "victim-pod-0", "trainer"), "nvidia.com/gpu", {kVictimGpu});
  kubelet.SetAnswer(answer);
  ASSERT_TRUE(kubelet.Serve(dir_ + "/kubelet.sock"));
  StandInAggregator aggregator;
  const std::string aggregator_address = aggregator.Serve();
  ASSERT_FALSE(aggregator_address.empty());

  const AgentServerOptions options = KernelAttributionOptions(aggregator_address);
  AgentServer server(options);
  ASSERT_TRUE(server.Start().ok());
  ASSERT_TRUE(server.pod_resolver()->AwaitRefreshes(1, absl::Seconds(30)));
  SendReport(options.listen, kVictimGpu);
  auto metrics = httplib::Client("127.0.0.1", server.http_port()).Get("/metrics");
  server.Stop();

  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("ncclwatch_agent_reports_unknown_sender_total 1\n"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("ncclwatch_agent_reports_attributed_total{source=\"gpu\"} 0\n"),
            std::string::npos);
  ncclwatch::MutexLock lock(&aggregator.mu);
  int seen = 0;
  for (const ncclwatch::v1::NodeBatch& batch : aggregator.batches) {
    for (const auto& r : batch.reports()) {
      ++seen;
      EXPECT_EQ(r.identity().pod(), "");
      EXPECT_EQ(r.identity().pod_namespace(), "");
      EXPECT_EQ(r.identity().container(), "");
      EXPECT_EQ(r.identity().gpu_uuid(), "");
      EXPECT_EQ(r.identity().node(), "node-t");
    }
  }
  EXPECT_EQ(seen, 1);
}

}  // namespace
}  // namespace ncclwatch::agent

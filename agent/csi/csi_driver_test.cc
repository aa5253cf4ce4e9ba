// The CSI node driver, served over its real unix sockets: what it refuses and why, the kubelet's
// registration handshake and readiness, read-only bind mounts that come and go as the kubelet asks
// (in a private mount namespace of this test process), and, end to end, a plugin that reaches the
// agent only through a volume the driver published, whose reports the agent attributes to the pod
// the kernel names, not to the one they claim.
//
// The mounts need CAP_SYS_ADMIN: main() moves this process into its own mount namespace before
// any thread starts (the tests run as root in CI); without it the mounting tests are skipped and
// say why.
#include "agent/csi/csi_driver.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/agent_server.h"
#include "agent/agent_test_util.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "k8s/csi_v1.grpc.pb.h"
#include "k8s/pluginregistration_v1.grpc.pb.h"
#include "ncclwatch/v1/ingest.grpc.pb.h"

namespace ncclwatch::agent::csi {
namespace {

using ::testing::HasSubstr;

bool g_private_mounts = false;  // set by main()
std::string g_mount_error;

constexpr char kUid[] = "1f0c5a3e-2b4d-4c6e-8f00-123456789abc";
constexpr char kUidUnderscores[] = "1f0c5a3e_2b4d_4c6e_8f00_123456789abc";

// The value of series `series` (name and labels) in a /metrics page; "(absent)" if none.
std::string MetricValue(const std::string& page, const std::string& series) {
  for (size_t at = page.find(series + " "); at != std::string::npos;
       at = page.find(series + " ", at + 1)) {
    if (at == 0 || page[at - 1] == '\n') {
      const size_t from = at + series.size() + 1;
      return page.substr(from, page.find('\n', from) - from);
    }
  }
  return "(absent)";
}

// The per-mount options of the mount at `path` (the last one there), from mountinfo.
std::vector<std::string> MountOptions(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::vector<std::string> found;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    if (fields.size() > 5 && fields[4] == path) found = absl::StrSplit(fields[5], ',');
  }
  return found;
}

int RunProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env,
               const std::string& log);
std::string ReadFile(const std::string& path);

#define SKIP_WITHOUT_MOUNTS()                                                               \
  if (!g_private_mounts) {                                                                  \
    GTEST_SKIP() << "needs CAP_SYS_ADMIN for a private mount namespace: " << g_mount_error; \
  }

class CsiDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.empty());
    std::filesystem::create_directories(dir_ + "/kubelet/pods/" + kUid + "/volumes");
  }

  CsiDriverOptions Options(bool register_with_kubelet = false) const {
    CsiDriverOptions o;
    o.endpoint = "unix://" + dir_ + "/kubelet/plugins/csi.ncclwatch.io/csi.sock";
    if (register_with_kubelet) o.registration_dir = dir_ + "/kubelet/plugins_registry";
    o.kubelet_dir = dir_ + "/kubelet";
    o.socket_dir = dir_ + "/run-ncclwatch";
    o.plugin_dir = dir_ + "/opt-ncclwatch-lib";
    o.node_name = "node-a";
    o.http_port = 0;
    return o;
  }

  // The directory the kubelet hands the driver for volume `name` of the pod kUid.
  std::string Target(const std::string& name) const {
    const std::string parent =
        dir_ + "/kubelet/pods/" + kUid + "/volumes/kubernetes.io~csi/" + name;
    std::filesystem::create_directories(parent);  // the kubelet makes the parent, not the target
    return parent + "/mount";
  }

  // What the kubelet sends for an inline volume of pod ml/attacker-0 with podInfoOnMount.
  static ::csi::v1::NodePublishVolumeRequest Request(const std::string& target,
                                                     const std::string& dir) {
    ::csi::v1::NodePublishVolumeRequest r;
    r.set_volume_id(absl::StrCat("csi-", target.size(), "-", dir));
    r.set_target_path(target);
    r.mutable_volume_capability()->mutable_mount();
    r.mutable_volume_capability()->mutable_access_mode()->set_mode(
        ::csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
    r.set_readonly(true);
    auto& ctx = *r.mutable_volume_context();
    ctx["dir"] = dir;
    ctx["csi.storage.k8s.io/ephemeral"] = "true";
    ctx["csi.storage.k8s.io/pod.name"] = "attacker-0";
    ctx["csi.storage.k8s.io/pod.namespace"] = "ml";
    ctx["csi.storage.k8s.io/pod.uid"] = kUid;
    ctx["csi.storage.k8s.io/serviceAccount.name"] = "default";
    return r;
  }

  // The node's agent, serving on the driver's socket directory as in the DaemonSet.
  static AgentServerOptions AgentOptions(const CsiDriverOptions& o, const std::string& aggregator,
                                         const std::string& proc_dir) {
    AgentServerOptions options;
    options.listen = "unix://" + o.socket_dir + "/agent.sock";
    options.aggregators = {aggregator};
    options.node_name = "node-a";
    options.agent_id = "node-a-test";
    options.http_port = 0;
    options.plugins.proc_dir = proc_dir;
    return options;
  }

  std::unique_ptr<::csi::v1::Node::Stub> NodeStub(const CsiDriverOptions& o) const {
    return ::csi::v1::Node::NewStub(
        grpc::CreateChannel(o.endpoint, grpc::InsecureChannelCredentials()));
  }

  static grpc::Status Publish(::csi::v1::Node::Stub* stub,
                              const ::csi::v1::NodePublishVolumeRequest& r) {
    grpc::ClientContext context;
    ::csi::v1::NodePublishVolumeResponse response;
    return stub->NodePublishVolume(&context, r, &response);
  }

  static grpc::Status Unpublish(::csi::v1::Node::Stub* stub, const std::string& target) {
    grpc::ClientContext context;
    ::csi::v1::NodeUnpublishVolumeRequest r;
    r.set_volume_id("v");
    r.set_target_path(target);
    ::csi::v1::NodeUnpublishVolumeResponse response;
    return stub->NodeUnpublishVolume(&context, r, &response);
  }

  static std::string Get(int port, const std::string& path, int* status = nullptr) {
    auto res = httplib::Client("127.0.0.1", port).Get(path);
    if (!res) return "(no answer)";
    if (status != nullptr) *status = res->status;
    return res->body;
  }

  TempDir tmp_;
  const std::string dir_ = tmp_.path();
};

TEST_F(CsiDriverTest, AnswersIdentityAndNodeInfoAndOffersNoOptionalCapability) {
  SKIP_WITHOUT_MOUNTS();
  const CsiDriverOptions o = Options();
  CsiDriver driver(o);
  ASSERT_TRUE(driver.Start().ok());
  auto channel = grpc::CreateChannel(o.endpoint, grpc::InsecureChannelCredentials());
  auto identity = ::csi::v1::Identity::NewStub(channel);
  {
    grpc::ClientContext c;
    ::csi::v1::GetPluginInfoResponse info;
    ASSERT_TRUE(identity->GetPluginInfo(&c, {}, &info).ok());
    EXPECT_EQ(info.name(), "csi.ncclwatch.io");
    EXPECT_FALSE(info.vendor_version().empty());
  }
  {
    grpc::ClientContext c;
    ::csi::v1::GetPluginCapabilitiesResponse caps;
    ASSERT_TRUE(identity->GetPluginCapabilities(&c, {}, &caps).ok());
    EXPECT_EQ(caps.capabilities_size(), 0) << "no controller service, no topology";
  }
  {
    grpc::ClientContext c;
    ::csi::v1::ProbeResponse probe;
    ASSERT_TRUE(identity->Probe(&c, {}, &probe).ok());
    EXPECT_TRUE(probe.ready().value());
  }
  auto node = ::csi::v1::Node::NewStub(channel);
  {
    grpc::ClientContext c;
    ::csi::v1::NodeGetInfoResponse info;
    ASSERT_TRUE(node->NodeGetInfo(&c, {}, &info).ok());
    EXPECT_EQ(info.node_id(), "node-a");
  }
  {
    grpc::ClientContext c;
    ::csi::v1::NodeGetCapabilitiesResponse caps;
    ASSERT_TRUE(node->NodeGetCapabilities(&c, {}, &caps).ok());
    EXPECT_EQ(caps.capabilities_size(), 0) << "no staging: the kubelet calls Publish directly";
  }
  // Without registration it is ready at once; the source directories exist.
  int status = 0;
  EXPECT_EQ(Get(driver.http_port(), "/readyz", &status), "ok\n");
  EXPECT_EQ(status, 200);
  EXPECT_TRUE(std::filesystem::is_directory(o.socket_dir));
  EXPECT_TRUE(std::filesystem::is_directory(o.plugin_dir));
}

TEST_F(CsiDriverTest, RegistersWithTheKubeletAndIsReadyOnlyOnceTheKubeletConfirms) {
  SKIP_WITHOUT_MOUNTS();
  const CsiDriverOptions o = Options(/*register_with_kubelet=*/true);
  CsiDriver driver(o);
  ASSERT_TRUE(driver.Start().ok());
  const std::string reg = o.registration_dir + "/csi.ncclwatch.io-reg.sock";
  ASSERT_EQ(driver.registration_socket(), reg);
  int status = 0;
  EXPECT_THAT(Get(driver.http_port(), "/readyz", &status), HasSubstr("waiting for the kubelet"));
  EXPECT_EQ(status, 503);
  // The kubelet's plugin watcher: GetInfo, then NotifyRegistrationStatus.
  auto kubelet = ::pluginregistration::Registration::NewStub(
      grpc::CreateChannel("unix://" + reg, grpc::InsecureChannelCredentials()));
  ::pluginregistration::PluginInfo info;
  {
    grpc::ClientContext c;
    ASSERT_TRUE(kubelet->GetInfo(&c, {}, &info).ok());
  }
  EXPECT_EQ(info.type(), "CSIPlugin");
  EXPECT_EQ(info.name(), "csi.ncclwatch.io");
  EXPECT_EQ(info.endpoint(), dir_ + "/kubelet/plugins/csi.ncclwatch.io/csi.sock");
  EXPECT_THAT(info.supported_versions(), ::testing::ElementsAre("1.0.0"));
  auto notify = [&](bool ok, const std::string& error) {
    grpc::ClientContext c;
    ::pluginregistration::RegistrationStatus s;
    s.set_plugin_registered(ok);
    s.set_error(error);
    ::pluginregistration::RegistrationStatusResponse r;
    return kubelet->NotifyRegistrationStatus(&c, s, &r).ok();
  };
  ASSERT_TRUE(notify(true, ""));
  EXPECT_EQ(Get(driver.http_port(), "/readyz", &status), "ok\n");
  EXPECT_EQ(status, 200);
  EXPECT_EQ(MetricValue(Get(driver.http_port(), "/metrics"), "ncclwatch_csi_registered"), "1");
  ASSERT_TRUE(notify(false, "driver name taken"));
  Get(driver.http_port(), "/readyz", &status);
  EXPECT_EQ(status, 503);
  // Stopping removes the registration socket, so the kubelet unregisters the driver.
  driver.Stop();
  EXPECT_FALSE(std::filesystem::exists(reg));
  // A killed driver's stale sockets do not stop the next one.
  CsiDriver next(o);
  EXPECT_TRUE(next.Start().ok());
}

TEST_F(CsiDriverTest, RefusesWhatAPodMustNotHaveAndSaysWhatToChange) {
  SKIP_WITHOUT_MOUNTS();
  const CsiDriverOptions o = Options();
  CsiDriver driver(o);
  ASSERT_TRUE(driver.Start().ok());
  auto stub = NodeStub(o);
  const std::string target = Target("ncclwatch-run");
  struct Case {
    const char* what;
    std::function<void(::csi::v1::NodePublishVolumeRequest*)> change;
    const char* message;
  };
  const Case cases[] = {
      {"writable", [](auto* r) { r->set_readonly(false); }, "set readOnly: true"},
      {"no dir", [](auto* r) { r->mutable_volume_context()->erase("dir"); }, "dir=(missing)"},
      {"another dir", [](auto* r) { (*r->mutable_volume_context())["dir"] = "/etc"; },
       "must be plugin"},
      {"unknown attribute", [](auto* r) { (*r->mutable_volume_context())["path"] = "/etc"; },
       "unknown volumeAttributes key \"path\""},
      {"persistent",
       [](auto* r) { r->mutable_volume_context()->erase("csi.storage.k8s.io/ephemeral"); },
       "ephemeral inline volumes only"},
      {"block", [](auto* r) { r->mutable_volume_capability()->mutable_block(); },
       "not block devices"},
      {"mount flags",
       [](auto* r) { r->mutable_volume_capability()->mutable_mount()->add_mount_flags("rw"); },
       "takes no mount options"},
      {"outside the kubelet", [](auto* r) { r->set_target_path("/etc/cron.d/x"); },
       "is not a pod volume directory"},
      {"climbing out",
       [&](auto* r) {
         r->set_target_path(dir_ + "/kubelet/pods/" + kUid +
                            "/volumes/kubernetes.io~csi/../../../../../etc/mount");
       },
       "is not a pod volume directory"},
      {"a pod's own directory",
       [&](auto* r) { r->set_target_path(dir_ + "/kubelet/pods/" + kUid); },
       "is not a pod volume directory"},
      {"another pod's directory",
       [&](auto* r) {
         (*r->mutable_volume_context())["csi.storage.k8s.io/pod.uid"] = "another-uid";
       },
       "is not in the directory of pod another-uid"},
      {"through a symbolic link",
       [&](auto* r) {
         const std::string pod = dir_ + "/kubelet/pods/linked";
         std::filesystem::create_directories(pod);
         std::filesystem::create_directories(dir_ + "/elsewhere/kubernetes.io~csi/v");
         std::filesystem::create_directory_symlink(dir_ + "/elsewhere", pod + "/volumes");
         r->set_target_path(pod + "/volumes/kubernetes.io~csi/v/mount");
         r->mutable_volume_context()->erase("csi.storage.k8s.io/pod.uid");
       },
       "goes through a symbolic link"},
      {"no volume id", [](auto* r) { r->clear_volume_id(); }, "volume_id is missing"},
  };
  for (const Case& c : cases) {
    ::csi::v1::NodePublishVolumeRequest r = Request(target, "socket");
    c.change(&r);
    const grpc::Status s = Publish(stub.get(), r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.what;
    EXPECT_THAT(s.error_message(), HasSubstr(c.message)) << c.what;
  }
  EXPECT_FALSE(std::filesystem::exists(target)) << "nothing is made for a refused volume";
  const std::string metrics = Get(driver.http_port(), "/metrics");
  EXPECT_EQ(MetricValue(metrics, "ncclwatch_csi_publish_total{dir=\"socket\",result=\"refused\"}"),
            "11");
  EXPECT_EQ(MetricValue(metrics, "ncclwatch_csi_publish_total{dir=\"other\",result=\"refused\"}"),
            "2");
  EXPECT_EQ(MetricValue(metrics, "ncclwatch_csi_volumes_published"), "0");
  // Unpublish outside the kubelet's pods is refused too.
  EXPECT_EQ(Unpublish(stub.get(), "/etc").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(CsiDriverTest, PublishesReadOnlyBindMountsIdempotentlyAndTakesThemBack) {
  SKIP_WITHOUT_MOUNTS();
  const CsiDriverOptions o = Options();
  CsiDriver driver(o);
  ASSERT_TRUE(driver.Start().ok());
  std::ofstream(o.plugin_dir + "/libnccl-profiler-ncclwatch.so") << "plugin v1";
  auto stub = NodeStub(o);
  const std::string lib = Target("ncclwatch-lib");
  const std::string run = Target("ncclwatch-run");
  ASSERT_TRUE(Publish(stub.get(), Request(lib, "plugin")).ok());
  ASSERT_TRUE(Publish(stub.get(), Request(run, "socket")).ok());
  EXPECT_TRUE(IsMountPoint(lib));
  EXPECT_TRUE(IsMountPoint(run));
  // The pod sees the node's files, including ones that appear later (the agent's socket, a new
  // plugin renamed into place), and can write nothing.
  std::string content;
  std::getline(std::ifstream(lib + "/libnccl-profiler-ncclwatch.so"), content);
  EXPECT_EQ(content, "plugin v1");
  std::ofstream(o.socket_dir + "/later") << "x";
  EXPECT_TRUE(std::filesystem::exists(run + "/later"));
  for (const std::string& t : {lib, run}) {
    const int fd = open((t + "/written-by-a-pod").c_str(), O_CREAT | O_WRONLY, 0644);
    EXPECT_EQ(fd, -1) << t;
    EXPECT_EQ(errno, EROFS) << t;
    if (fd >= 0) close(fd);
  }
  // The flags are the volume's own from its creation (so the host's copy has them too): read-only,
  // no set-uid, no devices, and nothing to execute in the socket directory.
  EXPECT_THAT(MountOptions(lib), ::testing::IsSupersetOf({"ro", "nosuid", "nodev"}));
  EXPECT_THAT(MountOptions(lib), ::testing::Not(::testing::Contains("noexec")));
  EXPECT_THAT(MountOptions(run), ::testing::IsSupersetOf({"ro", "nosuid", "nodev", "noexec"}));
  // A mount namespace made now copies this one, as the host's copies the driver's pods directory:
  // the volume is read-only there too (a child in a new namespace cannot write to it).
  EXPECT_NE(
      RunProcess({"/usr/bin/unshare", "-m", "/usr/bin/touch", run + "/x"}, {}, dir_ + "/touch.log"),
      0);
  EXPECT_THAT(ReadFile(dir_ + "/touch.log"), HasSubstr("Read-only file system"));
  // The kubelet retries a publish whose answer it missed: still one mount, still fine.
  ASSERT_TRUE(Publish(stub.get(), Request(run, "socket")).ok());
  std::string metrics = Get(driver.http_port(), "/metrics");
  EXPECT_EQ(MetricValue(metrics, "ncclwatch_csi_publish_total{dir=\"socket\",result=\"ok\"}"), "2");
  EXPECT_EQ(MetricValue(metrics, "ncclwatch_csi_volumes_published"), "2");
  // Unpublish: unmounted, the target removed, the node's directory untouched; twice is fine.
  ASSERT_TRUE(Unpublish(stub.get(), run).ok());
  EXPECT_FALSE(IsMountPoint(run));
  EXPECT_FALSE(std::filesystem::exists(run));
  EXPECT_TRUE(std::filesystem::exists(o.socket_dir + "/later"));
  EXPECT_TRUE(Unpublish(stub.get(), run).ok());
  ASSERT_TRUE(Unpublish(stub.get(), lib).ok());
  metrics = Get(driver.http_port(), "/metrics");
  EXPECT_EQ(MetricValue(metrics, "ncclwatch_csi_unpublish_total{result=\"ok\"}"), "3");
  EXPECT_EQ(MetricValue(metrics, "ncclwatch_csi_volumes_published"), "0");
}

TEST_F(CsiDriverTest, APluginReachingTheAgentThroughTheVolumeIsAttributedToItsOwnPodByTheKernel) {
  SKIP_WITHOUT_MOUNTS();
  constexpr char kVictimGpu[] = "GPU-99999999-1111-2222-3333-444444444444";
  const std::string victim_uid = "99999999-2b4d-4c6e-8f00-123456789abc";
  // The driver and the agent share the node's socket directory, as in the DaemonSet.
  const CsiDriverOptions o = Options();
  CsiDriver driver(o);
  ASSERT_TRUE(driver.Start().ok());
  // This process plays the plugin of pod ml/attacker-0: the stand-in /proc says so (the agent
  // reads the cgroup of the pid the kernel gives it); prod-ns/victim-pod-0 owns kVictimGpu.
  const std::string pid_dir = dir_ + "/proc/" + std::to_string(getpid());
  std::filesystem::create_directories(pid_dir);
  std::ofstream(pid_dir + "/cgroup")
      << "0::/kubepods.slice/kubepods-besteffort.slice/"
         "kubepods-besteffort-pod"
      << kUidUnderscores << ".slice/cri-containerd-" << std::string(64, 'e') << ".scope\n";
  std::filesystem::create_directories(dir_ + "/pods/ml_attacker-0_" + kUid);
  std::filesystem::create_directories(dir_ + "/pods/prod-ns_victim-pod-0_" + victim_uid);
  FakeKubelet kubelet;
  ::v1::ListPodResourcesResponse answer;
  AddDevices(AddPod(&answer, "prod-ns", "victim-pod-0", "trainer"), "nvidia.com/gpu", {kVictimGpu});
  kubelet.SetAnswer(answer);
  ASSERT_TRUE(kubelet.Serve(dir_ + "/kubelet.sock"));
  StandInAggregator aggregator;
  const std::string aggregator_address = aggregator.Serve();
  ASSERT_FALSE(aggregator_address.empty());
  AgentServerOptions agent_options = AgentOptions(o, aggregator_address, dir_ + "/proc");
  agent_options.pod_logs_dir = dir_ + "/pods";
  agent_options.pod_resources_socket = dir_ + "/kubelet.sock";
  AgentServer agent(agent_options);
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(agent.pod_resolver()->AwaitRefreshes(1, absl::Seconds(30)));

  // The pod's volume, published by the driver as the kubelet asks: the only way this "pod" has
  // to the socket is the target path (the node's directory is another path).
  auto stub = NodeStub(o);
  const std::string run = Target("ncclwatch-run");
  ASSERT_TRUE(Publish(stub.get(), Request(run, "socket")).ok());
  ASSERT_TRUE(std::filesystem::is_socket(run + "/agent.sock"));
  // The container runtime then binds the volume into the container, at /run/ncclwatch there (a
  // short path: unix socket paths hold at most 107 bytes, and the kubelet's are longer).
  const std::string in_pod = dir_ + "/pod-root/run/ncclwatch";
  std::filesystem::create_directories(in_pod);
  ASSERT_EQ(mount(run.c_str(), in_pod.c_str(), nullptr, MS_BIND, nullptr), 0) << strerror(errno);
  EXPECT_EQ(SendClaimingReport("unix://" + in_pod + "/agent.sock", kVictimGpu, "job-1").accepted(),
            1u);
  umount2(in_pod.c_str(), MNT_DETACH);
  auto metrics = httplib::Client("127.0.0.1", agent.http_port()).Get("/metrics");
  agent.Stop();
  ASSERT_TRUE(Unpublish(stub.get(), run).ok());

  ASSERT_TRUE(metrics);
  EXPECT_EQ(
      MetricValue(metrics->body, "ncclwatch_agent_reports_attributed_total{source=\"kernel\"}"),
      "1");
  EXPECT_EQ(MetricValue(metrics->body, "ncclwatch_agent_gpu_claims_refused_total"), "1");
  ncclwatch::MutexLock lock(&aggregator.mu);
  int seen = 0;
  for (const ncclwatch::v1::NodeBatch& batch : aggregator.batches) {
    for (const auto& r : batch.reports()) {
      ++seen;
      EXPECT_EQ(r.identity().pod_namespace(), "ml") << "the kernel's pod, not the claimed one";
      EXPECT_EQ(r.identity().pod(), "attacker-0");
      EXPECT_EQ(r.identity().gpu_uuid(), "") << "another pod's GPU is not kept";
    }
  }
  EXPECT_EQ(seen, 1);
}

// Runs `argv` with `env` added to this process's environment; its exit status, -1 if it could not
// run or was killed. Its output goes to `log`.
int RunProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env,
               const std::string& log) {
  // Everything the child needs is built before fork(): after it, only async-signal-safe calls.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& kv : env) envp.push_back(const_cast<char*>(kv.c_str()));
  for (char** e = environ; *e != nullptr; ++e) {
    bool overridden = false;
    for (const std::string& kv : env) {
      overridden |= std::string_view(*e).starts_with(kv.substr(0, kv.find('=') + 1));
    }
    if (!overridden) envp.push_back(*e);
  }
  envp.push_back(nullptr);
  const int fd = open(log.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(fd);
  if (pid < 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The real plugin, as a pod would run it: NCCL (simjob's ranks) loads it from the plugin volume,
// read-only, and it streams to the agent through the socket volume; the node's directories are
// not on any path the job is given.
TEST_F(CsiDriverTest, TheRealPluginLoadsFromThePluginVolumeAndReportsThroughTheSocketVolume) {
  SKIP_WITHOUT_MOUNTS();
  if (!std::filesystem::exists(NCCLWATCH_SIMJOB_BIN) ||
      !std::filesystem::exists(NCCLWATCH_PLUGIN_SO)) {
    GTEST_SKIP() << "simjob or the plugin is not built in this tree (a sanitizer tree builds "
                    "only the test binaries)";
  }
  const CsiDriverOptions o = Options();
  CsiDriver driver(o);
  ASSERT_TRUE(driver.Start().ok());
  // What the agent's init container installs on the node: the plugin and its two libraries.
  const std::filesystem::path built = std::filesystem::path(NCCLWATCH_PLUGIN_SO).parent_path();
  for (const char* name :
       {"libnccl-profiler-ncclwatch.so", "libncclwatch-engine.so", "libncclwatch-hostlibc.so"}) {
    std::filesystem::copy_file(built / name, std::filesystem::path(o.plugin_dir) / name);
  }
  StandInAggregator aggregator;
  const std::string aggregator_address = aggregator.Serve();
  ASSERT_FALSE(aggregator_address.empty());
  AgentServerOptions agent_options =
      AgentOptions(o, aggregator_address, "/proc");  // the kernel's own
  agent_options.pod_resources_socket = "";
  AgentServer agent(agent_options);
  ASSERT_TRUE(agent.Start().ok());

  auto stub = NodeStub(o);
  const std::string lib = Target("ncclwatch-lib");
  const std::string run = Target("ncclwatch-run");
  ASSERT_TRUE(Publish(stub.get(), Request(lib, "plugin")).ok());
  ASSERT_TRUE(Publish(stub.get(), Request(run, "socket")).ok());
  // The container runtime's part: the volumes at the pod template's mount paths.
  const std::string pod_lib = dir_ + "/pod-root/opt/ncclwatch/lib";
  const std::string pod_run = dir_ + "/pod-root/run/ncclwatch";
  for (const auto& [from, to] : {std::pair{lib, pod_lib}, std::pair{run, pod_run}}) {
    std::filesystem::create_directories(to);
    ASSERT_EQ(mount(from.c_str(), to.c_str(), nullptr, MS_BIND, nullptr), 0) << strerror(errno);
  }
  const std::string log = dir_ + "/simjob.log";
  const int status = RunProcess(
      {NCCLWATCH_SIMJOB_BIN, "--plugin", pod_lib + "/libnccl-profiler-ncclwatch.so", "--nodes", "1",
       "--ranks-per-node", "2", "--iterations", "3", "--job-id", "csi-job"},
      {"NCCLWATCH_AGENT_ADDR=unix://" + pod_run + "/agent.sock",
       "NCCLWATCH_FINALIZE_TIMEOUT_MS=5000"},
      log);
  for (const std::string& to : {pod_lib, pod_run}) umount2(to.c_str(), MNT_DETACH);
  agent.Stop();
  EXPECT_EQ(status, 0) << ReadFile(log);
  ASSERT_TRUE(Unpublish(stub.get(), lib).ok());
  ASSERT_TRUE(Unpublish(stub.get(), run).ok());

  ncclwatch::MutexLock lock(&aggregator.mu);
  std::set<int> ranks;
  for (const ncclwatch::v1::NodeBatch& batch : aggregator.batches) {
    for (const auto& r : batch.reports()) {
      EXPECT_EQ(r.identity().job_id(), "csi-job");
      ranks.insert(r.identity().rank());
    }
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1})) << "both ranks' reports reached the aggregator\n"
                                          << ReadFile(log);
}

}  // namespace
}  // namespace ncclwatch::agent::csi

int main(int argc, char** argv) {
  // Before any thread exists: unshare(CLONE_NEWNS) moves only the calling thread, and every
  // gRPC thread that mounts must be in the namespace. Private propagation keeps the test's mounts
  // out of the machine's namespace.
  using ncclwatch::agent::csi::g_mount_error;
  using ncclwatch::agent::csi::g_private_mounts;
  if (unshare(CLONE_NEWNS) != 0) {
    g_mount_error = std::string("unshare(CLONE_NEWNS): ") + std::strerror(errno);
  } else if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    g_mount_error = std::string("making / private: ") + std::strerror(errno);
  } else {
    g_private_mounts = true;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

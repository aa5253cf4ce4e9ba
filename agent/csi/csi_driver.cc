// ncclwatch's CSI node driver (csi_driver.h).
#include "agent/csi/csi_driver.h"

#include <errno.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "agent/unix_socket.h"
#include "common/build_info.h"
#include "common/log.h"
#include "common/process_metrics.h"
#include "grpcpp/grpcpp.h"
#include "k8s/csi_v1.grpc.pb.h"
#include "k8s/pluginregistration_v1.grpc.pb.h"

namespace ncclwatch::agent::csi {
namespace {

// What the kubelet puts into volume_context besides the pod's volumeAttributes (podInfoOnMount).
constexpr char kKubeletContextPrefix[] = "csi.storage.k8s.io/";
constexpr char kEphemeralKey[] = "csi.storage.k8s.io/ephemeral";

grpc::Status Invalid(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

std::string ErrnoText(int err) { return std::strerror(err); }

// Decodes the octal escapes (\040 for a space, ...) mountinfo uses in paths.
std::string UnescapeMountPath(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const std::string_view digits = s.substr(i + 1, 3);
      if (digits.size() == 3 && digits[0] >= '0' && digits[0] <= '3' && digits[1] >= '0' &&
          digits[1] <= '7' && digits[2] >= '0' && digits[2] <= '7') {
        out +=
            static_cast<char>((digits[0] - '0') * 64 + (digits[1] - '0') * 8 + (digits[2] - '0'));
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

}  // namespace

bool IsMountPoint(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // "<id> <parent> <major:minor> <root> <mount point> <options> ..."
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
    if (fields.size() > 4 &&
        UnescapeMountPath(std::string_view(fields[4].data(), fields[4].size())) == path) {
      return true;
    }
  }
  return false;
}

// The three gRPC services, each a thin shell over CsiDriver.
class CsiDriver::Services {
 public:
  class Identity final : public ::csi::v1::Identity::Service {
   public:
    explicit Identity(CsiDriver* driver) : driver_(driver) {}
    grpc::Status GetPluginInfo(grpc::ServerContext*, const ::csi::v1::GetPluginInfoRequest*,
                               ::csi::v1::GetPluginInfoResponse* response) override {
      response->set_name(driver_->options_.driver_name);
      response->set_vendor_version(BuildVersion());
      (*response->mutable_manifest())["revision"] = BuildRevision();
      return grpc::Status::OK;
    }
    grpc::Status GetPluginCapabilities(grpc::ServerContext*,
                                       const ::csi::v1::GetPluginCapabilitiesRequest*,
                                       ::csi::v1::GetPluginCapabilitiesResponse*) override {
      return grpc::Status::OK;  // node only: no controller service, no topology
    }
    grpc::Status Probe(grpc::ServerContext*, const ::csi::v1::ProbeRequest*,
                       ::csi::v1::ProbeResponse* response) override {
      response->mutable_ready()->set_value(true);
      return grpc::Status::OK;
    }

   private:
    CsiDriver* driver_;
  };

  class Node final : public ::csi::v1::Node::Service {
   public:
    explicit Node(CsiDriver* driver) : driver_(driver) {}
    grpc::Status NodePublishVolume(grpc::ServerContext*,
                                   const ::csi::v1::NodePublishVolumeRequest* request,
                                   ::csi::v1::NodePublishVolumeResponse*) override {
      return driver_->Publish(*request);
    }
    grpc::Status NodeUnpublishVolume(grpc::ServerContext*,
                                     const ::csi::v1::NodeUnpublishVolumeRequest* request,
                                     ::csi::v1::NodeUnpublishVolumeResponse*) override {
      return driver_->Unpublish(*request);
    }
    grpc::Status NodeGetCapabilities(grpc::ServerContext*,
                                     const ::csi::v1::NodeGetCapabilitiesRequest*,
                                     ::csi::v1::NodeGetCapabilitiesResponse*) override {
      return grpc::Status::OK;  // no staging, no stats
    }
    grpc::Status NodeGetInfo(grpc::ServerContext*, const ::csi::v1::NodeGetInfoRequest*,
                             ::csi::v1::NodeGetInfoResponse* response) override {
      response->set_node_id(driver_->options_.node_name);
      return grpc::Status::OK;
    }

   private:
    CsiDriver* driver_;
  };

  class Registration final : public ::pluginregistration::Registration::Service {
   public:
    explicit Registration(CsiDriver* driver) : driver_(driver) {}
    grpc::Status GetInfo(grpc::ServerContext*, const ::pluginregistration::InfoRequest*,
                         ::pluginregistration::PluginInfo* info) override {
      info->set_type("CSIPlugin");
      info->set_name(driver_->options_.driver_name);
      info->set_endpoint(UnixSocketPath(driver_->options_.endpoint));
      info->add_supported_versions("1.0.0");
      return grpc::Status::OK;
    }
    grpc::Status NotifyRegistrationStatus(
        grpc::ServerContext*, const ::pluginregistration::RegistrationStatus* status,
        ::pluginregistration::RegistrationStatusResponse*) override {
      driver_->SetRegistered(status->plugin_registered(), status->error());
      return grpc::Status::OK;
    }

   private:
    CsiDriver* driver_;
  };

  explicit Services(CsiDriver* driver) : identity(driver), node(driver), registration(driver) {}
  Identity identity;
  Node node;
  Registration registration;
};

CsiDriver::CsiDriver(CsiDriverOptions options)
    : options_(std::move(options)),
      http_(HttpServerOptions{.metrics = &metrics_, .metric_prefix = "ncclwatch_csi"}) {
  AddProcessMetrics(metrics_);
  AddBuildInfo(metrics_, "ncclwatch_csi");
  registered_gauge_ = metrics_.GetGauge(
      "ncclwatch_csi_registered",
      "1 once the kubelet has confirmed the driver's registration (always 1 without one).");
  published_gauge_ =
      metrics_.GetGauge("ncclwatch_csi_volumes_published",
                        "Volumes this driver process has mounted into pods and not yet unmounted.");
  // The series exist from the start, at 0, so that rates and alerts see them.
  for (const char* dir : {kPluginDir, kSocketDir}) {
    for (const char* result : {"ok", "refused", "failed"}) PublishCounter(dir, result);
  }
  for (const char* result : {"ok", "refused", "failed"}) UnpublishCounter(result);
}

CsiDriver::~CsiDriver() { Stop(); }

Counter* CsiDriver::PublishCounter(const std::string& dir, const std::string& result) {
  return metrics_.GetCounter(
      "ncclwatch_csi_publish_total",
      "NodePublishVolume calls by volume dir (plugin, socket, or other for a bad one) and result: "
      "ok, refused (the pod's volume is wrong: its events say why), failed (the node: mount "
      "error).",
      {{"dir", dir}, {"result", result}});
}

Counter* CsiDriver::UnpublishCounter(const std::string& result) {
  return metrics_.GetCounter("ncclwatch_csi_unpublish_total",
                             "NodeUnpublishVolume calls by result: ok, refused, failed.",
                             {{"result", result}});
}

std::string CsiDriver::registration_socket() const {
  if (options_.registration_dir.empty()) return "";
  return options_.registration_dir + "/" + options_.driver_name + "-reg.sock";
}

absl::Status CsiDriver::Start() {
  if (options_.endpoint.rfind("unix:", 0) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--endpoint=", options_.endpoint, " is not a unix socket (unix:///path)"));
  }
  for (const std::string* dir : {&options_.socket_dir, &options_.plugin_dir}) {
    std::error_code ec;
    std::filesystem::create_directories(*dir, ec);
    if (ec || !std::filesystem::is_directory(*dir)) {
      return absl::UnavailableError(
          absl::StrFormat("cannot create source directory %s: %s", *dir,
                          ec ? ec.message() : "exists and is not a directory"));
    }
  }
  services_ = std::make_unique<Services>(this);
  const std::string csi_path = UnixSocketPath(options_.endpoint);
  if (absl::Status s = PrepareUnixSocket(csi_path, 0750); !s.ok()) return s;
  if (absl::Status s = StageSources(std::filesystem::path(csi_path).parent_path().string());
      !s.ok()) {
    return s;
  }
  grpc::ServerBuilder csi_builder;
  csi_builder.AddListeningPort("unix://" + csi_path, grpc::InsecureServerCredentials());
  csi_builder.RegisterService(&services_->identity);
  csi_builder.RegisterService(&services_->node);
  csi_builder.SetMaxReceiveMessageSize(1 << 20);
  csi_server_ = csi_builder.BuildAndStart();
  if (!csi_server_) return absl::UnavailableError(absl::StrCat("cannot listen on ", csi_path));

  if (!options_.registration_dir.empty()) {
    // The kubelet's plugin watcher finds the socket by its appearance in the directory: a stale
    // one of a killed driver is replaced, so that the watcher sees a new one.
    const std::string reg_path = registration_socket();
    if (absl::Status s = PrepareUnixSocket(reg_path, 0750); !s.ok()) {
      Stop();
      return s;
    }
    grpc::ServerBuilder reg_builder;
    reg_builder.AddListeningPort("unix://" + reg_path, grpc::InsecureServerCredentials());
    reg_builder.RegisterService(&services_->registration);
    reg_builder.SetMaxReceiveMessageSize(64 << 10);
    registration_server_ = reg_builder.BuildAndStart();
    if (!registration_server_) {
      Stop();
      return absl::UnavailableError(absl::StrCat("cannot listen on ", reg_path));
    }
  } else {
    registered_.store(true, std::memory_order_release);
    registered_gauge_->Set(1);
  }

  http_.Get("/metrics", [this](const HttpRequest&, HttpResponse& res) {
    res.Set(metrics_.Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  http_.Probe("/healthz",
              [](const HttpRequest&, HttpResponse& res) { res.Set("ok\n", "text/plain"); });
  http_.Probe("/readyz", [this](const HttpRequest&, HttpResponse& res) {
    if (registered()) {
      res.Set("ok\n", "text/plain");
    } else {
      res.status = 503;
      res.Set(absl::StrCat("waiting for the kubelet to register ", options_.driver_name, " (",
                           registration_socket(), ")\n"),
              "text/plain");
    }
  });
  absl::StatusOr<int> port = http_.Start("0.0.0.0", options_.http_port);
  if (!port.ok()) {
    Stop();
    return port.status();
  }
  http_port_ = *port;
  return absl::OkStatus();
}

void CsiDriver::Stop() {
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(2);
  // The staging mounts go; the volumes bound from them stay (they are mounts of their own).
  for (std::string* stage : {&plugin_stage_, &socket_stage_}) {
    if (!stage->empty()) umount2(stage->c_str(), MNT_DETACH);
    stage->clear();
  }
  if (registration_server_) {
    registration_server_->Shutdown(deadline);
    registration_server_.reset();
    unlink(registration_socket().c_str());
  }
  if (csi_server_) {
    csi_server_->Shutdown(deadline);
    csi_server_.reset();
  }
  http_.Stop();
  http_port_ = 0;
}

void CsiDriver::SetRegistered(bool registered, const std::string& error) {
  registered_.store(registered, std::memory_order_release);
  registered_gauge_->Set(registered ? 1 : 0);
  if (registered) {
    LogInfo("the kubelet registered %s", options_.driver_name);
  } else {
    LogError("the kubelet refused to register %s: %s", options_.driver_name, error);
  }
}

absl::Status CsiDriver::StageSources(const std::string& state_dir) {
  // A remount changes only the mount it is made on, never its copies in other mount namespaces:
  // the host's copy of a published volume (the one the container runtime hands the pod) would
  // keep the flags it was created with. So the flags are set first, on a private staging mount of
  // each source, and every published volume is a bind of that staging mount, which copies them.
  for (const auto& [dir, source] : {std::pair{std::string(kPluginDir), options_.plugin_dir},
                                    std::pair{std::string(kSocketDir), options_.socket_dir}}) {
    const std::string stage = state_dir + "/stage-" + dir;
    if (mkdir(stage.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::UnavailableError(
          absl::StrFormat("cannot create staging directory %s: %s", stage, ErrnoText(errno)));
    }
    // A driver that was killed in the same mount namespace left its staging mount there.
    if (!IsMountPoint(stage)) {
      if (mount(source.c_str(), stage.c_str(), nullptr, MS_BIND, nullptr) != 0) {
        return absl::UnavailableError(absl::StrFormat(
            "cannot bind %s onto %s: %s (the driver needs CAP_SYS_ADMIN: a privileged container)",
            source, stage, ErrnoText(errno)));
      }
      // Private: the staging mount itself never shows on the host. Then the flags: read-only,
      // no set-uid, no devices; no executables in the socket directory (the plugin directory
      // keeps exec: NCCL maps the plugin).
      unsigned long flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV;
      if (dir == kSocketDir) flags |= MS_NOEXEC;
      if (mount(nullptr, stage.c_str(), nullptr, MS_PRIVATE, nullptr) != 0 ||
          mount(nullptr, stage.c_str(), nullptr, flags, nullptr) != 0) {
        const int err = errno;
        umount2(stage.c_str(), MNT_DETACH);
        return absl::UnavailableError(
            absl::StrFormat("cannot make %s read-only: %s", stage, ErrnoText(err)));
      }
    }
    (dir == kPluginDir ? plugin_stage_ : socket_stage_) = stage;
  }
  return absl::OkStatus();
}

grpc::Status CsiDriver::CheckTarget(const std::string& target) const {
  if (target.empty()) return Invalid("target_path is missing");
  const std::string pods = options_.kubelet_dir + "/pods/";
  const std::filesystem::path p(target);
  bool clean = p.is_absolute();
  for (const auto& part : p.relative_path()) {
    if (part == "." || part == "..") clean = false;
  }
  // <kubelet>/pods/<pod uid>/volumes/kubernetes.io~csi/<volume>/mount, as the kubelet makes it.
  std::vector<std::string> parts;
  if (clean && target.rfind(pods, 0) == 0) {
    parts = absl::StrSplit(target.substr(pods.size()), '/');
  }
  if (parts.size() != 5 || parts[0].empty() || parts[1] != "volumes" ||
      parts[2] != "kubernetes.io~csi" || parts[3].empty() || parts[4] != "mount") {
    return Invalid(absl::StrFormat(
        "target_path %s is not a pod volume directory %s<pod uid>/volumes/kubernetes.io~csi/"
        "<volume>/mount (is --kubelet-dir the kubelet's --root-dir?)",
        absl::CEscape(target), pods));
  }
  // No symbolic link below the kubelet's pods directory: the directory the kubelet made is the
  // one mounted onto. (The pods directory itself may lie behind one.)
  const std::string parent = std::filesystem::path(target).parent_path().string();
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::canonical(parent, ec);
  std::error_code pods_ec;
  const std::filesystem::path expected =
      std::filesystem::canonical(pods, pods_ec) / parts[0] / parts[1] / parts[2] / parts[3];
  if (!ec && !pods_ec && real != expected) {
    return Invalid(absl::StrFormat("target_path %s goes through a symbolic link (to %s)",
                                   absl::CEscape(target), absl::CEscape(real.string())));
  }
  return grpc::Status::OK;
}

grpc::Status CsiDriver::Publish(const ::csi::v1::NodePublishVolumeRequest& request) {
  const auto& context = request.volume_context();
  const auto dir_it = context.find(kDirAttribute);
  std::string dir = dir_it == context.end() ? "" : dir_it->second;
  const std::string label = (dir == kPluginDir || dir == kSocketDir) ? dir : "other";
  auto refuse = [&](const std::string& why) {
    PublishCounter(label, "refused")->Increment();
    LogWarning("refused volume %s for pod %s/%s: %s", request.volume_id(),
               context.count("csi.storage.k8s.io/pod.namespace")
                   ? context.at("csi.storage.k8s.io/pod.namespace")
                   : "?",
               context.count("csi.storage.k8s.io/pod.name")
                   ? context.at("csi.storage.k8s.io/pod.name")
                   : "?",
               why);
    return Invalid(why);
  };
  if (request.volume_id().empty()) return refuse("volume_id is missing");
  if (grpc::Status s = CheckTarget(request.target_path()); !s.ok()) {
    return refuse(s.error_message());
  }
  if (!request.has_volume_capability()) return refuse("volume_capability is missing");
  const auto& capability = request.volume_capability();
  if (capability.has_block()) {
    return refuse(absl::StrCat(options_.driver_name, " offers directories, not block devices"));
  }
  if (capability.mount().mount_flags_size() > 0) {
    return refuse(absl::StrCat(options_.driver_name,
                               " takes no mount options: its volumes are always read-only"));
  }
  if (!request.readonly()) {
    return refuse(absl::StrCat(options_.driver_name,
                               " volumes are shared by every pod of the node: set readOnly: true "
                               "on the pod's csi volume"));
  }
  const auto eph = context.find(kEphemeralKey);
  if (eph == context.end() || eph->second != "true") {
    return refuse(absl::StrCat(options_.driver_name,
                               " serves ephemeral inline volumes only (a csi: volume in the pod "
                               "spec, not a PersistentVolume)"));
  }
  for (const auto& [key, value] : context) {
    if (key != kDirAttribute && !absl::StartsWith(key, kKubeletContextPrefix)) {
      return refuse(absl::StrFormat("unknown volumeAttributes key \"%s\": the only one is %s",
                                    absl::CEscape(key), kDirAttribute));
    }
  }
  if (dir != kPluginDir && dir != kSocketDir) {
    return refuse(absl::StrFormat(
        "volumeAttributes %s=%s: must be %s (the NCCL profiler plugin) or %s (the agent's socket)",
        kDirAttribute, dir.empty() ? "(missing)" : "\"" + absl::CEscape(dir) + "\"", kPluginDir,
        kSocketDir));
  }
  const std::string& target = request.target_path();
  const auto uid = context.find("csi.storage.k8s.io/pod.uid");
  if (uid != context.end() &&
      target.rfind(options_.kubelet_dir + "/pods/" + uid->second + "/", 0) != 0) {
    return refuse(absl::StrFormat("target_path %s is not in the directory of pod %s",
                                  absl::CEscape(target), absl::CEscape(uid->second)));
  }
  const std::string& source = dir == kPluginDir ? plugin_stage_ : socket_stage_;
  // One volume operation at a time: the kubelet serialises those of a volume, but nothing here
  // relies on it (two publishes of one target must not stack two mounts).
  MutexLock op_lock(&op_mu_);
  auto fail = [&](const std::string& what) {
    PublishCounter(label, "failed")->Increment();
    LogError("volume %s: %s", request.volume_id(), what);
    return grpc::Status(grpc::StatusCode::INTERNAL, what);
  };

  if (mkdir(target.c_str(), 0750) != 0 && errno != EEXIST) {
    const int err = errno;
    return fail(absl::StrFormat("cannot create %s: %s", target, ErrnoText(err)));
  }
  if (IsMountPoint(target)) {  // published before: the kubelet retried
    PublishCounter(label, "ok")->Increment();
    return grpc::Status::OK;
  }
  // A bind of the staging mount: read-only (and the rest) from the moment it exists, here and in
  // every copy the kubelet's propagation makes.
  if (mount(source.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    const int err = errno;
    return fail(absl::StrFormat("cannot bind %s onto %s: %s", source, target, ErrnoText(err)));
  }
  published_.insert(target);
  published_gauge_->Set(static_cast<double>(published_.size()));
  PublishCounter(label, "ok")->Increment();
  LogInfo("published %s (%s) to pod %s/%s at %s",
          dir == kPluginDir ? options_.plugin_dir : options_.socket_dir, dir,
          context.count("csi.storage.k8s.io/pod.namespace")
              ? context.at("csi.storage.k8s.io/pod.namespace")
              : "?",
          context.count("csi.storage.k8s.io/pod.name") ? context.at("csi.storage.k8s.io/pod.name")
                                                       : "?",
          target);
  return grpc::Status::OK;
}

grpc::Status CsiDriver::Unpublish(const ::csi::v1::NodeUnpublishVolumeRequest& request) {
  const std::string& target = request.target_path();
  if (request.volume_id().empty() || !CheckTarget(target).ok()) {
    UnpublishCounter("refused")->Increment();
    return request.volume_id().empty() ? Invalid("volume_id is missing") : CheckTarget(target);
  }
  MutexLock op_lock(&op_mu_);
  auto fail = [&](const std::string& what) {
    UnpublishCounter("failed")->Increment();
    LogError("%s", what);
    return grpc::Status(grpc::StatusCode::INTERNAL, what);
  };
  // Every stacked mount comes off (one, unless something else mounted there too).
  while (IsMountPoint(target)) {
    if (umount2(target.c_str(), 0) == 0) continue;
    const int err = errno;
    // Busy (a process of the pod still holds it): detach now, freed when the last user goes.
    if (err != EBUSY || umount2(target.c_str(), MNT_DETACH) != 0) {
      const int detach_err = err == EBUSY ? errno : err;
      return fail(absl::StrFormat("cannot unmount %s: %s", target, ErrnoText(detach_err)));
    }
  }
  if (rmdir(target.c_str()) != 0 && errno != ENOENT) {
    const int err = errno;
    return fail(absl::StrFormat("cannot remove %s: %s", target, ErrnoText(err)));
  }
  published_.erase(target);
  published_gauge_->Set(static_cast<double>(published_.size()));
  UnpublishCounter("ok")->Increment();
  return grpc::Status::OK;
}

}  // namespace ncclwatch::agent::csi

#include "agent/pod_resources.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/rpc/channel.h"
#include "common/strings.h"
#include "grpcpp/grpcpp.h"
#include "k8s/podresources_v1.grpc.pb.h"

namespace ncclwatch::agent {

// The kubelet's package is plain "v1", which inside namespace ncclwatch would find ncclwatch::v1
// first: its types are always spelled ::v1::... here.
struct PodResolver::Kubelet {
  explicit Kubelet(const std::string& socket_path)
      // Plaintext, as the kubelet serves it: the socket is local and only root can connect.
      // Reconnects quickly once a restarted kubelet is back (gRPC's default backoff reaches 2 min).
      : channel(ReconnectingChannel("unix://" + socket_path, 1000)),
        stub(::v1::PodResourcesLister::NewStub(channel)) {}

  absl::Status List(absl::Duration timeout, ::v1::ListPodResourcesResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    // A socket that exists but is not served yet (kubelet restarting): wait for it within the
    // deadline instead of failing at once while the channel backs off.
    context.set_wait_for_ready(true);
    {
      ncclwatch::MutexLock lock(&mu);
      if (stopped) return absl::CancelledError("pod resolver stopped");
      in_flight = &context;
    }
    grpc::Status status = stub->List(&context, ::v1::ListPodResourcesRequest(), response);
    {
      ncclwatch::MutexLock lock(&mu);
      in_flight = nullptr;
    }
    if (status.ok()) return absl::OkStatus();
    // gRPC and absl share the canonical code numbers.
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }

  void Stop() {
    ncclwatch::MutexLock lock(&mu);
    stopped = true;
    if (in_flight != nullptr) in_flight->TryCancel();
  }

  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<::v1::PodResourcesLister::Stub> stub;
  ncclwatch::Mutex mu;
  grpc::ClientContext* in_flight ABSL_GUARDED_BY(mu) = nullptr;
  bool stopped ABSL_GUARDED_BY(mu) = false;
};

namespace {

constexpr char kFailures[] = "ncclwatch_agent_pod_resources_refresh_failures_total";
constexpr char kFailuresHelp[] =
    "Failed calls to the kubelet's pod-resources API, by reason (the last answer stays in use).";

// The failure reasons, pre-registered so that dashboards see zeros rather than gaps.
constexpr const char* kReasons[] = {"socket_missing",    "permission_denied", "unavailable",
                                    "deadline_exceeded", "unimplemented",     "other"};

std::string FailureReason(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return "socket_missing";
    case absl::StatusCode::kPermissionDenied:
      return "permission_denied";
    case absl::StatusCode::kUnavailable:
      return "unavailable";
    case absl::StatusCode::kDeadlineExceeded:
      return "deadline_exceeded";
    case absl::StatusCode::kUnimplemented:
      return "unimplemented";
    default:
      return "other";
  }
}

// Checked before each call so that the two common misconfigurations get a status (and a log line)
// that says what is wrong, rather than gRPC's generic "failed to connect".
absl::Status CheckSocket(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat(
          "no socket at ", path,
          ": not a Kubernetes node, or the kubelet's pod-resources directory is not mounted"));
    }
    if (err == EACCES) {
      return absl::PermissionDeniedError(absl::StrCat("cannot reach ", path, ": ", strerror(err)));
    }
    return absl::UnavailableError(absl::StrCat("stat ", path, ": ", strerror(err)));
  }
  // Connecting to a unix socket needs write permission on it; the kubelet's is root-only.
  if (access(path.c_str(), W_OK) != 0 && errno == EACCES) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, " is not writable by this process (the kubelet's socket is root-only)"));
  }
  return absl::OkStatus();
}

// "<uuid>::<replica>" (NVIDIA's time-slicing) names the GPU "<uuid>".
std::string_view NormaliseDeviceId(std::string_view id) {
  const size_t replica = id.find("::");
  return replica == std::string_view::npos ? id : id.substr(0, replica);
}

}  // namespace

bool IsGpuResource(std::string_view resource_name, const std::vector<std::string>& patterns) {
  for (const std::string& p : patterns) {
    if (!p.empty() && p.back() == '*') {
      if (resource_name.substr(0, p.size() - 1) == std::string_view(p).substr(0, p.size() - 1)) {
        return true;
      }
    } else if (resource_name == p) {
      return true;
    }
  }
  return false;
}

PodResolver::PodResolver(PodResolverOptions options, MetricRegistry& metrics)
    : options_(std::move(options)),
      kubelet_(std::make_unique<Kubelet>(options_.socket_path)),
      metrics_(metrics),
      refreshes_total_(metrics.GetCounter("ncclwatch_agent_pod_resources_refreshes_total",
                                          "Calls made to the kubelet's pod-resources API.")),
      gpus_gauge_(metrics.GetGauge("ncclwatch_agent_pod_resources_gpus",
                                   "GPUs whose pod is known from the kubelet's last answer.")),
      shared_gauge_(metrics.GetGauge(
          "ncclwatch_agent_pod_resources_shared_gpus",
          "GPUs the kubelet lists for several containers (time-slicing): not attributed.")),
      last_success_(metrics.GetGauge(
          "ncclwatch_agent_pod_resources_last_success_timestamp_seconds",
          "Unix time of the last successful answer of the kubelet's pod-resources API.")),
      task_(
          options_.refresh_interval,
          [this] { RefreshNow().IgnoreError(); },  // counted and logged by Account
          /*run_first=*/true) {
  for (const char* reason : kReasons) {
    metrics.GetCounter(kFailures, kFailuresHelp, {{"reason", reason}});
  }
}

PodResolver::~PodResolver() { Stop(); }

void PodResolver::Start() { task_.Start(); }

void PodResolver::Stop() {
  kubelet_->Stop();  // first: a call in flight ends now, and any later one at once
  task_.Stop();
}

absl::Status PodResolver::RefreshNow() {
  ncclwatch::MutexLock refresh_lock(&refresh_mu_);
  ::v1::ListPodResourcesResponse response;
  absl::Status status = CheckSocket(options_.socket_path);
  if (status.ok()) status = kubelet_->List(options_.call_timeout, &response);

  DeviceMap fresh;
  std::set<std::string> shared;
  if (status.ok()) {
    for (const ::v1::PodResources& pod : response.pod_resources()) {
      for (const ::v1::ContainerResources& container : pod.containers()) {
        for (const ::v1::ContainerDevices& devices : container.devices()) {
          if (!IsGpuResource(devices.resource_name(), options_.gpu_resources)) continue;
          for (const std::string& id : devices.device_ids()) {
            PodRef ref{pod.namespace_(), pod.name(), container.name(), devices.resource_name()};
            auto [it, inserted] = fresh.try_emplace(std::string(NormaliseDeviceId(id)), ref);
            const PodRef& owner = it->second;
            if (!inserted && (owner.pod_namespace != ref.pod_namespace || owner.pod != ref.pod ||
                              owner.container != ref.container)) {
              shared.insert(it->first);
            }
          }
        }
      }
    }
    for (const std::string& id : shared) fresh.erase(id);
  }

  size_t gpus;
  {
    ncclwatch::MutexLock map_lock(&map_mu_);
    if (status.ok()) map_.swap(fresh);  // the old snapshot is freed below, outside the lock
    gpus = map_.size();
  }
  // CANCELLED only comes from Stop(): the agent is shutting down, which is no failure to report.
  if (status.code() != absl::StatusCode::kCancelled) {
    Account(status, response.pod_resources_size(), gpus, shared.size());
  }
  {
    ncclwatch::MutexLock lock(&loop_mu_);
    ++refreshes_;
  }
  return status;
}

void PodResolver::Account(const absl::Status& status, int pods, size_t gpus, size_t shared) {
  refreshes_total_->Increment();
  const std::string state = status.ok() ? "ok" : FailureReason(status);
  if (status.ok()) {
    gpus_gauge_->Set(static_cast<double>(gpus));
    shared_gauge_->Set(static_cast<double>(shared));
    last_success_->Set(static_cast<double>(absl::ToUnixMicros(absl::Now())) * 1e-6);
  } else {
    metrics_.GetCounter(kFailures, kFailuresHelp, {{"reason", state}})->Increment();
  }
  // Once per state change: a node outside Kubernetes would otherwise log every interval forever.
  if (state == last_state_) return;
  last_state_ = state;
  if (status.ok()) {
    LogInfo("kubelet pod-resources: %d GPUs of %d pods attributed (%d shared GPUs left out)", gpus,
            pods, shared);
  } else if (gpus == 0) {
    LogWarning(
        "kubelet pod-resources: %s; reports carry no pod until it answers (retrying every %s)",
        status.ToString(), absl::FormatDuration(options_.refresh_interval));
  } else {
    LogWarning(
        "kubelet pod-resources: %s; %d GPUs keep the pod of its last answer (retrying every %s)",
        status.ToString(), gpus, absl::FormatDuration(options_.refresh_interval));
  }
}

std::optional<PodRef> PodResolver::Lookup(std::string_view gpu_uuid) const {
  if (gpu_uuid.empty()) return std::nullopt;
  ncclwatch::ReaderMutexLock lock(&map_mu_);
  auto it = map_.find(Av(gpu_uuid));
  if (it == map_.end()) return std::nullopt;
  return it->second;
}

size_t PodResolver::gpus() const {
  ncclwatch::ReaderMutexLock lock(&map_mu_);
  return map_.size();
}

uint64_t PodResolver::refreshes() const {
  ncclwatch::MutexLock lock(&loop_mu_);
  return refreshes_;
}

bool PodResolver::AwaitRefreshes(uint64_t n, absl::Duration timeout) const {
  ncclwatch::MutexLock lock(&loop_mu_);
  auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_mu_) { return refreshes_ >= n; };
  return loop_mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
}

}  // namespace ncclwatch::agent

// GPU -> (namespace, pod, container) attribution from the kubelet's pod-resources API.
//
// The kubelet serves, on a local unix socket, what it has allocated to every pod of the node
// (proto/k8s/podresources_v1.proto). With NVIDIA's device plugin the devices of resource
// nvidia.com/gpu (or nvidia.com/mig-<profile>) are GPU (MIG) UUIDs -- the same strings the plugin
// reports as RankIdentity.gpu_uuid (plugin/gpu_uuid.h) -- so the agent can stamp each report with
// the pod and container that own its GPU.
//
// A PodResolver keeps an immutable snapshot uuid -> PodRef, rebuilt from one List call every
// refresh interval on its own thread. When the kubelet cannot be asked (no socket outside
// Kubernetes, no permission, kubelet restarting) the last snapshot is kept, the failure is counted
// by reason, a line is logged when the state changes (not at every retry) and the resolver keeps
// trying: attribution is best effort and never stops the agent.
//
// Device ids are normalised before use: time-slicing replicas ("<uuid>::<n>") become "<uuid>". A
// GPU that the kubelet lists for more than one container (a time-sliced GPU shared by pods) has
// no single owner and is left out (Lookup returns nothing; counted in a gauge).
//
// Metrics (registered at construction):
//   ncclwatch_agent_pod_resources_refreshes_total               List calls made
//   ncclwatch_agent_pod_resources_refresh_failures_total{reason} socket_missing, permission_denied,
//                                                                unavailable, deadline_exceeded,
//                                                                unimplemented, other
//   ncclwatch_agent_pod_resources_gpus                          GPUs in the current snapshot
//   ncclwatch_agent_pod_resources_shared_gpus                   GPUs left out as shared
//   ncclwatch_agent_pod_resources_last_success_timestamp_seconds  unix time of the last good answer
//
// Thread safety: Lookup() may be called from any thread, concurrently with refreshes; it takes a
// reader lock for one hash lookup and copies the answer. RefreshNow() may run concurrently with
// the background thread (calls are serialised). Start() and Stop() are for the owning thread.
#ifndef NCCLWATCH_AGENT_POD_RESOURCES_H_
#define NCCLWATCH_AGENT_POD_RESOURCES_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "common/periodic_task.h"
#include "common/sync.h"

namespace ncclwatch::agent {

// Where a GPU is allocated.
struct PodRef {
  std::string pod_namespace;
  std::string pod;
  std::string container;
  std::string resource_name;  // e.g. "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"

  bool operator==(const PodRef&) const = default;
};

struct PodResolverOptions {
  // The kubelet's pod-resources socket (a hostPath mount in the agent's pod).
  std::string socket_path = "/var/lib/kubelet/pod-resources/kubelet.sock";
  absl::Duration refresh_interval = absl::Seconds(10);
  // Deadline of one List call.
  absl::Duration call_timeout = absl::Seconds(2);
  // Resource names whose devices are GPUs: an exact name, or a prefix followed by '*'.
  std::vector<std::string> gpu_resources = {"nvidia.com/gpu", "nvidia.com/mig-*"};
};

class PodResolver {
 public:
  PodResolver(PodResolverOptions options, MetricRegistry& metrics);
  ~PodResolver();  // Stop()
  PodResolver(const PodResolver&) = delete;
  PodResolver& operator=(const PodResolver&) = delete;

  // Starts the background thread: one refresh now, then one every refresh interval.
  void Start();
  // Stops the thread, cancelling a call in flight. Final: later refreshes fail with CANCELLED
  // (neither counted nor logged as failures).
  void Stop();

  // One List call, now, on the calling thread; on success the snapshot is replaced. Errors:
  // NOT_FOUND (no socket), PERMISSION_DENIED (socket not writable by this process), else the
  // call's gRPC status (UNAVAILABLE, DEADLINE_EXCEEDED, ...). Failures keep the old snapshot.
  absl::Status RefreshNow();

  // The pod and container that `gpu_uuid` ("GPU-..." or "MIG-...") is allocated to, per the latest
  // snapshot; nullopt when unknown, shared, or empty.
  std::optional<PodRef> Lookup(std::string_view gpu_uuid) const;

  size_t gpus() const;  // GPUs in the current snapshot
  // List calls completed (successful or not): tests wait on it instead of sleeping.
  uint64_t refreshes() const;
  // Blocks until refreshes() >= n or `timeout` passes; returns whether it got there.
  bool AwaitRefreshes(uint64_t n, absl::Duration timeout) const;

 private:
  struct Kubelet;  // the gRPC channel and stub, kept out of this header
  using DeviceMap = absl::flat_hash_map<std::string, PodRef>;

  // Records the outcome of one refresh: metrics, and a log line when the state changed.
  void Account(const absl::Status& status, int pods, size_t gpus, size_t shared)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(refresh_mu_);

  const PodResolverOptions options_;
  std::unique_ptr<Kubelet> kubelet_;
  MetricRegistry& metrics_;
  Counter* refreshes_total_;
  Gauge* gpus_gauge_;
  Gauge* shared_gauge_;
  Gauge* last_success_;

  // Serialises refreshes (the background thread and RefreshNow), acquired before map_mu_.
  ncclwatch::Mutex refresh_mu_;
  std::string last_state_ ABSL_GUARDED_BY(refresh_mu_);  // "ok" or the last failure reason

  mutable ncclwatch::Mutex map_mu_;
  DeviceMap map_ ABSL_GUARDED_BY(map_mu_);

  mutable ncclwatch::Mutex loop_mu_;
  uint64_t refreshes_ ABSL_GUARDED_BY(loop_mu_) = 0;
  PeriodicTask task_;  // last: refreshes now and every refresh interval
};

// Whether `resource_name` matches one of `patterns` (exact names, or prefixes ending in '*').
bool IsGpuResource(std::string_view resource_name, const std::vector<std::string>& patterns);

}  // namespace ncclwatch::agent

#endif  // NCCLWATCH_AGENT_POD_RESOURCES_H_

// Which physical GPU a CUDA ordinal of this process is, as far as the environment tells.
//
// The profiler ABI names no GPU, and the plugin does not call CUDA or NVML for it. Under Kubernetes
// with NVIDIA's device plugin, though, the container runtime receives the allocated devices as
// NVIDIA_VISIBLE_DEVICES=GPU-<uuid>[,GPU-<uuid>...] (MIG-<uuid> for MIG slices), and the agent can
// then find the pod that holds that UUID in the kubelet's pod-resources answer
// (agent/pod_resources.h). The plugin reports the UUID in RankIdentity.gpu_uuid.
//
// Rules, for CUDA ordinal i:
//   - CUDA_VISIBLE_DEVICES set: its entry i. A "GPU-"/"MIG-" entry is the answer (a UUID prefix,
//     which CUDA accepts, is completed when exactly one NVIDIA_VISIBLE_DEVICES UUID starts with
//     it); a number n selects NVIDIA_VISIBLE_DEVICES entry n when that is a UUID. Like CUDA, the
//     list ends at the first entry that is neither. Set but empty: no GPU.
//   - otherwise NVIDIA_VISIBLE_DEVICES entry i when that is a UUID.
//   - otherwise "" (unknown): bare metal, "all", indices, CDI device names.
//
// Caveat: mapping a position in NVIDIA_VISIBLE_DEVICES to a CUDA ordinal assumes the runtime lists
// the devices in the order CUDA enumerates them (PCI bus order for identical GPUs). That always
// holds for a container with one GPU. With several, the device plugin's order may differ and the
// UUID may name another GPU of the same container; the pod and container found from it are still
// right, since every UUID in the list was allocated to this container.
//
// Pure functions: the plugin reads the two variables once, at its first communicator init.
#ifndef NCCLWATCH_PLUGIN_GPU_UUID_H_
#define NCCLWATCH_PLUGIN_GPU_UUID_H_

#include <string>
#include <vector>

namespace ncclwatch::plugin {

// The UUID of every CUDA ordinal the environment describes, by ordinal ("" where unknown). The
// arguments are the variables' values, nullptr when unset.
std::vector<std::string> VisibleGpuUuids(const char* cuda_visible_devices,
                                         const char* nvidia_visible_devices);

// uuids[cuda_device], or "" when cuda_device is negative or beyond the list.
std::string GpuUuidOf(const std::vector<std::string>& uuids, int cuda_device);

}  // namespace ncclwatch::plugin

#endif  // NCCLWATCH_PLUGIN_GPU_UUID_H_

#include "plugin/gpu_uuid.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace ncclwatch::plugin {
namespace {

bool IsUuid(absl::string_view entry) {
  return absl::StartsWith(entry, "GPU-") || absl::StartsWith(entry, "MIG-");
}

std::vector<std::string> SplitList(const char* value) {
  std::vector<std::string> out;
  if (value == nullptr) return out;
  for (absl::string_view part : absl::StrSplit(value, ',')) {
    out.emplace_back(absl::StripAsciiWhitespace(part));
  }
  // "" splits into one empty entry: no device at all.
  if (out.size() == 1 && out[0].empty()) out.clear();
  return out;
}

// `entry` (a UUID or a prefix of one, as CUDA_VISIBLE_DEVICES may hold it) completed against the
// runtime's list: the kubelet knows full UUIDs only.
std::string CompleteUuid(const std::string& entry, const std::vector<std::string>& nvidia) {
  const std::string* match = nullptr;
  for (const std::string& n : nvidia) {
    if (!IsUuid(n) || !absl::StartsWith(n, entry)) continue;
    if (match != nullptr) return entry;  // ambiguous: CUDA itself would refuse it
    match = &n;
  }
  return match != nullptr ? *match : entry;
}

}  // namespace

std::vector<std::string> VisibleGpuUuids(const char* cuda_visible_devices,
                                         const char* nvidia_visible_devices) {
  const std::vector<std::string> nvidia = SplitList(nvidia_visible_devices);
  std::vector<std::string> uuids;
  if (cuda_visible_devices == nullptr) {
    for (const std::string& n : nvidia) uuids.push_back(IsUuid(n) ? n : "");
    return uuids;
  }
  for (const std::string& entry : SplitList(cuda_visible_devices)) {
    if (IsUuid(entry)) {
      uuids.push_back(CompleteUuid(entry, nvidia));
      continue;
    }
    int index = -1;
    // CUDA ignores everything from the first entry it cannot use, and so do we: no ordinal
    // reaches a device listed after it.
    if (!absl::SimpleAtoi(entry, &index) || index < 0) break;
    const bool known = index < static_cast<int>(nvidia.size()) && IsUuid(nvidia[index]);
    uuids.push_back(known ? nvidia[index] : "");
  }
  return uuids;
}

std::string GpuUuidOf(const std::vector<std::string>& uuids, int cuda_device) {
  if (cuda_device < 0 || cuda_device >= static_cast<int>(uuids.size())) return "";
  return uuids[cuda_device];
}

}  // namespace ncclwatch::plugin

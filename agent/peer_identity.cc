#include "agent/peer_identity.h"

#include <sys/socket.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "common/strings.h"

namespace ncclwatch::agent {
namespace {

bool IsHex(std::string_view s) {
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return !s.empty();
}

// A pod UID, 8-4-4-4-12 hex digits separated by '-' (cgroupfs) or '_' (systemd, which reserves
// '-' for nesting); returned in the dashed form.
std::optional<std::string> CanonicalUid(std::string_view text) {
  if (text.size() != 36) return std::nullopt;
  std::string uid(text);
  for (size_t i = 0; i < uid.size(); ++i) {
    const bool separator = i == 8 || i == 13 || i == 18 || i == 23;
    if (separator) {
      if (uid[i] != '-' && uid[i] != '_') return std::nullopt;
      uid[i] = '-';
    } else if (!std::isxdigit(static_cast<unsigned char>(uid[i]))) {
      return std::nullopt;
    }
  }
  return uid;
}

// The pod UID in one cgroup path segment: "pod<uid>" or "kubepods[-<qos>]-pod<uid>.slice".
std::optional<std::string> UidInSegment(std::string_view segment) {
  if (segment.ends_with(".slice")) segment.remove_suffix(6);
  const size_t at = segment.rfind("pod");
  if (at == std::string_view::npos) return std::nullopt;
  if (at != 0 && segment[at - 1] != '-') return std::nullopt;
  return CanonicalUid(segment.substr(at + 3));
}

// The container id in a path's last segment: "<64 hex>" or "<runtime>-<64 hex>.scope".
std::string ContainerInSegment(std::string_view segment) {
  if (segment.ends_with(".scope")) segment.remove_suffix(6);
  const size_t dash = segment.rfind('-');
  if (dash != std::string_view::npos) segment.remove_prefix(dash + 1);
  return segment.size() == 64 && IsHex(segment) ? std::string(segment) : std::string();
}

std::optional<CgroupPod> PodInPath(std::string_view path) {
  if (path.find("kubepods") == std::string_view::npos) return std::nullopt;
  std::vector<std::string_view> segments;
  while (!path.empty()) {
    const size_t slash = path.find('/');
    std::string_view segment = path.substr(0, slash);
    if (!segment.empty()) segments.push_back(segment);
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    std::optional<std::string> uid = UidInSegment(segments[i]);
    if (!uid) continue;
    CgroupPod pod{*std::move(uid), ""};
    if (i + 1 < segments.size()) pod.container_id = ContainerInSegment(segments.back());
    return pod;
  }
  return std::nullopt;
}

}  // namespace

std::optional<CgroupPod> PodFromCgroup(std::string_view cgroup_file) {
  // One line per hierarchy: "<id>:<controllers>:<path>". Every hierarchy places a container's
  // processes under the same pod, so the first line naming one answers.
  while (!cgroup_file.empty()) {
    const size_t newline = cgroup_file.find('\n');
    std::string_view line = cgroup_file.substr(0, newline);
    cgroup_file.remove_prefix(newline == std::string_view::npos ? cgroup_file.size() : newline + 1);
    const size_t first = line.find(':');
    const size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    if (std::optional<CgroupPod> pod = PodInPath(line.substr(second + 1))) return pod;
  }
  return std::nullopt;
}

std::optional<std::pair<std::string, PodName>> ParsePodLogDir(std::string_view name) {
  const size_t first = name.find('_');
  const size_t second = first == std::string_view::npos ? first : name.find('_', first + 1);
  if (second == std::string_view::npos || first == 0 || second == first + 1) return std::nullopt;
  // The kubelet writes the dashed form: one with underscores is not its directory.
  std::optional<std::string> uid = CanonicalUid(name.substr(second + 1));
  if (!uid || name.substr(second + 1) != *uid) return std::nullopt;
  return std::make_pair(*std::move(uid),
                        PodName{std::string(name.substr(0, first)),
                                std::string(name.substr(first + 1, second - first - 1))});
}

PodDirectory::PodDirectory(std::string dir, absl::Duration min_rescan)
    : dir_(std::move(dir)), min_rescan_(min_rescan) {}

void PodDirectory::Rescan() {
  scanned_ = absl::Now();
  std::error_code ec;
  std::filesystem::directory_iterator it(dir_, ec);
  if (ec) return;  // keep what was known: the directory is gone or unreadable for now
  absl::flat_hash_map<std::string, PodName> by_uid;
  for (const auto& entry : it) {
    if (std::optional<std::pair<std::string, PodName>> parsed =
            ParsePodLogDir(entry.path().filename().string())) {
      by_uid.insert_or_assign(std::move(parsed->first), std::move(parsed->second));
    }
  }
  by_uid_ = std::move(by_uid);
}

std::optional<PodName> PodDirectory::Find(const std::string& pod_uid) {
  ncclwatch::MutexLock lock(&mu_);
  auto it = by_uid_.find(pod_uid);
  if (it == by_uid_.end() && absl::Now() - scanned_ >= min_rescan_) {
    Rescan();
    it = by_uid_.find(pod_uid);
  }
  if (it == by_uid_.end()) return std::nullopt;
  return it->second;
}

std::optional<PeerIdentity> IdentifyPeer(int fd, const std::string& proc_dir) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof(cred)) {
    return std::nullopt;
  }
  PeerIdentity identity;
  identity.pid = cred.pid;
  identity.uid = cred.uid;
  identity.gid = cred.gid;
  if (cred.pid > 0 && !proc_dir.empty()) {
    std::ifstream in(proc_dir + "/" + std::to_string(cred.pid) + "/cgroup");
    std::stringstream text;
    if (in) text << in.rdbuf();
    if (in && !text.str().empty()) {
      identity.pod = PodFromCgroup(text.str());
    } else {
      identity.cgroup_unreadable = true;
    }
  }
  return identity;
}

std::string PeerTable::PeerName(int fd) { return "fd:" + std::to_string(fd); }

void PeerTable::Record(int fd, std::shared_ptr<const PeerIdentity> identity) {
  ncclwatch::MutexLock lock(&mu_);
  by_fd_.insert_or_assign(fd, Entry{std::move(identity), false});
}

std::optional<int> PeerTable::FdOf(std::string_view grpc_peer) {
  constexpr std::string_view kPrefix = "fd:";
  int fd = 0;
  if (!grpc_peer.starts_with(kPrefix) ||
      !absl::SimpleAtoi(Av(grpc_peer.substr(kPrefix.size())), &fd)) {
    return std::nullopt;
  }
  return fd;
}

std::shared_ptr<const PeerIdentity> PeerTable::Find(std::string_view grpc_peer) const {
  const std::optional<int> fd = FdOf(grpc_peer);
  if (!fd) return nullptr;
  ncclwatch::MutexLock lock(&mu_);
  auto it = by_fd_.find(*fd);
  return it == by_fd_.end() ? nullptr : it->second.identity;
}

std::shared_ptr<const PeerIdentity> PeerTable::OpenStream(std::string_view grpc_peer) {
  const std::optional<int> fd = FdOf(grpc_peer);
  if (!fd) return nullptr;
  ncclwatch::MutexLock lock(&mu_);
  auto it = by_fd_.find(*fd);
  if (it == by_fd_.end()) return nullptr;
  it->second.streamed = true;
  return it->second.identity;
}

bool PeerTable::Streamed(int fd) const {
  ncclwatch::MutexLock lock(&mu_);
  auto it = by_fd_.find(fd);
  return it != by_fd_.end() && it->second.streamed;
}

void PeerTable::Forget(int fd) {
  ncclwatch::MutexLock lock(&mu_);
  by_fd_.erase(fd);
}

}  // namespace ncclwatch::agent

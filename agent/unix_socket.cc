#include "agent/unix_socket.h"

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace ncclwatch::agent {

absl::StatusOr<mode_t> ParseFileMode(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const long mode = std::strtol(text.c_str(), &end, 8);
  if (text.empty() || *end != '\0' || mode < 0 || mode > 07777) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--%s=%s is not an octal file mode such as 0660", flag, text));
  }
  return static_cast<mode_t>(mode);
}

std::string UnixSocketPath(const std::string& address) {
  return address.substr(absl::StartsWith(address, "unix://") ? 7 : 5);
}

bool SocketIsLive(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool live = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return live;
}

absl::Status PrepareUnixSocket(const std::string& path, mode_t dir_mode) {
  std::filesystem::path p(path);
  std::error_code ec;
  // The error_code form: a directory that cannot be looked at (EACCES, ELOOP, ...) is an error to
  // report, not an exception that ends the agent.
  const bool dir_exists = !p.has_parent_path() || std::filesystem::exists(p.parent_path(), ec);
  if (ec) {
    return absl::UnavailableError(absl::StrFormat("cannot inspect socket directory %s: %s",
                                                  p.parent_path().string(), ec.message()));
  }
  if (!dir_exists) {
    std::filesystem::create_directories(p.parent_path(), ec);
    if (ec) {
      return absl::UnavailableError(absl::StrFormat("cannot create socket directory %s: %s",
                                                    p.parent_path().string(), ec.message()));
    }
    // create_directories applies the umask; the configured mode is what counts.
    if (chmod(p.parent_path().c_str(), dir_mode) != 0) {
      return absl::UnavailableError(
          absl::StrFormat("cannot chmod %s: %s", p.parent_path().string(), strerror(errno)));
    }
  }
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s exists and is not a socket; refusing to replace it", path));
    }
    // A socket someone still accepts on belongs to a live agent: taking it over would cut its
    // plugins off, and removing it at exit would leave the node without an agent socket. Only a
    // socket nobody listens on (a crashed agent's) is replaced.
    if (SocketIsLive(path)) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "%s is in use by a running agent (a connection to it succeeded); stop that agent first "
          "or give this one another --listen",
          path));
    }
    unlink(path.c_str());
  }
  return absl::OkStatus();
}

absl::Status SecureUnixSocket(const std::string& path, mode_t mode, const std::string& group) {
  if (!group.empty()) {
    gid_t gid = 0;
    if (!absl::SimpleAtoi(group, &gid)) {
      const struct group* g = getgrnam(group.c_str());
      if (g == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrFormat("--socket-group=%s: no such group", group));
      }
      gid = g->gr_gid;
    }
    if (chown(path.c_str(), static_cast<uid_t>(-1), gid) != 0) {
      return absl::UnavailableError(
          absl::StrFormat("cannot give %s to group %s: %s", path, group, strerror(errno)));
    }
  }
  if (chmod(path.c_str(), mode) != 0) {
    return absl::UnavailableError(absl::StrFormat("cannot chmod %s: %s", path, strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace ncclwatch::agent

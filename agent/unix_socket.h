// The plugins' unix socket: parsing its file modes, preparing its path before gRPC binds it, and
// giving the bound socket its mode and group.
//
// gRPC creates the socket file itself and refuses to bind over an existing one, so the agent
// removes a stale socket first (a previous agent that was killed leaves one behind), but never a
// file of another kind: a regular file or a directory at the path is a configuration mistake.
//
// Thread safety: the functions keep no state; concurrent calls on the same path race in the file
// system as any two processes would.
#ifndef NCCLWATCH_AGENT_UNIX_SOCKET_H_
#define NCCLWATCH_AGENT_UNIX_SOCKET_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ncclwatch::agent {

// Parses `text`, the value of flag --`flag`, as an octal file mode (e.g. "0660" or "660"; at
// most 07777). InvalidArgument "--<flag>=<text> is not an octal file mode such as 0660" otherwise.
absl::StatusOr<mode_t> ParseFileMode(const std::string& flag, const std::string& text);

// The file path of a gRPC unix address: "unix:///run/x.sock" -> "/run/x.sock", "unix:x.sock" ->
// "x.sock". `address` must start with "unix:".
std::string UnixSocketPath(const std::string& address);

// Makes `path` ready for gRPC to bind:
//  - when its directory does not exist, creates it (and any missing parents) and gives the
//    directory itself `dir_mode` (an existing directory is left as it is); Unavailable
//    "cannot create socket directory ..." or "cannot chmod ..." on failure;
//  - removes a socket file found at `path` that nobody accepts on (a crashed agent's);
//  - refuses a live one, without touching it: AlreadyExists "<path> is in use by a running
//    agent ..." (never a takeover);
//  - refuses any other kind of file there, without touching it: FailedPrecondition
//    "<path> exists and is not a socket; refusing to replace it" (a symbolic link, even to a
//    socket, is refused too).
absl::Status PrepareUnixSocket(const std::string& path, mode_t dir_mode);

// Whether something accepts connections on the unix socket at `path`.
bool SocketIsLive(const std::string& path);

// Gives the socket at `path` (once gRPC created it) the group `group`, a name or a numeric gid
// (empty: unchanged), then the permissions `mode`. Errors: InvalidArgument
// "--socket-group=<group>: no such group" for an unknown name; Unavailable when chown or chmod
// fails (e.g. the agent is not a member of the group, or `path` does not exist).
absl::Status SecureUnixSocket(const std::string& path, mode_t mode, const std::string& group);

}  // namespace ncclwatch::agent

#endif  // NCCLWATCH_AGENT_UNIX_SOCKET_H_

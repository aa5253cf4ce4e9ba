// Small pieces every daemon needs: termination signals, readiness notification, an HTTP server.
#ifndef NCCLWATCH_COMMON_DAEMON_H_
#define NCCLWATCH_COMMON_DAEMON_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/http_server.h"

namespace ncclwatch {

// Blocks SIGTERM, SIGINT and SIGPIPE in the calling thread; call first thing in main() so every
// thread created afterwards inherits the mask. Then WaitForTerminationSignal() returns the signal.
void BlockTerminationSignals();
int WaitForTerminationSignal();

// Turns off Abseil's lock-order graph, which Debian's Abseil (built without NDEBUG) keeps on in
// every process: each Mutex lock and unlock then looks itself up in one process-wide graph,
// 1-2 % of the aggregator's CPU at 16,384 ranks, gRPC's own locks included. The daemons call it
// at start; tests keep the checks, and clang's thread-safety analysis checks lock use when
// building.
void DisableLockOrderChecks();

// Writes `line` plus a newline to file descriptor `fd` and closes it (no-op for fd < 0). Lets a
// parent process (tests, scripts) wait for readiness by reading a pipe instead of sleeping.
void NotifyReady(int fd, const std::string& line);

// Whether `host` (a --listen-host value) only accepts connections from this machine: "localhost",
// an IPv4 address in 127.0.0.0/8, or "::1" (bracketed or not). 0.0.0.0, "::", a hostname or any
// other address is reachable from elsewhere.
bool IsLoopbackHost(const std::string& host);

// A local address other machines could reach: the first non-loopback IPv4 address of an interface
// that is up, or "127.0.0.1" when the machine has none.
std::string ReachableIpv4Address();

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_DAEMON_H_

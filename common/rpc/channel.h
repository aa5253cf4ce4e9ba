// Client channels between ncclwatch's own components (plugin -> agent, agent -> aggregator).
#ifndef NCCLWATCH_COMMON_RPC_CHANNEL_H_
#define NCCLWATCH_COMMON_RPC_CHANNEL_H_

#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"

namespace ncclwatch {

// A channel to `target` that reconnects within `max_backoff_ms` of its server coming back.
// gRPC's default reconnect backoff grows to two minutes during an outage, far longer than a
// restart of the agent or aggregator takes, and data would wait for it. Plaintext unless
// `credentials` are given; `tls_server_name`, when set, is the name verified in the server's
// certificate instead of the target's host.
inline std::shared_ptr<grpc::Channel> ReconnectingChannel(
    const std::string& target, int max_backoff_ms,
    std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr,
    const std::string& tls_server_name = "") {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_backoff_ms);
  if (!tls_server_name.empty()) args.SetSslTargetNameOverride(tls_server_name);
  if (!credentials) credentials = grpc::InsecureChannelCredentials();
  return grpc::CreateCustomChannel(target, credentials, args);
}

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_RPC_CHANNEL_H_

// Client channels between ncclwatch's own components (plugin -> agent, agent -> aggregator).
#ifndef NCCLWATCH_PROTO_CHANNEL_H_
#define NCCLWATCH_PROTO_CHANNEL_H_

#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"

namespace ncclwatch {

// An insecure channel to `target` that reconnects within `max_backoff_ms` of its server coming
// back. gRPC's default reconnect backoff grows to two minutes during an outage, far longer than a
// restart of the agent or aggregator takes, and data would wait for it.
inline std::shared_ptr<grpc::Channel> ReconnectingChannel(const std::string& target,
                                                          int max_backoff_ms) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_backoff_ms);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

}  // namespace ncclwatch

#endif  // NCCLWATCH_PROTO_CHANNEL_H_

// gRPC's own log lines (its errors, e.g. a port it cannot bind) written through common/log.h, so
// that a daemon's stderr has one format throughout: text lines, or one JSON object a line with
// --log-format json. Call once at start-up, after the log format is set.
#ifndef NCCLWATCH_COMMON_RPC_GRPC_LOG_H_
#define NCCLWATCH_COMMON_RPC_GRPC_LOG_H_

namespace ncclwatch {

void RouteGrpcLogs();

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_RPC_GRPC_LOG_H_

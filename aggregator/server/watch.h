// The Query API's Watch stream: every detection event, as it is stored, to one client.
#ifndef NCCLWATCH_AGGREGATOR_SERVER_WATCH_H_
#define NCCLWATCH_AGGREGATOR_SERVER_WATCH_H_

#include "aggregator/ingest/event_bus.h"
#include "common/metrics.h"
#include "grpcpp/grpcpp.h"
#include "ncclwatch/v1/query.pb.h"

namespace ncclwatch::aggregator {

// Starts streaming the events published on `bus` to the caller of `context`. Events are queued
// (bounded: a slow client loses the oldest, counted in `dropped`; ingest never waits for it) and
// written one at a time. The reactor deletes itself when the call ends. `bus` and `dropped`
// outlive every stream.
grpc::ServerWriteReactor<ncclwatch::v1::Event>* StartWatch(EventBus& bus, Counter* dropped);

// A Watch refused at the door: finishes at once with `status`.
grpc::ServerWriteReactor<ncclwatch::v1::Event>* RefuseWatch(const grpc::Status& status);

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_SERVER_WATCH_H_

// ncclwatch-aggregator: the central service. Takes batches from the node agents, stores them in
// RocksDB, correlates the ranks of every communicator, flags slow ranks, and serves the gRPC Query
// API plus HTTP /metrics, /federate and /healthz. Its flags and checks: aggregator_flags.h.
#include "aggregator/server/aggregator_flags.h"

int main(int argc, char** argv) { return ncclwatch::aggregator::AggregatorMain(argc, argv); }

// The gRPC metadata of a sharded Query service (aggregator/server/shard_router.h), shared by the
// aggregators and the CLI.
#ifndef NCCLWATCH_COMMON_RPC_SHARD_METADATA_H_
#define NCCLWATCH_COMMON_RPC_SHARD_METADATA_H_

namespace ncclwatch {

// Marks a Query call one aggregator forwarded to another: it is answered from the receiver's own
// state and never forwarded again.
inline constexpr char kShardHopHeader[] = "ncclwatch-shard-hop";
// Trailing metadata of an answer about every job: the aggregators (comma-separated names) that
// did not answer, so their jobs are missing.
inline constexpr char kUnreachableTrailer[] = "ncclwatch-unreachable";

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_RPC_SHARD_METADATA_H_

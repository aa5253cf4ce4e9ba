// Arithmetic on NCCL operations shared by the plugin and the aggregator: datatype sizes, message
// sizes, NCCL Inspector's message-size bucket labels, and the bus-bandwidth conventions of
// nccl-tests (see docs/wire-format.md). Pure functions, no allocation except where a std::string
// is returned; safe to call from any thread.
#ifndef NCCLWATCH_COMMON_OP_MATH_H_
#define NCCLWATCH_COMMON_OP_MATH_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ncclwatch {

// Bytes per element of an NCCL datatype string ("ncclFloat32" -> 4); 0 when unknown
// (NCCL reports ncclUint8 as "Unknown", so an unknown type of a known op counts as 1 byte there).
size_t DatatypeSize(std::string_view datatype);

// The operation's message size in bytes as NCCL Inspector defines it: count x typesize.
// For AllGather and Broadcast NCCL already reports a byte count with "ncclInt8".
uint64_t MessageBytes(std::string_view datatype, uint64_t count);

// Inspector's bucket label for a byte size: divide by 1024 while >= 1024 (up to TB), take the
// integer part k and return "k-(k+1)<unit>", e.g. 8192 -> "8-9KB"; 0 -> "0B".
std::string MessageSizeBucket(uint64_t bytes);

// Lower bound in bytes of the bucket that holds `bytes` (e.g. 8500 -> 8192). Bucket keys in memory.
uint64_t MessageSizeBucketFloor(uint64_t bytes);

// Bus-bandwidth factor and traffic multiplier for an operation, as in nccl-tests PERFORMANCE.md:
//   AllReduce: traffic S, factor 2(n-1)/n; ReduceScatter/AllGather: traffic S*n, factor (n-1)/n;
//   Broadcast/Reduce/Send/Recv/SendRecv: traffic S, factor 1; anything else: 0.
struct BandwidthModel {
  double traffic_multiplier = 0;  // trafficBytes = S * traffic_multiplier (n already applied)
  double bus_factor = 0;
};
BandwidthModel BandwidthModelFor(std::string_view op, int nranks);

// Algorithm and bus bandwidth in GB/s (1e9 bytes/s) of one operation of message size `bytes`
// that executed in `exec_ns` nanoseconds. Both 0 when exec_ns is 0 or the op is unknown.
struct Bandwidth {
  double alg_gbs = 0;
  double bus_gbs = 0;
};
Bandwidth ComputeBandwidth(std::string_view op, int nranks, uint64_t bytes, uint64_t exec_ns);

// Index of the log2 histogram bucket for an execution time in microseconds: bucket 0 is < 1 µs,
// bucket i >= 1 holds [2^(i-1), 2^i) µs. Clamped to kExecHistBuckets - 1.
inline constexpr int kExecHistBuckets = 32;
int ExecTimeBucket(double exec_us);

// True for NCCL's point-to-point function names ("Send", "Recv").
bool IsP2pOp(std::string_view op);

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_OP_MATH_H_

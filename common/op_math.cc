#include "common/op_math.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace ncclwatch {

size_t DatatypeSize(std::string_view datatype) {
  struct Entry {
    std::string_view name;
    size_t size;
  };
  static constexpr Entry kTypes[] = {
      {"ncclInt8", 1},    {"ncclUint8", 1},    {"ncclInt32", 4},      {"ncclUint32", 4},
      {"ncclInt64", 8},   {"ncclUint64", 8},   {"ncclFloat16", 2},    {"ncclFloat32", 4},
      {"ncclFloat64", 8}, {"ncclBfloat16", 2}, {"ncclFloat8e4m3", 1}, {"ncclFloat8e5m2", 1},
  };
  for (const Entry& e : kTypes) {
    if (e.name == datatype) return e.size;
  }
  return 0;
}

uint64_t MessageBytes(std::string_view datatype, uint64_t count) {
  size_t size = DatatypeSize(datatype);
  // "Unknown" is how NCCL spells ncclUint8 (docs/nccl-profiler-abi.md §4.2): one byte per element.
  if (size == 0) size = 1;
  return count * size;
}

namespace {
constexpr const char* kUnits[] = {"B", "KB", "MB", "GB", "TB"};
constexpr int kNumUnits = 5;

// Returns the unit index and the integer part of `bytes` expressed in that unit.
std::pair<int, uint64_t> ScaleToUnit(uint64_t bytes) {
  int unit = 0;
  uint64_t value = bytes;
  while (value >= 1024 && unit < kNumUnits - 1) {
    value /= 1024;
    ++unit;
  }
  return {unit, value};
}
}  // namespace

std::string MessageSizeBucket(uint64_t bytes) {
  if (bytes == 0) return "0B";
  auto [unit, k] = ScaleToUnit(bytes);
  return absl::StrFormat("%d-%d%s", k, k + 1, kUnits[unit]);
}

uint64_t MessageSizeBucketFloor(uint64_t bytes) {
  auto [unit, k] = ScaleToUnit(bytes);
  return k << (10 * unit);
}

BandwidthModel BandwidthModelFor(std::string_view op, int nranks) {
  if (nranks <= 0) return {};
  double n = nranks;
  if (op == "AllReduce") return {1.0, 2.0 * (n - 1) / n};
  if (op == "ReduceScatter" || op == "AllGather") return {n, (n - 1) / n};
  if (op == "Broadcast" || op == "Reduce" || op == "Send" || op == "Recv" || op == "SendRecv") {
    return {1.0, 1.0};
  }
  return {};
}

Bandwidth ComputeBandwidth(std::string_view op, int nranks, uint64_t bytes, uint64_t exec_ns) {
  if (exec_ns == 0) return {};
  BandwidthModel model = BandwidthModelFor(op, nranks);
  double seconds = static_cast<double>(exec_ns) * 1e-9;
  double alg = static_cast<double>(bytes) * model.traffic_multiplier / 1e9 / seconds;
  return {alg, alg * model.bus_factor};
}

int ExecTimeBucket(double exec_us) {
  if (!(exec_us >= 1.0)) return 0;  // also catches NaN
  int exponent;
  std::frexp(exec_us, &exponent);  // exec_us = m * 2^exponent, m in [0.5, 1)
  return exponent < kExecHistBuckets ? exponent : kExecHistBuckets - 1;
}

bool IsP2pOp(std::string_view op) { return op == "Send" || op == "Recv"; }

}  // namespace ncclwatch

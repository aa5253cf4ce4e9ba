// The clocks ncclwatch reads, in ns: CLOCK_MONOTONIC, CLOCK_MONOTONIC_COARSE (a few ns to read,
// ticks of a few ms: the plugin's hot path stamps operations with it) and CLOCK_REALTIME (unix
// time). vDSO reads, no system call on x86-64 Linux; inline, so that the hot path pays no call.
#ifndef NCCLWATCH_COMMON_CLOCK_H_
#define NCCLWATCH_COMMON_CLOCK_H_

#include <time.h>

#include <cstdint>

namespace ncclwatch {

inline int64_t ReadClockNs(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

inline int64_t MonotonicNs() { return ReadClockNs(CLOCK_MONOTONIC); }
inline int64_t CoarseMonotonicNs() { return ReadClockNs(CLOCK_MONOTONIC_COARSE); }
inline int64_t RealtimeNs() { return ReadClockNs(CLOCK_REALTIME); }

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_CLOCK_H_

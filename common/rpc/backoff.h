// Capped exponential backoff with jitter, for reconnect and retry loops (the plugin's stream to
// its agent, the agent's pushes to the aggregator). No gRPC: usable anywhere.
#ifndef NCCLWATCH_COMMON_RPC_BACKOFF_H_
#define NCCLWATCH_COMMON_RPC_BACKOFF_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>

namespace ncclwatch {

// The longest an agent waits between two attempts to push to the aggregator. An aggregator that
// comes back hears from every agent within about this long (the detectors' restart grace).
inline constexpr std::chrono::milliseconds kPushRetryMaxDelay{5000};

// Each NextDelay() returns a wait drawn uniformly from [d/2, d], where d starts at `initial` and
// doubles after each call up to `max`; Reset() (after a success) starts over at `initial`. The
// jitter keeps many clients that failed together from retrying together. Not thread-safe: one per
// retry loop.
class Backoff {
 public:
  Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max,
          uint32_t seed = std::random_device{}())
      : initial_(std::max<int64_t>(1, initial.count())),
        max_(std::max<int64_t>(initial_, max.count())),
        current_(initial_),
        rng_(seed) {}

  std::chrono::milliseconds NextDelay() {
    const int64_t half = current_ / 2;
    const int64_t wait = half + static_cast<int64_t>(rng_() % static_cast<uint64_t>(half + 1));
    current_ = std::min(current_ * 2, max_);
    return std::chrono::milliseconds(wait);
  }
  void Reset() { current_ = initial_; }

 private:
  const int64_t initial_;
  const int64_t max_;
  int64_t current_;
  std::minstd_rand rng_;
};

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_RPC_BACKOFF_H_

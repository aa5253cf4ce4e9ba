// The per-communicator compactor: turns one communicator's completions over one flush interval
// into the stats, samples and clock pair of its RankReport (wire format: docs/wire-format.md).
//
// Compaction per (op, algo_proto, Inspector size bucket, peer, user tag): count, bytes, execution
// time sum/min/max and a log2 histogram, log-sums of bus and algorithm bandwidth (geometric means).
// Sampling: a collective is sent as a sample (RankReport.sample_columns) when seq % stride == 0;
// the stride starts at NCCLWATCH_SAMPLE_STRIDE and doubles while the interval holds more than
// NCCLWATCH_MAX_SAMPLES (point-to-point samples have a stride and cap of their own). Because
// strides are powers of two, the records of two ranks that chose different strides still share
// every seq that is a multiple of the larger one, so the aggregator can always join them.
//
// Point-to-point operations are sampled too, each end by the same rule so that the aggregator can
// join the two: the n-th exchange from sender s to receiver r (the Recorder numbers them per peer
// and direction) when ExchangePick(n, s, r) % (kExchangeStrideFactor * stride * f) == 0, where f =
// the power of two at or above nranks / 8. The pick is a mix of the number and the pair, the same
// at both ends: a pipeline exchanges with each neighbour once per microbatch, so a rule on the
// number itself (every k-th exchange of a pair) would sample the same microbatch of every step,
// a phase whose own time differs by design between the two ends; the mix samples every phase
// alike and spreads one step's samples over different pairs. f keeps an all-to-all over a large
// expert-parallel group (2 (nranks - 1) operations a rank per step) at about as many samples as 16
// collectives. Strides are powers of two and the mix's low bits decide, so the picks of a raised
// stride are among those of a lower one, as for collectives. Their columns carry the peer and the
// size bucket.
//
// Untimed completions (copy-engine collectives) only count (untimed_count, untimed_bytes). The
// clock pair kept is the (host, GPU) reading with the smallest host-minus-GPU gap, i.e. the least
// callback delay.
//
// Thread safety: none; one CommAccumulator belongs to the flusher, which uses it under its lock.
#ifndef NCCLWATCH_PLUGIN_COMPACTOR_H_
#define NCCLWATCH_PLUGIN_COMPACTOR_H_

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "ncclwatch/v1/report.pb.h"
#include "plugin/hot_path.h"

namespace ncclwatch::plugin {

// How many times more sparsely exchanges are sampled than collectives (see above). 1: a quarter
// (4) brings a 16,384-rank job's aggregator near its CPU budget, but delays the evidence of a GPU
// whose only symptom is in its exchanges past the detection target (docs/detection.md, "What
// judging exchanges costs").
inline constexpr uint64_t kExchangeStrideFactor = 1;

// The sampling number of exchange `seq` between ranks `a` and `b` (either order: both ends, and
// both directions, compute the same): a mix of the three, uniform over its 64 bits.
uint64_t ExchangePick(uint64_t seq, int a, int b);

// Accumulates one communicator's completions over one interval. Flusher thread only.
class CommAccumulator {
 public:
  // `sample_stride` (a power of two, >= 1) and `max_samples` (>= 0) as NCCLWATCH_SAMPLE_STRIDE
  // and NCCLWATCH_MAX_SAMPLES.
  // `rank`: the process's rank in the communicator, which point-to-point sampling needs (-1: p2p
  // operations are not sampled).
  CommAccumulator(int64_t sample_stride, int64_t max_samples, int rank = -1)
      : base_stride_(sample_stride),
        max_samples_(max_samples),
        rank_(rank),
        collectives_{{}, sample_stride},
        exchanges_{{}, sample_stride} {}

  // Adds one completed operation of a communicator of `nranks` ranks (for bus bandwidth), with its
  // own time (own_time.h; -1 when unknown), which a sampled collective carries.
  void Add(const Completion& c, int nranks, int64_t own_time_ns = -1);
  // Moves the interval's content into `report` (stats, sample columns, sample_stride, clock) and
  // starts a new interval at the base stride.
  void TakeInto(ncclwatch::v1::RankReport* report);
  // Samples left out because the cap raised the stride, since construction (never reset).
  uint64_t samples_capped() const { return samples_capped_; }

 private:
  // NCCL passes static strings (docs/nccl-profiler-abi.md §4.1): the pointers identify them, so
  // the per-operation work needs no string copies. Labels are built once per interval in TakeInto.
  struct Key {
    const char* op;
    const char* algo;
    const char* proto;
    uint64_t size_floor;
    int32_t peer;
    bool p2p;
    uint64_t user_tag;
    bool operator<(const Key& o) const {
      return std::tie(op, algo, proto, size_floor, peer, p2p, user_tag) <
             std::tie(o.op, o.algo, o.proto, o.size_floor, o.peer, o.p2p, o.user_tag);
    }
  };
  struct Stats {
    uint64_t count = 0;
    uint64_t bytes = 0;
    double sum_us = 0;
    double min_us = 0;
    double max_us = 0;
    uint64_t hist[32] = {};
    double bus_log_sum = 0;
    double alg_log_sum = 0;
    uint64_t bw_samples = 0;
    uint64_t untimed_count = 0;
    uint64_t untimed_bytes = 0;
  };
  struct Sample {
    const char* op;
    const char* algo;
    const char* proto;
    int32_t peer;  // p2p: the peer's rank; -1 for collectives
    uint64_t seq;
    // The sampling rule's number and its stride multiplier: seq and 1 for a collective; for a
    // p2p operation ExchangePick and kExchangeStrideFactor x f (see Add).
    uint64_t pick;
    uint64_t every;
    uint64_t gpu_start_ns;
    uint64_t duration_ns;
    int64_t own_time_ns;
    uint64_t sync_wait_ns;
    uint64_t bytes;
    uint32_t channels;
  };
  // One interval's samples of one kind (collectives, or point-to-point exchanges) and the stride
  // its cap has raised them to.
  struct Sampled {
    std::vector<Sample> samples;
    int64_t stride;
  };
  void RaiseStride(Sampled& set);

  const int64_t base_stride_;
  const int64_t max_samples_;
  const int rank_;
  std::map<Key, Stats> stats_;
  Sampled collectives_;
  Sampled exchanges_;
  uint64_t samples_capped_ = 0;
  bool have_clock_ = false;
  int64_t best_clock_gap_ = 0;
  ncclwatch::v1::ClockSync clock_;
};

}  // namespace ncclwatch::plugin

#endif  // NCCLWATCH_PLUGIN_COMPACTOR_H_

#include "plugin/compactor.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

#include "common/op_math.h"
#include "common/strings.h"
#include "proto/samples.h"

namespace ncclwatch::plugin {
namespace {

// "RING_SIMPLE". A symmetric kernel (NCCL 2.31) has an empty protocol and its variant in the
// algorithm: its name alone.
std::string AlgoProto(const char* algo, const char* proto) {
  if (proto != nullptr && *proto == '\0' && algo != nullptr && *algo != '\0') return algo;
  return std::string(OrUnknown(algo)) + "_" + OrUnknown(proto);
}

}  // namespace

uint64_t ExchangePick(uint64_t seq, int a, int b) {
  // A 64-bit finalizer (xor-shift, multiply by an odd constant, twice) of the pair, then of the
  // number mixed with it: every output bit depends on every input bit.
  auto mix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  };
  const uint64_t lo = static_cast<uint32_t>(std::min(a, b));
  const uint64_t hi = static_cast<uint32_t>(std::max(a, b));
  return mix(seq ^ mix(hi << 32 | lo));
}

void CommAccumulator::Add(const Completion& c, int nranks, int64_t own_time_ns) {
  const char* op = OrUnknown(c.func);
  const uint64_t bytes = MessageBytes(c.datatype != nullptr ? c.datatype : "", c.count);
  Key key{op,
          c.p2p ? nullptr : c.algo,
          c.p2p ? nullptr : c.proto,
          MessageSizeBucketFloor(bytes),
          c.p2p ? c.peer : -1,
          c.p2p,
          c.user_tag};
  Stats& s = stats_[key];
  if (!c.timed) {
    s.untimed_count++;
    s.untimed_bytes += bytes;
    return;
  }
  double exec_us = static_cast<double>(c.exec_ns) / 1000.0;
  if (s.count == 0) s.min_us = s.max_us = exec_us;
  s.count++;
  s.bytes += bytes;
  s.sum_us += exec_us;
  s.min_us = std::min(s.min_us, exec_us);
  s.max_us = std::max(s.max_us, exec_us);
  s.hist[ExecTimeBucket(exec_us)]++;
  Bandwidth bw = ComputeBandwidth(op, nranks, bytes, c.exec_ns);
  if (bw.bus_gbs > 0 && bw.alg_gbs > 0) {
    s.bus_log_sum += std::log(bw.bus_gbs);
    s.alg_log_sum += std::log(bw.alg_gbs);
    s.bw_samples++;
  }

  // The clock pair with the smallest host-minus-GPU gap had the least callback delay.
  int64_t gap = c.host_done_unix_ns - static_cast<int64_t>(c.gpu_stop_ns);
  if (c.host_done_unix_ns != 0 && (!have_clock_ || gap < best_clock_gap_)) {
    have_clock_ = true;
    best_clock_gap_ = gap;
    clock_.set_host_unix_ns(c.host_done_unix_ns);
    clock_.set_gpu_ns(c.gpu_stop_ns);
  }

  uint64_t pick = c.seq;
  uint64_t every = 1;
  if (c.p2p) {
    if (rank_ < 0 || c.peer < 0 || c.peer >= nranks || c.peer == rank_) return;
    pick = ExchangePick(c.seq, rank_, c.peer);
    every = kExchangeStrideFactor * std::bit_ceil(static_cast<uint64_t>(std::max(1, nranks / 8)));
  }
  if (pick % (base_stride_ * every) != 0) return;
  // Collectives and exchanges have a cap and a stride each: a busy pipeline must not thin its
  // communicator's collective samples.
  Sampled& set = c.p2p ? exchanges_ : collectives_;
  if (pick % (set.stride * every) != 0) {
    ++samples_capped_;  // would have been sampled had the cap not raised the stride
  } else {
    set.samples.push_back(Sample{op, c.algo, c.proto, c.p2p ? c.peer : -1, c.seq, pick, every,
                                 c.gpu_start_ns, c.gpu_stop_ns - c.gpu_start_ns, own_time_ns,
                                 c.sync_wait_ns, c.p2p ? MessageSizeBucketFloor(bytes) : bytes,
                                 c.channels});
    if (static_cast<int64_t>(set.samples.size()) > max_samples_) RaiseStride(set);
  }
}

void CommAccumulator::RaiseStride(Sampled& set) {
  while (static_cast<int64_t>(set.samples.size()) > max_samples_) {
    if (max_samples_ == 0) {
      samples_capped_ += set.samples.size();
      set.samples.clear();
      return;
    }
    set.stride *= 2;
    size_t before = set.samples.size();
    std::erase_if(set.samples,
                  [&](const Sample& s) { return s.pick % (set.stride * s.every) != 0; });
    samples_capped_ += before - set.samples.size();
  }
}

void CommAccumulator::TakeInto(ncclwatch::v1::RankReport* report) {
  for (auto& [key, s] : stats_) {
    auto* out = report->add_stats();
    out->set_op(key.op);
    out->set_p2p(key.p2p);
    out->set_algo_proto(key.p2p ? "" : AlgoProto(key.algo, key.proto));
    out->set_message_size(MessageSizeBucket(key.size_floor));
    out->set_peer(key.peer);
    out->set_count(s.count);
    out->set_bytes(s.bytes);
    out->set_exec_time_us_sum(s.sum_us);
    out->set_exec_time_us_min(s.min_us);
    out->set_exec_time_us_max(s.max_us);
    int last = kExecHistBuckets - 1;
    while (last > 0 && s.hist[last] == 0) --last;
    for (int i = 0; i <= last; ++i) out->add_exec_time_hist(s.hist[i]);
    out->set_bus_bw_gbs_log_sum(s.bus_log_sum);
    out->set_alg_bw_gbs_log_sum(s.alg_log_sum);
    out->set_bw_samples(s.bw_samples);
    out->set_untimed_count(s.untimed_count);
    out->set_untimed_bytes(s.untimed_bytes);
    out->set_user_tag(key.user_tag);
  }
  // Grouped by column and in seq order, the delta encoding stays at a few bytes per sample.
  SampleColumnWriter writer(report);
  for (Sampled* set : {&collectives_, &exchanges_}) {
    std::sort(set->samples.begin(), set->samples.end(), [](const Sample& a, const Sample& b) {
      return std::tie(a.op, a.algo, a.proto, a.peer, a.bytes, a.channels, a.seq) <
             std::tie(b.op, b.algo, b.proto, b.peer, b.bytes, b.channels, b.seq);
    });
    for (const Sample& s : set->samples) {
      writer.Add(
          s.op, s.peer >= 0 ? "" : AlgoProto(s.algo, s.proto), s.bytes, s.channels,
          ncclwatch::Sample{s.seq, s.gpu_start_ns, s.duration_ns, s.own_time_ns, s.sync_wait_ns},
          s.peer);
    }
  }
  report->set_sample_stride(static_cast<uint32_t>(collectives_.stride));
  if (have_clock_) *report->mutable_clock() = clock_;
  stats_.clear();
  for (Sampled* set : {&collectives_, &exchanges_}) {
    set->samples.clear();
    set->stride = base_stride_;
  }
  have_clock_ = false;
}

}  // namespace ncclwatch::plugin

#include "plugin/flusher.h"

#include <algorithm>
#include <cmath>

#include "common/op_math.h"
#include "proto/samples.h"

namespace ncclwatch::plugin {
namespace {

constexpr int64_t kDrainPeriodMs = 50;

const char* OrUnknown(const char* s) { return s != nullptr ? s : "Unknown"; }

std::string AlgoProto(const char* algo, const char* proto) {
  return std::string(OrUnknown(algo)) + "_" + OrUnknown(proto);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// CommAccumulator

void CommAccumulator::Add(const Completion& c, int nranks) {
  const char* op = OrUnknown(c.func);
  const uint64_t bytes = MessageBytes(c.datatype != nullptr ? c.datatype : "", c.count);
  Key key{op, c.p2p ? nullptr : c.algo, c.p2p ? nullptr : c.proto,
          MessageSizeBucketFloor(bytes), c.p2p ? c.peer : -1, c.p2p};
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

  if (c.p2p || c.seq % base_stride_ != 0) return;
  if (c.seq % stride_ != 0) {
    ++samples_capped_;  // would have been sampled had the cap not raised the stride
  } else {
    samples_.push_back(Sample{op, c.algo, c.proto, c.seq, c.gpu_start_ns,
                              c.gpu_stop_ns - c.gpu_start_ns, bytes, c.channels});
    if (static_cast<int64_t>(samples_.size()) > max_samples_) RaiseStride();
  }
}

void CommAccumulator::RaiseStride() {
  while (static_cast<int64_t>(samples_.size()) > max_samples_) {
    if (max_samples_ == 0) {
      samples_capped_ += samples_.size();
      samples_.clear();
      return;
    }
    stride_ *= 2;
    size_t before = samples_.size();
    std::erase_if(samples_, [&](const Sample& s) { return s.seq % stride_ != 0; });
    samples_capped_ += before - samples_.size();
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
  }
  // Grouped by column and in seq order, the delta encoding stays at a few bytes per sample.
  std::sort(samples_.begin(), samples_.end(), [](const Sample& a, const Sample& b) {
    return std::tie(a.op, a.algo, a.proto, a.bytes, a.channels, a.seq) <
           std::tie(b.op, b.algo, b.proto, b.bytes, b.channels, b.seq);
  });
  SampleColumnWriter writer(report);
  for (const Sample& s : samples_) {
    writer.Add(s.op, AlgoProto(s.algo, s.proto), s.bytes, s.channels,
               ncclwatch::Sample{s.seq, s.gpu_start_ns, s.duration_ns});
  }
  report->set_sample_stride(static_cast<uint32_t>(stride_));
  if (have_clock_) *report->mutable_clock() = clock_;
  stats_.clear();
  samples_.clear();
  have_clock_ = false;
  stride_ = base_stride_;
}

// ---------------------------------------------------------------------------------------------
// Flusher

Flusher::Flusher(const PluginConfig& config, Recorder& recorder, ProcessIdentity identity,
                 ReportSink& sink, OfflineDump* dump)
    : config_(config),
      recorder_(recorder),
      identity_(std::move(identity)),
      sink_(sink),
      dump_(dump) {}

Flusher::~Flusher() {
  Stop();
  std::lock_guard<std::mutex> lock(mu_);
  for (CommState* comm : zombies_) delete comm;
}

void Flusher::Start() { thread_ = std::thread([this] { Loop(); }); }

void Flusher::Stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Flusher::Loop() {
  int64_t next_report = MonotonicNs() + config_.flush_interval_ms * 1'000'000;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(stop_mu_);
      int64_t wait_ms = std::min<int64_t>(kDrainPeriodMs, config_.flush_interval_ms);
      // Waits for the drain period, or returns early when Stop() is called.
      stop_cv_.wait_for(lock, std::chrono::milliseconds(wait_ms), [this] { return stop_; });
      if (stop_) return;
    }
    int64_t now = MonotonicNs();
    bool report = now >= next_report;
    if (report) {
      next_report += config_.flush_interval_ms * 1'000'000;
      if (next_report < now) next_report = now + config_.flush_interval_ms * 1'000'000;
    }
    RunOnce(report);
  }
}

void Flusher::DrainLocked(CommState* comm) {
  auto& acc = accumulators_[comm];
  if (!acc) {
    acc = std::make_unique<CommAccumulator>(config_.sample_stride, config_.max_samples);
    interval_start_[comm] = RealtimeNs();
  }
  Completion c;
  const CommIdentity& id = comm->identity();
  const uint64_t now_us = dump_ != nullptr ? RealtimeNs() / 1000 : 0;
  while (comm->ring().Pop(&c)) {
    acc->Add(c, id.nranks);
    if (dump_ != nullptr && c.timed) {  // Inspector's records all carry an execution time
      uint64_t sn = c.p2p ? ++p2p_sn_[comm] : 0;
      dump_->AppendOperation(id, c, MessageBytes(c.datatype != nullptr ? c.datatype : "", c.count),
                             sn, now_us);
    }
  }
}

ncclwatch::v1::RankReport Flusher::BuildLocked(CommState* comm,
                                               const std::vector<InFlightView>& in_flight,
                                               int64_t now_unix_ns, bool final) {
  ncclwatch::v1::RankReport report;
  report.set_report_id(identity_.report_id_prefix | (++next_report_counter_ & 0xffffffffu));
  auto* id = report.mutable_identity();
  const CommIdentity& ci = comm->identity();
  id->set_job_id(identity_.job_id);
  id->set_host(identity_.host);
  id->set_pid(identity_.pid);
  id->set_cuda_device(ci.cuda_device);
  id->set_gpu_uuid(ci.gpu_uuid);
  id->set_comm_hash(ci.comm_hash);
  id->set_comm_name(ci.comm_name);
  id->set_rank(ci.rank);
  id->set_nranks(ci.nranks);
  id->set_n_nodes(ci.n_nodes);
  report.set_interval_start_unix_ns(interval_start_[comm]);
  report.set_interval_end_unix_ns(now_unix_ns);
  interval_start_[comm] = now_unix_ns;
  CommAccumulator& acc = *accumulators_[comm];
  acc.TakeInto(&report);

  // Oldest first, capped.
  std::vector<const InFlightView*> mine;
  for (const InFlightView& v : in_flight) {
    if (v.comm == comm) mine.push_back(&v);
  }
  std::sort(mine.begin(), mine.end(), [](const InFlightView* a, const InFlightView* b) {
    return a->enqueue_mono_ns < b->enqueue_mono_ns;
  });
  report.set_in_flight_count(static_cast<uint32_t>(mine.size()));
  if (static_cast<int64_t>(mine.size()) > config_.max_in_flight) mine.resize(config_.max_in_flight);
  int64_t now_mono = CoarseMonotonicNs();
  for (const InFlightView* v : mine) {
    auto* op = report.add_in_flight();
    op->set_op(OrUnknown(v->func));
    op->set_seq(v->seq);
    op->set_p2p(v->p2p);
    op->set_peer(v->peer);
    op->set_age_ns(static_cast<uint64_t>(std::max<int64_t>(0, now_mono - v->enqueue_mono_ns)));
    op->set_channels(v->channels);
    op->set_channels_started(std::min(v->channels_started, v->channels));
    op->set_channels_done(v->channels_done);
  }

  auto* drops = report.mutable_drops();
  drops->set_events_dropped(recorder_.events_dropped());
  drops->set_channel_events_orphaned(recorder_.channel_events_orphaned());
  drops->set_records_dropped(comm->ring().dropped());
  drops->set_reports_dropped(sink_.dropped());
  drops->set_untimed_ops(comm->untimed());
  drops->set_samples_capped(acc.samples_capped());
  report.set_final(final);
  return report;
}

void Flusher::RunOnce(bool report) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CommState*> comms = recorder_.Comms();
  for (CommState* comm : comms) DrainLocked(comm);
  if (!report) return;
  std::vector<InFlightView> in_flight;
  recorder_.ListInFlight(&in_flight);
  int64_t now = RealtimeNs();
  for (CommState* comm : comms) {
    ncclwatch::v1::RankReport report = BuildLocked(comm, in_flight, now, false);
    if (dump_ != nullptr) dump_->UpdateMetrics(report);
    sink_.Submit(std::move(report));
  }
  if (dump_ != nullptr) dump_->Flush();
  ReapZombiesLocked();
}

void Flusher::FinalizeComm(CommState* comm) {
  std::lock_guard<std::mutex> lock(mu_);
  recorder_.UnregisterComm(comm);
  DrainLocked(comm);
  std::vector<InFlightView> in_flight;
  recorder_.ListInFlight(&in_flight);
  sink_.Submit(BuildLocked(comm, in_flight, RealtimeNs(), true));
  accumulators_.erase(comm);
  interval_start_.erase(comm);
  p2p_sn_.erase(comm);
  if (dump_ != nullptr) {
    dump_->ForgetCommunicator(comm->identity().comm_hash, comm->identity().rank);
    dump_->Flush();
  }
  zombies_.push_back(comm);
  ReapZombiesLocked();
}

void Flusher::FinalizeAll() {
  for (CommState* comm : recorder_.Comms()) FinalizeComm(comm);
}

void Flusher::ReapZombiesLocked() {
  std::erase_if(zombies_, [this](CommState* comm) {
    if (recorder_.Referenced(comm)) return false;
    delete comm;
    return true;
  });
}

}  // namespace ncclwatch::plugin

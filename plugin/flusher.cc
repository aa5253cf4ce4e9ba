#include "plugin/flusher.h"

#include <algorithm>

#include "common/strings.h"

namespace ncclwatch::plugin {
namespace {

constexpr int64_t kDrainPeriodMs = 50;
// An operation in flight enqueued this long before a completed one of its communicator is lost.
constexpr int64_t kOvertakenMarginNs = 100'000'000;

}  // namespace

Flusher::Flusher(const PluginConfig& config, Recorder& recorder, ProcessIdentity identity,
                 ReportSink& sink)
    : config_(config),
      recorder_(recorder),
      identity_(std::move(identity)),
      sink_(sink),
      deliver_operations_(sink.wants_operations()),
      task_(absl::Milliseconds(std::min<int64_t>(kDrainPeriodMs, config.flush_interval_ms)),
            [this] { Tick(); }) {}

Flusher::~Flusher() {
  Stop();
  ncclwatch::MutexLock lock(&mu_);
  for (CommState* comm : zombies_) delete comm;
}

void Flusher::Start() {
  next_report_ns_ = MonotonicNs() + config_.flush_interval_ms * 1'000'000;
  task_.Start();
}

void Flusher::Stop() { task_.Stop(); }

void Flusher::Tick() {
  const int64_t now = MonotonicNs();
  const bool report = now >= next_report_ns_;
  if (report) {
    next_report_ns_ += config_.flush_interval_ms * 1'000'000;
    if (next_report_ns_ < now) next_report_ns_ = now + config_.flush_interval_ms * 1'000'000;
  }
  RunOnce(report);
}

CommAccumulator& Flusher::AccumulatorLocked(CommState* comm) {
  auto& acc = accumulators_[comm];
  if (!acc) {
    acc = std::make_unique<CommAccumulator>(config_.sample_stride, config_.max_samples,
                                            comm->identity().rank);
    interval_start_[comm] = RealtimeNs();
  }
  return *acc;
}

void Flusher::DrainLocked(const std::vector<CommState*>& comms) {
  // Every ring first; then own times in GPU start order across the process's communicators
  // (own_time.h); then the completions go to the accumulators and the sink in ring order.
  drained_.clear();
  for (CommState* comm : comms) {
    AccumulatorLocked(comm);
    // At most one ring's worth per drain: operations completing faster than this thread pops
    // them must not keep it draining (and growing drained_) forever; the ring drops the excess.
    Completion c;
    for (size_t n = comm->ring().capacity(); n > 0 && comm->ring().Pop(&c); --n)
      drained_.push_back(Drained{comm, c, -1});
  }
  by_start_.clear();
  for (size_t i = 0; i < drained_.size(); ++i) {
    if (drained_[i].completion.timed) by_start_.push_back(i);
  }
  std::stable_sort(by_start_.begin(), by_start_.end(),
                   [this](size_t a, size_t b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                     return drained_[a].completion.gpu_start_ns <
                            drained_[b].completion.gpu_start_ns;
                   });
  for (size_t i : by_start_) {
    Drained& d = drained_[i];
    OwnTimeTracker& tracker = own_time_[d.comm->identity().cuda_device];
    if (d.completion.bogus) {
      tracker.ObserveUnknownEnd(d.completion.gpu_start_ns);
    } else {
      d.own_time_ns =
          tracker.Observe(d.completion.gpu_start_ns, d.completion.gpu_stop_ns, d.completion.p2p);
    }
  }
  // One clock read per drain, and only for a sink that looks at operations.
  const int64_t drained_unix_ns = deliver_operations_ ? RealtimeNs() : 0;
  for (const Drained& d : drained_) {
    if (d.completion.bogus) continue;  // counted (CommState::bogus), never measured
    accumulators_[d.comm]->Add(d.completion, d.comm->identity().nranks, d.own_time_ns);
    if (deliver_operations_) sink_.OnOperation(*d.comm, d.completion, drained_unix_ns);
  }
}

ncclwatch::v1::RankReport Flusher::BuildLocked(CommState* comm,
                                               const std::vector<InFlightView>& in_flight,
                                               int64_t completed_enqueue_ns, int64_t now_unix_ns,
                                               bool final) {
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
  if (identity_.global_rank >= 0) id->set_global_rank(identity_.global_rank);
  if (identity_.local_rank >= 0) id->set_local_rank(identity_.local_rank);
  report.set_interval_start_unix_ns(interval_start_[comm]);
  report.set_interval_end_unix_ns(now_unix_ns);
  interval_start_[comm] = now_unix_ns;
  CommAccumulator& acc = AccumulatorLocked(comm);
  acc.TakeInto(&report);

  // Oldest first, capped. An operation enqueued well before one of this communicator that
  // completed lost its completion events (CommState::NoteCompleted): counted, not listed, so that
  // it is not taken for a hang. The margin covers the coarse enqueue clock's ticks.
  std::vector<const InFlightView*> mine;
  uint64_t lost = 0;
  const int64_t overtaken_before = completed_enqueue_ns - kOvertakenMarginNs;
  for (const InFlightView& v : in_flight) {
    if (v.comm != comm) continue;
    if (v.enqueue_mono_ns < overtaken_before) {
      ++lost;
    } else {
      mine.push_back(&v);
    }
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
    op->set_seq(v->p2p ? 0 : v->seq);  // a p2p operation's own numbering stays in the plugin
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
  drops->set_bogus_timings(comm->bogus());
  drops->set_completions_lost(lost);
  drops->set_agent_outages(sink_.outages());
  drops->set_samples_capped(acc.samples_capped());
  report.set_final(final);
  return report;
}

void Flusher::RunOnce(bool report) {
  ncclwatch::MutexLock lock(&mu_);
  std::vector<CommState*> comms = recorder_.Comms();
  DrainLocked(comms);
  if (!report) return;
  // Each communicator's latest completion is read before the in-flight snapshot: an operation in
  // the snapshot that completed since must not count as overtaken by a later one.
  std::vector<int64_t> completed;
  completed.reserve(comms.size());
  for (CommState* comm : comms) completed.push_back(comm->last_completed_enqueue_ns());
  std::vector<InFlightView> in_flight;
  recorder_.ListInFlight(&in_flight);
  int64_t now = RealtimeNs();
  for (size_t i = 0; i < comms.size(); ++i) {
    sink_.Submit(BuildLocked(comms[i], in_flight, completed[i], now, false));
  }
  sink_.OnRoundEnd();
  ReapZombiesLocked();
}

void Flusher::FinalizeComm(CommState* comm) {
  ncclwatch::MutexLock lock(&mu_);
  FinalReportLocked(comm);
  zombies_.push_back(comm);
  ReapZombiesLocked();
}

void Flusher::FinalReportLocked(CommState* comm) {
  recorder_.UnregisterComm(comm);
  DrainLocked({comm});
  const int64_t completed = comm->last_completed_enqueue_ns();
  std::vector<InFlightView> in_flight;
  recorder_.ListInFlight(&in_flight);
  sink_.Submit(BuildLocked(comm, in_flight, completed, RealtimeNs(), true));
  accumulators_.erase(comm);
  interval_start_.erase(comm);
  sink_.OnCommunicatorFinalized(*comm);
}

void Flusher::FinalizeAll() {
  ncclwatch::MutexLock lock(&mu_);
  for (CommState* comm : recorder_.Comms()) FinalReportLocked(comm);  // kept: see flusher.h
}

void Flusher::ReapZombiesLocked() {
  std::erase_if(zombies_, [this](CommState* comm) {
    if (recorder_.Referenced(comm)) return false;
    delete comm;
    return true;
  });
}

}  // namespace ncclwatch::plugin

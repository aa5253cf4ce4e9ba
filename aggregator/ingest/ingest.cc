#include "aggregator/ingest/ingest.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "aggregator/detect/correlator.h"
#include "aggregator/findings/findings.h"
#include "aggregator/store/store_keys.h"
#include "common/log.h"
#include "proto/inspector.h"
#include "proto/validate.h"

namespace ncclwatch::aggregator {
namespace {

constexpr int kMaxReportsPerBatch = 100000;

// The analyzer's counters on /metrics.
void ExportAnalyzerCounters(const Analyzer& analyzer, PromTextWriter& w) {
  const Analyzer::Counters c = analyzer.counters();
  w.Family("ncclwatch_aggregator_groups_completed_total",
           "Collectives joined across all their ranks.", "counter");
  w.Sample("ncclwatch_aggregator_groups_completed_total", {}, c.groups_completed);
  w.Family("ncclwatch_aggregator_groups_expired_total",
           "Collectives dropped before every rank reported them.", "counter");
  w.Sample("ncclwatch_aggregator_groups_expired_total", {}, c.groups_expired);
  w.Family(
      "ncclwatch_aggregator_records_unjoined_total",
      absl::StrCat("Sampled records not joined with other ranks': their communicator "
                   "already used ",
                   Correlator::kMaxOpsPerComm, " collective names (a client making names up)."),
      "counter");
  w.Sample("ncclwatch_aggregator_records_unjoined_total", {{"reason", "too_many_op_names"}},
           c.records_refused);
  w.Family("ncclwatch_aggregator_open_groups", "Collectives waiting for more ranks.", "gauge");
  w.Sample("ncclwatch_aggregator_open_groups", {}, c.open_groups);
  w.Family("ncclwatch_aggregator_reports_capped_total",
           "Reports stored but not analysed: their job or communicator is beyond a cap "
           "(--max-jobs, --max-comms-per-job, --max-jobs-per-agent, --max-comms-per-agent).",
           "counter");
  w.Sample("ncclwatch_aggregator_reports_capped_total", {{"reason", "too_many_jobs"}},
           c.capped_jobs);
  w.Sample("ncclwatch_aggregator_reports_capped_total", {{"reason", "too_many_comms"}},
           c.capped_comms);
  w.Sample("ncclwatch_aggregator_reports_capped_total", {{"reason", "too_many_jobs_per_agent"}},
           c.capped_agent_jobs);
  w.Sample("ncclwatch_aggregator_reports_capped_total", {{"reason", "too_many_comms_per_agent"}},
           c.capped_agent_comms);
  w.Family("ncclwatch_aggregator_series_capped_total",
           "Series updates refused because --max-series series exist.", "counter");
  w.Sample("ncclwatch_aggregator_series_capped_total", {}, c.capped_series);
  w.Family("ncclwatch_aggregator_series_capped_by_agent_total",
           "New per-rank series refused because the agent that sent them held "
           "--max-series-mib-per-agent of series already.",
           "counter");
  w.Sample("ncclwatch_aggregator_series_capped_by_agent_total", {}, c.capped_agent_series);
}

}  // namespace

Ingest::Ingest(Store& store, Analyzer& analyzer, MetricRegistry& m, int64_t history_step_ns)
    : store_(store),
      analyzer_(analyzer),
      metrics_(m),
      batches_stored_(m.GetCounter("ncclwatch_aggregator_batches_stored_total",
                                   "Agent batches stored and analysed.")),
      batches_duplicate_(m.GetCounter("ncclwatch_aggregator_batches_duplicate_total",
                                      "Replayed batches acknowledged without storing again.")),
      batches_invalid_(m.GetCounter("ncclwatch_aggregator_batches_invalid_total",
                                    "Batches refused as malformed.")),
      reports_ingested_(m.GetCounter("ncclwatch_aggregator_reports_ingested_total",
                                     "Rank reports stored and analysed.")),
      reports_rejected_(m.GetCounter("ncclwatch_aggregator_reports_rejected_total",
                                     "Rank reports rejected by validation, all reasons.")),
      store_errors_(m.GetCounter("ncclwatch_aggregator_store_errors_total",
                                 "Store writes that failed (the agent retries).")),
      detection_snapshots_(m.GetCounter(
          "ncclwatch_aggregator_detection_snapshots_total",
          "Snapshots of the detection series taken (one per --history-step-s) for the stored "
          "history.")),
      batch_log_syncs_(m.GetCounter(
          "ncclwatch_aggregator_batch_log_syncs_total",
          "Syncs of the batch log before acknowledgements; each covers every batch written "
          "since the one before (group commit).")),
      detection_points_(m.GetCounter("ncclwatch_aggregator_detection_points_stored_total",
                                     "Detection series points stored (changes and heartbeats).")),
      history_step_ns_(history_step_ns),
      analysis_queue_(m.GetGauge("ncclwatch_aggregator_analysis_queue_reports",
                                 "Reports of acknowledged batches waiting to be analysed.")),
      analysis_waits_(m.GetCounter(
          "ncclwatch_aggregator_analysis_queue_full_total",
          "Acknowledgements held back because the analysis queue was full (the analysis does "
          "not keep up with what is pushed).")) {
  m.AddCollector([this](PromTextWriter& w) { ExportAnalyzerCounters(analyzer_, w); });
  analyser_ = std::thread([this] { AnalysisLoop(); });
  committer_ = std::thread([this] { CommitLoop(); });
}

Ingest::~Ingest() {
  {
    ncclwatch::MutexLock lock(&order_mu_);
    stopping_ = true;
  }
  committer_.join();  // after answering every push taken
  {
    ncclwatch::MutexLock lock(&analysis_mu_);
    analysis_stopping_ = true;
  }
  analyser_.join();  // after analysing every batch acknowledged
}

absl::StatusOr<ncclwatch::v1::BatchAck> Ingest::Push(const ncclwatch::v1::NodeBatch& batch,
                                                     const std::string& source) {
  ncclwatch::Notification answered;
  absl::StatusOr<ncclwatch::v1::BatchAck> out;
  // Not owned: this call returns only once the batch is analysed and no longer held.
  std::shared_ptr<const ncclwatch::v1::NodeBatch> unowned(
      std::shared_ptr<const ncclwatch::v1::NodeBatch>(), &batch);
  PushAsync(std::move(unowned), source, [&](absl::StatusOr<ncclwatch::v1::BatchAck> ack) {
    out = std::move(ack);
    answered.Notify();
  });
  answered.WaitForNotification();
  AwaitAnalysed();
  return out;
}

void Ingest::PushAsync(std::shared_ptr<const ncclwatch::v1::NodeBatch> pushed,
                       const std::string& source, PushDone done, std::string_view wire) {
  const ncclwatch::v1::NodeBatch& batch = *pushed;
  if (batch.agent_id().empty() || batch.agent_id().size() > kMaxLabelLength ||
      batch.batch_seq() == 0 || batch.reports_size() > kMaxReportsPerBatch) {
    batches_invalid_->Increment();
    done(absl::InvalidArgumentError(absl::StrCat("batch needs an agent_id of 1..", kMaxLabelLength,
                                                 " bytes, a batch_seq > 0 and at most ",
                                                 kMaxReportsPerBatch, " reports")));
    return;
  }
  Commit commit;
  commit.batch = std::move(pushed);
  // The sender as authenticated here, never as it says (whatever `source` it sent is replaced);
  // stored with the batch, so that a replay counts it against the same per-agent caps.
  commit.source = source.empty() ? "agent:" + batch.agent_id() : source;
  commit.done = std::move(done);
  // Keep only valid reports; the rest are counted by reason and never stored. The usual batch,
  // every report valid, is stored and analysed as it came: no copy of its reports.
  std::vector<bool> valid(batch.reports_size(), true);
  uint32_t rejected = 0;
  for (int i = 0; i < batch.reports_size(); ++i) {
    ReportVerdict verdict = ValidateReport(batch.reports(i));
    if (verdict.ok) continue;
    valid[i] = false;
    ++rejected;
    reports_rejected_->Increment();
    metrics_
        .GetCounter("ncclwatch_aggregator_reports_rejected_by_reason_total",
                    "Rank reports rejected by validation, by reason.", {{"reason", verdict.reason}})
        ->Increment();
  }
  if (rejected > 0) {
    auto clean_batch = std::make_shared<ncclwatch::v1::NodeBatch>();
    ncclwatch::v1::NodeBatch& clean = *clean_batch;
    clean.set_agent_id(batch.agent_id());
    clean.set_batch_seq(batch.batch_seq());
    clean.set_node(batch.node());
    clean.set_sent_unix_ns(batch.sent_unix_ns());
    for (int i = 0; i < batch.reports_size(); ++i) {
      if (valid[i]) *clean.add_reports() = batch.reports(i);
    }
    commit.batch = std::move(clean_batch);  // the push's own batch is not needed any more
    wire = {};                              // nor its bytes: the copy is what is stored
  }
  commit.ack.set_batch_seq(batch.batch_seq());
  commit.ack.set_rejected_reports(rejected);
  uint64_t ticket = 0;
  {
    ncclwatch::MutexLock lock(&order_mu_);
    commit.received_ns = std::max(absl::GetCurrentTimeNanos(), last_received_ns_ + 1);
    last_received_ns_ = commit.received_ns;
    ticket = next_ticket_++;
    ++writing_;
  }
  // Written to the log here, on this thread; made durable, analysed and answered by the
  // committer in ticket order.
  commit.is_new = store_.WriteBatchIfNew(*commit.batch, commit.received_ns, &commit.source,
                                         &commit.pending, wire);
  ncclwatch::MutexLock lock(&order_mu_);
  --writing_;
  commits_.emplace(ticket, std::move(commit));
}

void Ingest::CommitLoop() {
  for (;;) {
    std::vector<Commit> run;
    {
      ncclwatch::MutexLock lock(&order_mu_);
      order_mu_.Await(absl::Condition(
          +[](Ingest* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return self->commits_.contains(self->turn_) ||
                   (self->stopping_ && self->writing_ == 0 && self->commits_.empty());
          },
          this));
      if (!commits_.contains(turn_)) return;  // stopping, every push answered
      // Under load, one sync for every batch of the next few milliseconds rather than one each
      // (an fsync costs the kernel ~0.1 ms of CPU); a push alone is synced at once.
      const absl::Time sync_at = last_sync_ + kMinSyncInterval;
      if (writing_ > 0 && absl::Now() < sync_at) {
        order_mu_.AwaitWithDeadline(
            absl::Condition(
                +[](Ingest* self) ABSL_NO_THREAD_SAFETY_ANALYSIS { return self->stopping_; }, this),
            sync_at);
      }
      for (auto it = commits_.find(turn_); it != commits_.end() && it->first == turn_;
           it = commits_.erase(it), ++turn_) {
        run.push_back(std::move(it->second));
      }
    }
    const bool any_new = std::any_of(run.begin(), run.end(),
                                     [](const Commit& c) { return c.is_new.ok() && *c.is_new; });
    // After a sync that failed for room, a duplicate is durable only once a sync succeeds.
    const bool sync_owed = store_.SyncOwed();
    absl::Status synced = absl::OkStatus();
    if (any_new || sync_owed) {
      last_sync_ = absl::Now();
      synced = store_.SyncBatchWrites();  // durable from here
      batch_log_syncs_->Increment();
    }
    for (Commit& c : run) {
      store_.ReleaseBatchWrite(c.pending);
      absl::Status failed = !c.is_new.ok()             ? c.is_new.status()
                            : (*c.is_new || sync_owed) ? synced
                                                       : absl::OkStatus();
      if (!failed.ok()) {
        if (c.pending.busy == nullptr) {
          store_errors_->Increment();
          LogError("store: %s", failed.message());
          if (failing_since_ns_.load(std::memory_order_relaxed) == 0) {
            failing_since_ns_.store(absl::GetCurrentTimeNanos(), std::memory_order_relaxed);
          }
        }
        c.done(absl::UnavailableError(failed.message()));
        continue;
      }
      if (!*c.is_new) {
        batches_duplicate_->Increment();
        c.ack.set_duplicate(true);
        c.done(std::move(c.ack));
        continue;
      }
      batches_stored_->Increment();
      int64_t resumed_ns = 0;
      if (failing_since_ns_.exchange(0, std::memory_order_relaxed) != 0) {
        LogInfo("store: pushes are stored again");
        resumed_ns = absl::GetCurrentTimeNanos();
      }
      // Durable: answered now, analysed next (AnalysisLoop).
      QueueAnalysis(c, resumed_ns);
      c.done(std::move(c.ack));
    }
  }
}

void Ingest::QueueAnalysis(Commit& c, int64_t resumed_ns) {
  const int reports = c.batch->reports_size();
  ncclwatch::MutexLock lock(&analysis_mu_);
  // A batch larger than the whole queue waits only for an empty one.
  auto room = [this, reports]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(analysis_mu_) {
    return analyses_.empty() || queued_reports_ + reports <= kMaxQueuedReports;
  };
  if (!room()) {
    analysis_waits_->Increment();
    analysis_mu_.Await(absl::Condition(&room));
  }
  analyses_.push_back({std::move(c.batch), std::move(c.source), c.received_ns, resumed_ns});
  queued_reports_ += reports;
  ++queued_total_;
  analysis_queue_->Set(static_cast<double>(queued_reports_));
}

void Ingest::AnalysisLoop() {
  for (;;) {
    Analysis next;
    {
      ncclwatch::MutexLock lock(&analysis_mu_);
      analysis_mu_.Await(absl::Condition(
          +[](Ingest* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return !self->analyses_.empty() || self->analysis_stopping_;
          },
          this));
      if (analyses_.empty()) return;  // stopping, every acknowledged batch analysed
      next = std::move(analyses_.front());
      analyses_.pop_front();
    }
    const int reports = next.batch->reports_size();
    if (next.resumed_ns != 0) {
      // The store takes pushes again after failing them (a full disk): as after a restart, the
      // agents' backlogs arrive over their next retries, one node's before another's, so ranks
      // last heard before then are not judged silent until the agents had time to retry.
      analyzer_.StartListening(next.resumed_ns);
      RecordListeningStart(next.resumed_ns);
    }
    Analyse(*next.batch, next.source, next.received_ns,
            [this](const ncclwatch::v1::Event& e) { Handle(e); });
    next.batch.reset();  // the push's messages go before it counts as analysed (Push)
    ncclwatch::MutexLock lock(&analysis_mu_);
    queued_reports_ -= reports;
    ++analysed_total_;
    analysis_queue_->Set(static_cast<double>(queued_reports_));
  }
}

void Ingest::AwaitAnalysed() {
  ncclwatch::MutexLock lock(&analysis_mu_);
  const uint64_t target = queued_total_;
  auto done = [this, target]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(analysis_mu_) { return analysed_total_ >= target; };
  analysis_mu_.Await(absl::Condition(&done));
}

void Ingest::Analyse(const ncclwatch::v1::NodeBatch& batch, const std::string& source,
                     int64_t received_ns, const EventHandler& handle) {
  std::vector<SeriesPoint> points;
  for (const auto& report : batch.reports()) {
    reports_ingested_->Increment();
    Ingested ingested = analyzer_.Ingest(report, received_ns, source);
    for (const auto& event : ingested.events) handle(event);
    points.insert(points.end(), std::make_move_iterator(ingested.points.begin()),
                  std::make_move_iterator(ingested.points.end()));
  }
  // The batch is durable already; a lost point is re-derived from it at the next start-up.
  if (!points.empty()) StorePoints(points);
}

absl::StatusOr<uint64_t> Ingest::Replay(int64_t since_ns, int64_t now_ns, int64_t events_since_ns) {
  absl::StatusOr<int64_t> last_event = store_.LastEventTime();
  if (!last_event.ok()) return last_event.status();
  // Replay re-derives the findings of the replayed window, at slightly different times (its ticks
  // fall elsewhere between batches), so a time cut alone can let one through twice. The findings
  // stored from the window are counted by what they are about; a re-derived one that matches is
  // not stored again. One beyond them (its batch was acknowledged just before a crash, the event
  // never stored) is new. Before the window, the newest stored event's time is the cut.
  absl::StatusOr<std::vector<ncclwatch::v1::Event>> stored_events =
      store_.ListEvents(events_since_ns < 0 ? since_ns : std::min(events_since_ns, since_ns),
                        std::numeric_limits<size_t>::max());
  if (!stored_events.ok()) return stored_events.status();
  absl::flat_hash_map<std::string, int> stored;
  // Before the window (a replay shortened by --replay-max-mib): only the findings still open
  // when it starts count, each as its START, which the replay re-derives within the window.
  absl::flat_hash_map<std::string, int> open;
  for (auto e : *stored_events) {
    if (static_cast<int64_t>(e.time_unix_ns()) >= since_ns) {
      ++stored[EventIdentity(e)];
      continue;
    }
    const int change = e.phase() == ncclwatch::v1::Event::END ? -1 : 1;
    e.set_phase(ncclwatch::v1::Event::START);
    open[EventIdentity(e)] += change;
  }
  for (const auto& [start, n] : open) {
    if (n > 0) stored[start] += n;
  }
  const EventHandler handle_replayed = [&](const ncclwatch::v1::Event& event) {
    auto it = stored.find(EventIdentity(event));
    if (it != stored.end() && it->second > 0) {
      --it->second;
      return;
    }
    if (static_cast<int64_t>(event.time_unix_ns()) > *last_event) Handle(event);
  };
  // Where the live aggregator began to listen again (a start, a store that took pushes again),
  // the replay does too, at the same point of its clock: otherwise the agents' backlogs arriving
  // one node after another look like nodes gone silent. A store that cannot say loses only this.
  absl::StatusOr<std::vector<int64_t>> listening = store_.ListeningStarts();
  if (!listening.ok()) {
    LogWarning("replay: %s; silence is judged as if the aggregator had listened all along",
               listening.status().message());
    listening = std::vector<int64_t>();
  }
  auto next_listening = listening->begin();
  const auto listen_until = [&](int64_t replay_now_ns) {
    for (; next_listening != listening->end() && *next_listening <= replay_now_ns;
         ++next_listening) {
      analyzer_.StartListening(*next_listening);
    }
  };
  uint64_t batches = 0;
  // The live aggregator ticked its detectors every 250 ms between batches (expiring incomplete
  // collectives, judging hangs); replay ticks them on the batches' own clock, so that it ends in
  // the state the live run had, rather than catching up all at once at the first real Tick and
  // re-announcing findings that had already come and gone.
  constexpr int64_t kTickNs = 250'000'000;
  int64_t next_tick_ns = 0;
  absl::Status s = store_.ReplayBatches(
      since_ns, [&](const ncclwatch::v1::NodeBatch& batch, int64_t received_ns) {
        ++batches;
        if (next_tick_ns == 0) next_tick_ns = received_ns + kTickNs;
        // Across a long gap without batches, the last 10 s of ticks say all the earlier would.
        next_tick_ns = std::max(next_tick_ns, received_ns - 40 * kTickNs);
        for (; next_tick_ns <= received_ns; next_tick_ns += kTickNs) {
          listen_until(next_tick_ns);
          for (const auto& event : analyzer_.Tick(next_tick_ns)) handle_replayed(event);
        }
        listen_until(received_ns);
        Analyse(batch, batch.source(), received_ns, handle_replayed);
      });
  if (!s.ok()) return s;
  analyzer_.StartListening(now_ns);
  RecordListeningStart(now_ns);
  // And once at start-up time, as the first live tick would: verdicts that were waiting to be
  // confirmed (or to end) when the aggregator stopped are settled before the first query.
  if (batches > 0) {
    for (const auto& event : analyzer_.Tick(now_ns)) handle_replayed(event);
  }
  return batches;
}

void Ingest::RecordListeningStart(int64_t time_ns) {
  const absl::Status s = store_.RecordListeningStart(time_ns);
  if (!s.ok()) {
    store_errors_->Increment();
    LogWarning(
        "store: %s (a replay after the next restart may judge this moment's late "
        "backlogs as silence)",
        s.message());
  }
}

void Ingest::Tick(int64_t now_ns) {
  for (const auto& event : analyzer_.Tick(now_ns)) Handle(event);
  StoreDetectionSeries(now_ns);
}

void Ingest::StoreDetectionSeries(int64_t now_ns) {
  constexpr int64_t kHeartbeatNs = 60'000'000'000;
  std::vector<SeriesPoint> points;
  {
    ncclwatch::MutexLock lock(&snapshot_mu_);
    if (now_ns - last_snapshot_ns_ < history_step_ns_) return;
    last_snapshot_ns_ = now_ns;
    std::vector<SeriesPoint> now = analyzer_.Series(/*detection_only=*/true);
    const uint64_t round = ++snapshot_round_;
    for (SeriesPoint& s : now) {
      auto [it, added] = snapshot_.try_emplace(absl::HashOf(s.name, s.labels));
      Snapshot& last = it->second;
      last.round = round;
      if (!added && last.value == s.value && now_ns - last.time_ns < kHeartbeatNs) continue;
      last.value = s.value;
      last.time_ns = now_ns;
      s.time_ms = now_ns / 1'000'000;
      if (s.value != 0) {
        last.nonzero = std::make_unique<SeriesPoint>(s);
      } else {
        last.nonzero.reset();
      }
      points.push_back(std::move(s));
    }
    // Per-rank flags are exported only while set (detection_series.h): one that is gone is
    // stored as 0 once, so the history shows it clear rather than stuck at its last value.
    absl::erase_if(snapshot_, [&](auto& entry) {
      Snapshot& last = entry.second;
      if (last.round == round) return false;
      if (last.nonzero != nullptr) {
        SeriesPoint cleared = std::move(*last.nonzero);
        cleared.value = 0;
        cleared.time_ms = now_ns / 1'000'000;
        points.push_back(std::move(cleared));
      }
      return true;
    });
  }
  if (!points.empty()) StorePoints(points);
  detection_points_->Increment(points.size());
  detection_snapshots_->Increment();
}

void Ingest::StorePoints(const std::vector<SeriesPoint>& points) {
  if (absl::Status s = store_.AppendPoints(points); !s.ok()) {
    store_errors_->Increment();
    LogError("store: %s", s.message());
  }
}

namespace {

// What a log pipeline selects findings on: kind, phase, job, and where it is (the GPU's node and
// ranks, the communicator) when the finding has one.
LogFields EventFields(const ncclwatch::v1::Event& e) {
  using ncclwatch::v1::Event;
  LogFields fields = {{"kind", Event::Kind_Name(e.kind())},
                      {"phase", Event::Phase_Name(e.phase())},
                      {"job_id", e.job_id()}};
  if (e.has_root_cause()) {
    const auto& r = e.root_cause();
    fields.emplace_back("node", r.node());
    fields.emplace_back("gpu", GpuLabel(r.cuda_device()));
    if (r.has_global_rank()) fields.emplace_back("global_rank", absl::StrCat(r.global_rank()));
  } else if (e.has_straggler()) {
    const auto& s = e.straggler();
    fields.emplace_back("node", s.node());
    fields.emplace_back("comm_name", s.comm_name());
    fields.emplace_back("rank", absl::StrCat(s.rank()));
    if (s.has_global_rank()) fields.emplace_back("global_rank", absl::StrCat(s.global_rank()));
  } else if (e.has_hang()) {
    fields.emplace_back("comm_name", e.hang().comm_name());
  } else if (e.has_degraded()) {
    fields.emplace_back("comm_name", e.degraded().comm_name());
  } else if (e.has_suspect()) {
    fields.emplace_back("node", e.suspect().node());
  } else if (e.has_node_straggler()) {
    fields.emplace_back("node", e.node_straggler().node());
  } else if (e.has_node_silent()) {
    fields.emplace_back("node", e.node_silent().node());
  }
  if (!e.end_reason().empty()) fields.emplace_back("end_reason", e.end_reason());
  return fields;
}

}  // namespace

void Ingest::Handle(const ncclwatch::v1::Event& event) {
  LogInfoWith(EventFields(event), "%s", event.summary());
  if (absl::Status s = store_.PutEvent(event); !s.ok()) {
    store_errors_->Increment();
    LogError("store: %s", s.message());
  }
  metrics_
      .GetCounter("ncclwatch_aggregator_events_total", "Detection events, by kind and phase.",
                  {{"kind", ncclwatch::v1::Event::Kind_Name(event.kind())},
                   {"phase", ncclwatch::v1::Event::Phase_Name(event.phase())}})
      ->Increment();
  events_.Publish(event);
}

ncclwatch::v1::Stats Ingest::Stats() const {
  ncclwatch::v1::Stats s;
  const Analyzer::Counters c = analyzer_.counters();
  s.set_batches_stored(batches_stored_->value());
  s.set_batches_duplicate(batches_duplicate_->value());
  s.set_reports_ingested(reports_ingested_->value());
  s.set_reports_rejected(reports_rejected_->value());
  s.set_groups_completed(c.groups_completed);
  s.set_groups_expired(c.groups_expired);
  return s;
}

}  // namespace ncclwatch::aggregator

#include "aggregator/services.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/strings/numbers.h"
#include "aggregator/federate.h"
#include "aggregator/median.h"
#include "proto/samples.h"
#include "common/log.h"
#include "proto/validate.h"

namespace ncclwatch::aggregator {

namespace {

// What an event is about, without its figures: the same finding re-derived by replay has the same
// identity.
std::string EventIdentity(const ncclwatch::v1::Event& e) {
  using ncclwatch::v1::Event;
  std::string subject;
  switch (e.kind()) {
    case Event::STRAGGLER:
      subject = absl::StrCat(e.straggler().comm_hash(), "/", e.straggler().rank());
      break;
    case Event::HANG:
      subject = absl::StrCat(e.hang().comm_hash(), "/", e.hang().op(), "/", e.hang().seq());
      break;
    case Event::RANK_SILENT:
      subject = absl::StrCat(e.silent().comm_hash(), "/", e.silent().rank().rank());
      break;
    case Event::COMM_DEGRADED:
      subject = absl::StrCat(e.degraded().comm_hash());
      break;
    case Event::NODE_NETWORK_SUSPECT:
      subject = e.suspect().node();
      break;
    case Event::NODE_STRAGGLER:
      subject = absl::StrCat(e.node_straggler().comm_hash(), "/", e.node_straggler().node());
      break;
    default:
      break;
  }
  return absl::StrCat(static_cast<int>(e.kind()), "/", static_cast<int>(e.phase()), "/",
                      EventJobId(e), "/", subject);
}

}  // namespace

constexpr int kMaxReportsPerBatch = 100000;
constexpr int64_t kMaxQuerySteps = 11'000;        // as Prometheus's range query limit
constexpr size_t kMaxQueryPoints = 5'000'000;     // per QueryRange answer
constexpr int64_t kQueryLookbackMs = 5 * 60'000;  // PromQL's default lookback

AggregatorCore::AggregatorCore(Store& store, Analyzer& analyzer, MetricRegistry& m)
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
                                 "Store writes that failed (the agent retries).")) {
  m.AddCollector([this](PromTextWriter& w) {
    Analyzer::Counters c = analyzer_.counters();
    w.Family("ncclwatch_aggregator_groups_completed_total",
             "Collectives joined across all their ranks.", "counter");
    w.Sample("ncclwatch_aggregator_groups_completed_total", {}, c.groups_completed);
    w.Family("ncclwatch_aggregator_groups_expired_total",
             "Collectives dropped before every rank reported them.", "counter");
    w.Sample("ncclwatch_aggregator_groups_expired_total", {}, c.groups_expired);
    w.Family("ncclwatch_aggregator_open_groups", "Collectives waiting for more ranks.", "gauge");
    w.Sample("ncclwatch_aggregator_open_groups", {}, c.open_groups);
    w.Family("ncclwatch_aggregator_reports_capped_total",
             "Reports stored but not analysed: their job or communicator is beyond a cap "
             "(--max-jobs, --max-comms-per-job).",
             "counter");
    w.Sample("ncclwatch_aggregator_reports_capped_total", {{"reason", "too_many_jobs"}},
             c.capped_jobs);
    w.Sample("ncclwatch_aggregator_reports_capped_total", {{"reason", "too_many_comms"}},
             c.capped_comms);
    w.Family("ncclwatch_aggregator_series_capped_total",
             "Series updates refused because --max-series series exist.", "counter");
    w.Sample("ncclwatch_aggregator_series_capped_total", {}, c.capped_series);
  });
}

absl::StatusOr<ncclwatch::v1::BatchAck> AggregatorCore::Push(
    const ncclwatch::v1::NodeBatch& batch) {
  if (batch.agent_id().empty() || batch.agent_id().size() > kMaxLabelLength ||
      batch.batch_seq() == 0 || batch.reports_size() > kMaxReportsPerBatch) {
    batches_invalid_->Increment();
    return absl::InvalidArgumentError(absl::StrCat(
        "batch needs an agent_id of 1..", kMaxLabelLength, " bytes, a batch_seq > 0 and at most ",
        kMaxReportsPerBatch, " reports"));
  }
  // Keep only valid reports; the rest are counted by reason and never stored.
  ncclwatch::v1::NodeBatch clean;
  clean.set_agent_id(batch.agent_id());
  clean.set_batch_seq(batch.batch_seq());
  clean.set_node(batch.node());
  clean.set_sent_unix_ns(batch.sent_unix_ns());
  uint32_t rejected = 0;
  for (const auto& report : batch.reports()) {
    ReportVerdict verdict = ValidateReport(report);
    if (verdict.ok) {
      *clean.add_reports() = report;
      continue;
    }
    ++rejected;
    reports_rejected_->Increment();
    metrics_
        .GetCounter("ncclwatch_aggregator_reports_rejected_by_reason_total",
                    "Rank reports rejected by validation, by reason.",
                    {{"reason", verdict.reason}})
        ->Increment();
  }
  ncclwatch::v1::BatchAck ack;
  ack.set_batch_seq(batch.batch_seq());
  ack.set_rejected_reports(rejected);
  const int64_t now = absl::GetCurrentTimeNanos();
  absl::StatusOr<bool> is_new = store_.PutBatchIfNew(clean, now);
  if (!is_new.ok()) {
    store_errors_->Increment();
    LogError("store: %s", is_new.status().message());
    return absl::UnavailableError(is_new.status().message());
  }
  if (!*is_new) {
    batches_duplicate_->Increment();
    ack.set_duplicate(true);
    return ack;
  }
  batches_stored_->Increment();
  Analyse(clean, now, [this](const ncclwatch::v1::Event& e) { Handle(e); });
  return ack;
}

void AggregatorCore::Analyse(const ncclwatch::v1::NodeBatch& batch, int64_t received_ns,
                             const std::function<void(const ncclwatch::v1::Event&)>& handle) {
  std::vector<SeriesPoint> points;
  for (const auto& report : batch.reports()) {
    reports_ingested_->Increment();
    for (const auto& event : analyzer_.Ingest(report, received_ns, &points)) {
      handle(event);
    }
  }
  // The batch is durable already; a lost point is re-derived from it at the next start-up.
  if (absl::Status s = store_.AppendPoints(points); !s.ok()) {
    store_errors_->Increment();
    LogError("store: %s", s.message());
  }
}

absl::StatusOr<uint64_t> AggregatorCore::Replay(int64_t since_ns) {
  absl::StatusOr<int64_t> last_event = store_.LastEventTime();
  if (!last_event.ok()) return last_event.status();
  // Replay re-derives the findings of the replayed window, at slightly different times (its ticks
  // fall elsewhere between batches), so a time cut alone can let one through twice. The findings
  // stored from the window are counted by what they are about; a re-derived one that matches is
  // not stored again. One beyond them (its batch was acknowledged just before a crash, the event
  // never stored) is new. Before the window, the newest stored event's time is the cut.
  absl::StatusOr<std::vector<ncclwatch::v1::Event>> stored_events =
      store_.ListEvents(since_ns, std::numeric_limits<size_t>::max());
  if (!stored_events.ok()) return stored_events.status();
  absl::flat_hash_map<std::string, int> stored;
  for (const auto& e : *stored_events) ++stored[EventIdentity(e)];
  const auto handle_replayed = [&](const ncclwatch::v1::Event& event) {
    auto it = stored.find(EventIdentity(event));
    if (it != stored.end() && it->second > 0) {
      --it->second;
      return;
    }
    if (static_cast<int64_t>(event.time_unix_ns()) > *last_event) Handle(event);
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
          for (const auto& event : analyzer_.Tick(next_tick_ns)) handle_replayed(event);
        }
        Analyse(batch, received_ns, handle_replayed);
      });
  if (!s.ok()) return s;
  return batches;
}

void AggregatorCore::Tick(int64_t now_ns) {
  for (const auto& event : analyzer_.Tick(now_ns)) Handle(event);
  StoreDetectionSeries(now_ns);
}

void AggregatorCore::StoreDetectionSeries(int64_t now_ns) {
  constexpr int64_t kEveryNs = 1'000'000'000;
  constexpr int64_t kHeartbeatNs = 60'000'000'000;
  std::vector<SeriesPoint> points;
  {
    ncclwatch::MutexLock lock(&snapshot_mu_);
    if (now_ns - last_snapshot_ns_ < kEveryNs) return;  // once a second is enough history
    last_snapshot_ns_ = now_ns;
    for (ExportedSample& s : analyzer_.Series(/*detection_only=*/true)) {
      auto [it, added] = snapshot_.try_emplace(SeriesIdentity(s.name, s.labels), s.value, now_ns);
      if (!added && it->second.first == s.value && now_ns - it->second.second < kHeartbeatNs) {
        continue;
      }
      it->second = {s.value, now_ns};
      points.push_back({std::move(s.name), std::move(s.labels), now_ns / 1'000'000, s.value});
    }
  }
  if (points.empty()) return;
  if (absl::Status s = store_.AppendPoints(points); !s.ok()) {
    store_errors_->Increment();
    LogError("store: %s", s.message());
  }
}

absl::StatusOr<ncclwatch::v1::GetTraceResponse> AggregatorCore::GetTrace(
    const ncclwatch::v1::GetTraceRequest& request, int64_t now_ns) const {
  if (request.job_id().empty() || request.comm().empty()) {
    return absl::InvalidArgumentError("job_id and comm (a name or 0x hash) are required");
  }
  uint64_t hash = 0;
  const bool by_hash = request.comm().rfind("0x", 0) == 0 &&
                       absl::SimpleHexAtoi(request.comm().substr(2), &hash);
  const auto end_ms = static_cast<int64_t>(
      request.end_unix_ms() == 0 ? now_ns / 1'000'000 : request.end_unix_ms());
  const auto start_ms = static_cast<int64_t>(request.start_unix_ms());
  if (start_ms > end_ms) return absl::InvalidArgumentError("start_unix_ms is after end_unix_ms");
  const uint64_t max_ops = request.max_ops() == 0 ? 200'000 : request.max_ops();

  ncclwatch::v1::GetTraceResponse out;
  std::map<int, ncclwatch::v1::TraceRank> ranks;
  uint64_t ops = 0;
  absl::Status s = store_.ReplayBatches(
      start_ms * 1'000'000,
      [&](const ncclwatch::v1::NodeBatch& batch, int64_t) {
        for (const auto& report : batch.reports()) {
          const auto& id = report.identity();
          if (id.job_id() != request.job_id() ||
              (by_hash ? id.comm_hash() != hash : id.comm_name() != request.comm())) {
            continue;
          }
          out.set_comm_hash(id.comm_hash());
          out.set_comm_name(id.comm_name());
          out.set_nranks(id.nranks());
          ncclwatch::v1::TraceRank& rank = ranks[id.rank()];
          rank.set_rank(id.rank());
          rank.set_node(id.node());
          rank.set_cuda_device(id.cuda_device());
          ForEachSample(report, [&](const ncclwatch::v1::SampleColumn& col, const Sample& sample) {
            if (ops >= max_ops) {
              out.set_truncated(true);
              return;
            }
            ++ops;
            auto* op = rank.add_ops();
            op->set_op(col.op());
            op->set_seq(sample.seq);
            op->set_start_ns(static_cast<int64_t>(sample.gpu_start_ns));
            op->set_duration_ns(sample.duration_ns);
          });
        }
      },
      end_ms * 1'000'000);
  if (!s.ok()) return s;
  if (ranks.empty()) {
    return absl::NotFoundError(absl::StrCat("no report of communicator ", request.comm(),
                                            " of job ", request.job_id(), " in that window"));
  }
  // A collective ends at nearly the same moment everywhere: each rank's clock offset is the median
  // difference between its end times and the lowest rank's, for the collectives both sampled.
  std::map<std::pair<std::string, uint64_t>, int64_t> reference_end;
  for (const auto& op : ranks.begin()->second.ops()) {
    reference_end[{op.op(), op.seq()}] = op.start_ns() + static_cast<int64_t>(op.duration_ns());
  }
  out.set_job_id(request.job_id());
  for (auto& [r, rank] : ranks) {
    std::vector<double> diffs;
    for (const auto& op : rank.ops()) {
      auto ref = reference_end.find({op.op(), op.seq()});
      if (ref == reference_end.end()) continue;
      diffs.push_back(static_cast<double>(op.start_ns() + static_cast<int64_t>(op.duration_ns()) -
                                          ref->second));
    }
    const auto offset = static_cast<int64_t>(std::llround(Median(diffs)));
    rank.set_clock_offset_ns(offset);
    for (auto& op : *rank.mutable_ops()) op.set_start_ns(op.start_ns() - offset);
    *out.add_ranks() = std::move(rank);
  }
  return out;
}

absl::StatusOr<ncclwatch::v1::QueryRangeResponse> AggregatorCore::QueryRange(
    const ncclwatch::v1::QueryRangeRequest& request, int64_t now_ns) const {
  absl::StatusOr<Selector> selector = ParseSelector(request.selector());
  if (!selector.ok()) return selector.status();
  const auto end_ms = static_cast<int64_t>(
      request.end_unix_ms() == 0 ? now_ns / 1'000'000 : request.end_unix_ms());
  const auto start_ms = static_cast<int64_t>(request.start_unix_ms());
  if (start_ms > end_ms) {
    return absl::InvalidArgumentError("start_unix_ms is after end_unix_ms");
  }
  const int64_t step = request.step_ms();
  if (step > 0 && (end_ms - start_ms) / step > kMaxQuerySteps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "more than ", kMaxQuerySteps, " steps: raise step_ms or narrow the range"));
  }
  const size_t max_series = request.max_series() == 0 ? 1000 : request.max_series();
  uint64_t after_id = 0;  // the page token: the id of the last series already returned
  if (!request.page_token().empty() && !absl::SimpleAtoi(request.page_token(), &after_id)) {
    return absl::InvalidArgumentError("malformed page_token");
  }
  ncclwatch::v1::QueryRangeResponse out;
  size_t points = 0;
  uint64_t last_id = 0;
  for (const StoredSeries& series : store_.Series()) {
    if (series.id <= after_id || !selector->Matches(series.name, series.labels)) continue;
    if (static_cast<size_t>(out.series_size()) >= max_series) {
      out.set_truncated(true);
      out.set_next_page_token(absl::StrCat(last_id));
      break;
    }
    // With a step, the value at t is the latest point in (t - lookback, t], as in PromQL.
    const int64_t read_from = step > 0 ? start_ms - kQueryLookbackMs + 1 : start_ms;
    absl::StatusOr<std::vector<Point>> raw = store_.ReadPoints(series.id, read_from, end_ms);
    if (!raw.ok()) return raw.status();
    ncclwatch::v1::TimeSeries ts;
    if (step == 0) {
      for (const Point& p : *raw) {
        auto* tp = ts.add_points();
        tp->set_time_ms(p.time_ms);
        tp->set_value(p.value);
      }
    } else {
      size_t i = 0;
      for (int64_t t = start_ms; t <= end_ms; t += step) {
        while (i < raw->size() && (*raw)[i].time_ms <= t) ++i;
        if (i > 0 && (*raw)[i - 1].time_ms > t - kQueryLookbackMs) {
          auto* tp = ts.add_points();
          tp->set_time_ms(t);
          tp->set_value((*raw)[i - 1].value);
        }
      }
    }
    if (ts.points_size() == 0) continue;
    points += ts.points_size();
    if (points > kMaxQueryPoints) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the answer would exceed ", kMaxQueryPoints,
          " points: narrow the selector or the range, or raise step_ms"));
    }
    last_id = series.id;
    ts.set_name(series.name);
    for (const auto& [k, v] : series.labels) {
      auto* label = ts.add_labels();
      label->set_name(k);
      label->set_value(v);
    }
    *out.add_series() = std::move(ts);
  }
  return out;
}

void AggregatorCore::Handle(const ncclwatch::v1::Event& event) {
  LogInfo("%s", event.summary());
  if (absl::Status s = store_.PutEvent(event); !s.ok()) {
    store_errors_->Increment();
    LogError("store: %s", s.message());
  }
  metrics_
      .GetCounter("ncclwatch_aggregator_events_total", "Detection events, by kind and phase.",
                  {{"kind", ncclwatch::v1::Event::Kind_Name(event.kind())},
                   {"phase", ncclwatch::v1::Event::Phase_Name(event.phase())}})
      ->Increment();
  Publish(event);
}

absl::StatusOr<ncclwatch::v1::ListEventsResponse> AggregatorCore::ListEvents(
    const ncclwatch::v1::ListEventsRequest& request) const {
  const size_t limit = request.limit() == 0 ? 1000 : std::min<size_t>(request.limit(), 100000);
  ncclwatch::v1::ListEventsResponse out;
  // Filtering by job happens after the read, so read in pages until `limit` matches or the end.
  // Events of one report share a timestamp: a page resumes at the previous page's last timestamp
  // and skips the events of that timestamp already consumed (the store keeps them in write order).
  constexpr size_t kPage = 4096;
  int64_t since = static_cast<int64_t>(request.since_unix_ns());
  size_t skip = 0;  // events at time `since` consumed by earlier pages (or answers)
  if (!request.page_token().empty()) {
    // "<time_ns>.<events at that time already returned>"
    const size_t dot = request.page_token().find('.');
    uint64_t t = 0;
    uint64_t n = 0;
    if (dot == std::string::npos || !absl::SimpleAtoi(request.page_token().substr(0, dot), &t) ||
        !absl::SimpleAtoi(request.page_token().substr(dot + 1), &n)) {
      return absl::InvalidArgumentError("malformed page_token");
    }
    since = static_cast<int64_t>(t);
    skip = n;
  }
  for (;;) {
    auto page = store_.ListEvents(since, skip + kPage);
    if (!page.ok()) return page.status();
    const size_t page_size = page->size();
    int64_t current = -1;  // the timestamp being walked and how many events of it were seen
    size_t seen_at_current = 0;
    size_t seen_at_since = 0;
    int64_t last = since;
    size_t seen_at_last = 0;
    for (auto& e : *page) {
      const auto t = static_cast<int64_t>(e.time_unix_ns());
      if (t != current) {
        current = t;
        seen_at_current = 0;
      }
      ++seen_at_current;
      last = t;
      seen_at_last = seen_at_current;
      if (t == since) {
        seen_at_since = seen_at_current;
        if (seen_at_current <= skip) continue;
      }
      if (!request.job_id().empty() && EventJobId(e) != request.job_id()) continue;
      *out.add_events() = std::move(e);
      if (static_cast<size_t>(out.events_size()) >= limit) {
        out.set_next_page_token(absl::StrCat(t, ".", seen_at_current));
        return out;
      }
    }
    if (page_size < skip + kPage) return out;  // the end of the log
    if (last == since) {
      skip = seen_at_since;  // the whole page had one timestamp
    } else {
      skip = seen_at_last;
      since = last;
    }
  }
}

void AggregatorCore::AddWatcher(EventWatcher* watcher) {
  ncclwatch::MutexLock lock(&watchers_mu_);
  watchers_.insert(watcher);
}

void AggregatorCore::RemoveWatcher(EventWatcher* watcher) {
  ncclwatch::MutexLock lock(&watchers_mu_);
  watchers_.erase(watcher);
}

void AggregatorCore::Publish(const ncclwatch::v1::Event& event) {
  ncclwatch::MutexLock lock(&watchers_mu_);
  for (EventWatcher* w : watchers_) w->Deliver(event);
}

ncclwatch::v1::Stats AggregatorCore::GetStats() const {
  ncclwatch::v1::Stats s;
  Analyzer::Counters c = analyzer_.counters();
  s.set_batches_stored(batches_stored_->value());
  s.set_batches_duplicate(batches_duplicate_->value());
  s.set_reports_ingested(reports_ingested_->value());
  s.set_reports_rejected(reports_rejected_->value());
  s.set_groups_completed(c.groups_completed);
  s.set_groups_expired(c.groups_expired);
  return s;
}

namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  if (absl::IsInvalidArgument(s)) code = grpc::StatusCode::INVALID_ARGUMENT;
  if (absl::IsUnavailable(s)) code = grpc::StatusCode::UNAVAILABLE;
  if (absl::IsResourceExhausted(s)) code = grpc::StatusCode::RESOURCE_EXHAUSTED;
  if (absl::IsDataLoss(s)) code = grpc::StatusCode::DATA_LOSS;
  if (absl::IsNotFound(s)) code = grpc::StatusCode::NOT_FOUND;
  return grpc::Status(code, std::string(s.message()));
}

// Streams events to one Watch client. Events are queued (bounded: a slow client loses the oldest,
// it never stalls ingest) and written one at a time.
const grpc::Status kQueryUnauthenticated(grpc::StatusCode::UNAUTHENTICATED,
                                         "a valid bearer token is required to query");

// A Watch refused at the door: finishes at once.
class RefusedWatch final : public grpc::ServerWriteReactor<ncclwatch::v1::Event> {
 public:
  RefusedWatch() { Finish(kQueryUnauthenticated); }
  void OnDone() override { delete this; }
};

class WatchWriter final : public grpc::ServerWriteReactor<ncclwatch::v1::Event>,
                          public EventWatcher {
 public:
  explicit WatchWriter(AggregatorCore& core)
      : core_(core),
        dropped_(core.metrics().GetCounter(
            "ncclwatch_aggregator_watch_events_dropped_total",
            "Detection events dropped from a Watch stream whose client fell behind (oldest first; "
            "ingest never waits for a Watch client).")) {
    core_.AddWatcher(this);
    // Tells the client the subscription is live (it can wait for this before acting).
    HandOff(this);
    StartSendInitialMetadata();
  }

  void Deliver(const ncclwatch::v1::Event& event) override {
    const ncclwatch::v1::Event* to_write = nullptr;
    {
      ncclwatch::MutexLock lock(&mu_);
      if (finished_) return;
      if (queue_.size() >= kMaxQueued) {
        queue_.pop_front();
        dropped_->Increment();
      }
      queue_.push_back(event);
      to_write = NextWriteLocked();
    }
    // gRPC may run reactions inline: start operations outside our lock.
    if (to_write != nullptr) {
      HandOff(this);
      StartWrite(to_write);
    }
  }

  void OnWriteDone(bool ok) override {
    TakeOver(this);
    const ncclwatch::v1::Event* to_write = nullptr;
    bool finish = false;
    {
      ncclwatch::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) {
        finish = !finished_;
        finished_ = true;
      } else {
        to_write = NextWriteLocked();
      }
    }
    HandOff(this);
    if (finish) Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
    if (to_write != nullptr) StartWrite(to_write);
  }

  void OnCancel() override {
    TakeOver(this);
    bool finish = false;
    {
      ncclwatch::MutexLock lock(&mu_);
      finish = !finished_;
      finished_ = true;
    }
    HandOff(this);
    if (finish) Finish(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    TakeOver(this);
    core_.RemoveWatcher(this);  // after this returns, Deliver is never called again
    delete this;
  }

 private:
  static constexpr size_t kMaxQueued = 4096;
  // Moves the next event out of the queue into the write slot and returns it (marking a write in
  // flight), or returns nullptr. gRPC may serialize the message any time until OnWriteDone, so it
  // lives apart from the queue, which drops its oldest entries when the client falls behind.
  const ncclwatch::v1::Event* NextWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || writing_ || queue_.empty()) return nullptr;
    writing_ = true;
    writing_event_ = std::move(queue_.front());
    queue_.pop_front();
    return &writing_event_;
  }

  AggregatorCore& core_;
  Counter* const dropped_;
  ncclwatch::Mutex mu_;
  std::deque<ncclwatch::v1::Event> queue_ ABSL_GUARDED_BY(mu_);  // waiting to be written
  // The event being written; untouched from StartWrite until OnWriteDone.
  ncclwatch::v1::Event writing_event_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

namespace {

// Ends a unary call (its response already filled when `status` is OK).
grpc::ServerUnaryReactor* Finished(grpc::CallbackServerContext* context,
                                   const grpc::Status& status = grpc::Status::OK) {
  auto* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

// Ends a unary call with `answer`: its value as the response, or its error as the status.
template <typename Response>
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context,
                                 absl::StatusOr<Response> answer, Response* response) {
  if (!answer.ok()) return Finished(context, ToGrpc(answer.status()));
  *response = *std::move(answer);
  return Finished(context);
}

}  // namespace

IngestService::IngestService(AggregatorCore& core, TokenFile* token)
    : core_(core),
      gate_(token, core.metrics().GetCounter(
                       "ncclwatch_aggregator_pushes_unauthenticated_total",
                       "Batch pushes refused for a missing or wrong bearer token.")) {}

grpc::ServerUnaryReactor* IngestService::Push(grpc::CallbackServerContext* context,
                                              const ncclwatch::v1::NodeBatch* request,
                                              ncclwatch::v1::BatchAck* response) {
  if (!gate_.Admits(*context)) {
    return Finished(context, grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                          "a valid bearer token is required to push batches"));
  }
  return Answer(context, core_.Push(*request), response);
}

grpc::ServerUnaryReactor* QueryService::ListStragglers(
    grpc::CallbackServerContext* context, const ncclwatch::v1::ListStragglersRequest* request,
    ncclwatch::v1::ListStragglersResponse* response) {
  if (!gate_.Admits(*context)) return Finished(context, kQueryUnauthenticated);
  for (auto& s : core_.analyzer().Stragglers(request->job_id())) {
    *response->add_stragglers() = std::move(s);
  }
  return Finished(context);
}

grpc::ServerUnaryReactor* QueryService::ListHangs(grpc::CallbackServerContext* context,
                                                  const ncclwatch::v1::ListHangsRequest* request,
                                                  ncclwatch::v1::ListHangsResponse* response) {
  if (!gate_.Admits(*context)) return Finished(context, kQueryUnauthenticated);
  *response = core_.analyzer().Hangs(request->job_id(), absl::GetCurrentTimeNanos());
  return Finished(context);
}

grpc::ServerUnaryReactor* QueryService::ListDegraded(
    grpc::CallbackServerContext* context, const ncclwatch::v1::ListDegradedRequest* request,
    ncclwatch::v1::ListDegradedResponse* response) {
  if (!gate_.Admits(*context)) return Finished(context, kQueryUnauthenticated);
  *response = core_.analyzer().Degraded(request->job_id());
  return Finished(context);
}

grpc::ServerUnaryReactor* QueryService::ListEvents(grpc::CallbackServerContext* context,
                                                   const ncclwatch::v1::ListEventsRequest* request,
                                                   ncclwatch::v1::ListEventsResponse* response) {
  if (!gate_.Admits(*context)) return Finished(context, kQueryUnauthenticated);
  return Answer(context, core_.ListEvents(*request), response);
}

grpc::ServerUnaryReactor* QueryService::GetStats(grpc::CallbackServerContext* context,
                                                 const ncclwatch::v1::GetStatsRequest*,
                                                 ncclwatch::v1::Stats* response) {
  if (!gate_.Admits(*context)) return Finished(context, kQueryUnauthenticated);
  *response = core_.GetStats();
  return Finished(context);
}

grpc::ServerUnaryReactor* QueryService::QueryRange(grpc::CallbackServerContext* context,
                                                   const ncclwatch::v1::QueryRangeRequest* request,
                                                   ncclwatch::v1::QueryRangeResponse* response) {
  if (!gate_.Admits(*context)) return Finished(context, kQueryUnauthenticated);
  return Answer(context, core_.QueryRange(*request, absl::GetCurrentTimeNanos()), response);
}

grpc::ServerUnaryReactor* QueryService::GetTrace(grpc::CallbackServerContext* context,
                                                 const ncclwatch::v1::GetTraceRequest* request,
                                                 ncclwatch::v1::GetTraceResponse* response) {
  if (!gate_.Admits(*context)) return Finished(context, kQueryUnauthenticated);
  return Answer(context, core_.GetTrace(*request, absl::GetCurrentTimeNanos()), response);
}

grpc::ServerUnaryReactor* QueryService::ListJobs(grpc::CallbackServerContext* context,
                                                 const ncclwatch::v1::ListJobsRequest*,
                                                 ncclwatch::v1::ListJobsResponse* response) {
  if (!gate_.Admits(*context)) return Finished(context, kQueryUnauthenticated);
  for (auto& j : core_.analyzer().Jobs()) *response->add_jobs() = std::move(j);
  return Finished(context);
}

grpc::ServerUnaryReactor* QueryService::ListComms(grpc::CallbackServerContext* context,
                                                  const ncclwatch::v1::ListCommsRequest* request,
                                                  ncclwatch::v1::ListCommsResponse* response) {
  if (!gate_.Admits(*context)) return Finished(context, kQueryUnauthenticated);
  for (auto& c : core_.analyzer().Comms(request->job_id())) *response->add_comms() = std::move(c);
  return Finished(context);
}

grpc::ServerWriteReactor<ncclwatch::v1::Event>* QueryService::Watch(
    grpc::CallbackServerContext* context, const ncclwatch::v1::WatchRequest*) {
  if (!gate_.Admits(*context)) return new RefusedWatch();
  return new WatchWriter(core_);
}

QueryService::QueryService(AggregatorCore& core, TokenFile* token)
    : core_(core),
      gate_(token, core.metrics().GetCounter(
                       "ncclwatch_aggregator_queries_unauthenticated_total",
                       "Query API calls refused for a missing or wrong bearer token.")) {}

}  // namespace ncclwatch::aggregator

#include "aggregator/analysis/analyzer.h"

#include <algorithm>
#include <map>
#include <set>
#include <span>
#include <tuple>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "aggregator/analysis/detection_series.h"
#include "aggregator/analysis/report_input.h"
#include "common/log.h"
#include "proto/samples.h"

namespace ncclwatch::aggregator {

Analyzer::Analyzer(AnalyzerOptions options)
    : registry_(RegistryOptions{options.max_jobs, options.max_comms_per_job,
                                options.max_jobs_per_agent, options.max_comms_per_agent,
                                options.series_ttl_ns}),
      series_(options.max_series, options.series_ttl_ns, options.max_series_bytes_per_agent),
      detectors_(options),
      own_time_(options.own_time),
      verdicts_(options.root_cause),
      unexplained_options_(options.unexplained),
      job_end_silence_ns_(options.job_end_silence_ns),
      report_points_(options.report_points),
      expiry_every_ns_(std::clamp<int64_t>(options.series_ttl_ns / 60, 1, 1'000'000'000)) {}

void Analyzer::LatenessChangesLocked(const CommKey& key, CommEntry& entry,
                                     const std::vector<FlagChange>& changes, int64_t now_ns,
                                     std::vector<ncclwatch::v1::Event>* events) {
  for (const FlagChange& change : changes) {
    const int rank = change.score.rank;
    if (change.score.flagged) entry.flagged_since_ns[rank] = now_ns;
    // With own times, lateness is a consequence: it pages only through its root cause. Lateness
    // in point-to-point exchanges never pages (analyzer_unexplained.cc says why).
    if (!entry.own_times && change.score.op != kP2pClass) {
      events->push_back(StragglerEvent(key, entry.who, change, entry.FlaggedSince(rank), now_ns));
    }
    if (!change.score.flagged) entry.flagged_since_ns.erase(rank);
  }
  if (!changes.empty() && !entry.own_times) JudgeNodesLocked(key, entry, now_ns, events);
}

void Analyzer::JudgeNodesLocked(const CommKey& key, const CommEntry& entry, int64_t now_ns,
                                std::vector<ncclwatch::v1::Event>* events) {
  // Only reached for a communicator whose collectives complete: every rank has reported.
  std::vector<std::string> node_of_rank(entry.who.nranks);
  for (const auto& [r, who] : entry.who.ranks) node_of_rank[r] = who.node;
  for (const SlowNodeChange& change :
       detectors_.slow_nodes.Update(key, node_of_rank, detectors_.stragglers.Scores(key))) {
    events->push_back(SlowNodeEvent(key, entry.who, change, now_ns));
  }
}

Ingested Analyzer::Ingest(const ncclwatch::v1::RankReport& report, int64_t now_ns,
                          const std::string& source) {
  ncclwatch::MutexLock lock(&mu_);
  clock_ns_ = std::max(clock_ns_, now_ns);
  ++reports_;
  const auto& id = report.identity();
  const CommKey key{id.job_id(), id.comm_hash()};
  // A job reporting again after it ended (restarted under the same id) is running again; a late
  // final report of it only ends it once more.
  if (!report.final() && lifecycle_.IsEnded(id.job_id())) lifecycle_.Resume(id.job_id());
  bool restarted = false;
  const bool source_was_capped = registry_.SourceCapped(source);
  bool new_process = false;
  RankWho* who = nullptr;
  CommEntry* entry = registry_.Record(key, id, now_ns, source, &restarted, &new_process, &who);
  if (entry == nullptr) {  // beyond a cap: counted by the registry
    if (!source_was_capped && registry_.SourceCapped(source)) {
      LogWarning(
          "%s introduced more jobs or communicators than --max-jobs-per-agent or "
          "--max-comms-per-agent allow; its new ones are not analysed (counted in "
          "ncclwatch_aggregator_reports_capped_total)",
          source.empty() ? "a source" : source);
    }
    return {};
  }
  if (restarted) {
    // New communicator, or one re-created with another size under the same hash.
    late_walks_.erase(key);
    detectors_.Recreated(key);
    processes_.Forget(key);
    own_time_.Forget(key);
  }
  Ingested out;
  ToRankInterval(report, &interval_);
  const RankInterval& interval = interval_;
  // The registry compared the rank's process and node with the ones it last had: no lookup here,
  // no key built for every report of a known rank.
  if (new_process || restarted) {
    detectors_.degraded.Observe(key, interval);
    const ProcessKey process{id.job_id(), id.host(), id.pid(), id.cuda_device()};
    processes_.Set(key, id.rank(), process);
    if (families_.Set(key, entry->who.nranks, entry->who.n_nodes)) families_stamp_ = ++stamps_;
    entry->stamp = ++stamps_;  // a rank joined or moved (its process, its node)
    own_time_.SetMember(key, id.nranks(), id.rank(), process, id.node());
    for (const SilentNodeChange& change : detectors_.silent_nodes.Member(
             key, id.rank(), who->node,
             absl::StrCat(id.host(), "/", id.pid(), "/", id.cuda_device()), now_ns)) {
      out.events.push_back(SilentNodeEvent(change, now_ns));
    }
  }
  // The rank's labels are made of what labels_hash hashes (CommRegistry::RankLabels).
  series_.AddReport(
      who->labels_hash, [&] { return CommRegistry::RankLabels(key, entry->who, id.rank()); },
      report, now_ns, report_points_ ? &out.points : nullptr, source, &who->series_slot);

  // Telemetry that lied (the plugin left those operations out): counted for `comms`.
  if (report.drops().bogus_timings() > 0) {
    entry->bogus_timings[id.rank()] = report.drops().bogus_timings();
  }
  if (report.drops().completions_lost() > 0) {
    entry->completions_lost[id.rank()] = report.drops().completions_lost();
  } else if (!entry->completions_lost.empty()) {
    entry->completions_lost.erase(id.rank());  // its late completions arrived after all
  }
  detectors_.hangs.Update(key, interval, now_ns, &who->hang_slot);
  // Validated: the interval ends after it starts (the own-time analysis bounds it).
  const int64_t report_interval_ns = static_cast<int64_t>(std::min<uint64_t>(
      report.interval_end_unix_ns() - report.interval_start_unix_ns(), uint64_t{INT64_MAX}));
  // Under mu_: the lambda runs within this call.
  ForEachSample(report, [&](const ncclwatch::v1::SampleColumn& col,
                            const Sample& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // The plugin writes 0 for "no initial-sync phase seen" (KernelPhase off, NCCL before 2.31).
    const int64_t sync_wait_ns = s.sync_wait_ns > 0 ? static_cast<int64_t>(s.sync_wait_ns) : -1;
    // A point-to-point column joins its exchange's other end (validated: a Send or Recv with
    // another rank of the communicator).
    const bool exchange = col.has_peer();
    auto group = exchange ? detectors_.correlator.AddP2p(
                                key, id.nranks(), col.op() == "Send", id.rank(), col.peer(), s.seq,
                                s.duration_ns, s.gpu_start_ns, now_ns, s.own_time_ns, sync_wait_ns,
                                &entry->joining)
                          : detectors_.correlator.Add(key, id.nranks(), col.op(), s.seq, id.rank(),
                                                      s.duration_ns, s.gpu_start_ns, now_ns,
                                                      s.own_time_ns, sync_wait_ns, &entry->joining);
    if (!group) return;
    entry->stamp = ++stamps_;
    if (!entry->own_times) {
      entry->own_times = std::count_if(group->own_time_ns.begin(), group->own_time_ns.end(),
                                       [](int64_t t) { return t >= 0; }) >= 2;
    }
    // The own times lent to the analysis and given back: the correlator's group keeps their room
    // (an allocation per group otherwise, of 2 KiB for a 256-rank one).
    OwnTimeGroup own{key,
                     group->op,
                     exchange ? 0 : col.bytes(),
                     static_cast<int>(id.n_nodes()),
                     std::move(group->own_time_ns),
                     now_ns,
                     group->members,
                     report_interval_ns};
    const std::vector<SlowProcess> verdicts = own_time_.Observe(own, &entry->own_time);
    group->own_time_ns = std::move(own.own_time_ns);
    bool class_flags_changed = false;
    LatenessChangesLocked(
        key, *entry, detectors_.stragglers.Observe(*group, &entry->lateness, &class_flags_changed),
        now_ns, &out.events);
    // What the tick walks for lateness without an origin: a flag in a pipeline's exchanges, most
    // of them design (analyzer_unexplained.cc), never pages there, and thousands of a large job's
    // communicators have one.
    if (class_flags_changed) {
      if (detectors_.stragglers.FlaggedBesides(key, kP2pClass)) {
        late_comms_.insert(key);
      } else {
        late_comms_.erase(key);
        late_walks_.erase(key);
      }
    }
    // The wire's speed: the collective's shortest kernel, its last arriver's, waited for nobody.
    // A communicator some of whose ranks never reported is not judged (coverage reports it).
    // (Exchanges are not: their sizes change with the routing, their pairs with the schedule.)
    if (!exchange && entry->unreported == 0 && !group->duration_ns.empty()) {
      const uint64_t fastest =
          *std::min_element(group->duration_ns.begin(), group->duration_ns.end());
      // Its window follows when it ran, on rank 0's GPU clock (arrival when no kernel timer).
      const int64_t ran_at_ns =
          group->gpu_start_ns[0] > 0 ? static_cast<int64_t>(group->gpu_start_ns[0]) : now_ns;
      for (const DegradedChange& change : detectors_.degraded.ObserveCollective(
               key, id.nranks(), col.op(), col.bytes(), fastest, ran_at_ns)) {
        out.events.push_back(DegradedEvent(change, registry_.FindWho(change.comm.comm), now_ns));
      }
    }
    if (!verdicts.empty()) {
      VerdictEventsLocked(verdicts_.Observe(verdicts, now_ns, GpusOnNodeLocked()), now_ns,
                          &out.events);
    }
  });
  lifecycle_.Filter(&out.events);
  if (report.final()) {
    entry->finalized.insert(id.rank());
    const auto comms = registry_.JobComms(key.job_id);
    if (std::all_of(comms.begin(), comms.end(),
                    [](const auto* comm) { return comm->second.Finished(); })) {
      EndJobLocked(key.job_id, "every rank sent its final report", now_ns, &out.events);
    }
  }
  return out;
}

std::vector<ncclwatch::v1::Event> Analyzer::Tick(int64_t now_ns) {
  ncclwatch::MutexLock lock(&mu_);
  clock_ns_ = std::max(clock_ns_, now_ns);
  std::vector<ncclwatch::v1::Event> events;
  for (const HangChange& change : detectors_.hangs.Evaluate(now_ns)) {
    if (!change.silent) continue;
    SilentEventLocked(change, now_ns, &events);
    for (const SilentNodeChange& node : detectors_.silent_nodes.SetSilent(
             change.rank.comm, change.rank.rank, change.start, now_ns)) {
      events.push_back(SilentNodeEvent(node, now_ns));
    }
  }
  HangEventsLocked(now_ns, &events);
  CoverageEventsLocked(now_ns, &events);
  series_.Expire(now_ns);  // paced by itself (a sixtieth of its TTL)
  // These expiry walks visit every communicator: once a second is plenty for lifetimes of tens of
  // seconds (incomplete collectives) to minutes (communicators), and a tick comes every 250 ms.
  const bool walk = now_ns - last_expiry_ns_ >= expiry_every_ns_;
  if (walk) {
    last_expiry_ns_ = now_ns;
    detectors_.correlator.Expire(now_ns);
    registry_.Expire(now_ns, [this](const CommKey& key)
                                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ForgetLocked(key); });
  }
  VerdictEventsLocked(verdicts_.Tick(now_ns, GpusOnNodeLocked()), now_ns, &events);
  UnexplainedLatenessLocked(now_ns, &events);
  lifecycle_.Filter(&events);
  if (walk) EndSilentJobsLocked(now_ns, &events);  // a walk of every communicator too
  lifecycle_.Expire(now_ns);
  return events;
}

void Analyzer::ForgetLocked(const CommKey& key) {
  detectors_.Forget(key);
  processes_.Forget(key);
  if (families_.Forget(key)) families_stamp_ = ++stamps_;
  late_comms_.erase(key);  // its origin-not-found pages end at the next Tick
  late_walks_.erase(key);
  for (auto it = silent_processes_.begin(); it != silent_processes_.end();) {
    it->second.erase(key);
    it = it->second.empty() ? silent_processes_.erase(it) : std::next(it);
  }
  // GPUs no longer slow without this communicator's evidence: their findings end after the hold.
  verdicts_.Observe(own_time_.Forget(key), clock_ns_, GpusOnNodeLocked());
}

std::vector<SeriesPoint> Analyzer::Series(bool detection_only) const {
  std::vector<SeriesPoint> out;
  if (!detection_only) {
    // The per-rank series (a million at 16,384 ranks) are copied a few hundred ranks at a time,
    // the lock let go in between, so that ingest never waits for a whole copy (a /federate of
    // everything had held it for seconds). Ranks added meanwhile come with the next copy.
    std::vector<SeriesTable::RankKey> keys;
    {
      ncclwatch::MutexLock lock(&mu_);
      keys = series_.Keys();
      out.reserve(series_.size());
    }
    constexpr size_t kRanksPerHold = 256;
    const std::span<const SeriesTable::RankKey> all(keys);
    for (size_t from = 0; from < all.size(); from += kRanksPerHold) {
      if (from > 0 && between_series_copies_) between_series_copies_();
      ncclwatch::MutexLock lock(&mu_);
      series_.AppendTo(all.subspan(from, std::min(kRanksPerHold, all.size() - from)), &out);
    }
  }
  ncclwatch::MutexLock lock(&mu_);
  AppendDetectionSeries(registry_, detectors_, verdicts_, hang_origins_, UnexplainedViewLocked(),
                        clock_ns_, &out);
  return out;
}

Analyzer::Counters Analyzer::counters() const {
  ncclwatch::MutexLock lock(&mu_);
  return Counters{reports_,
                  detectors_.correlator.completed(),
                  detectors_.correlator.expired(),
                  detectors_.correlator.refused(),
                  detectors_.correlator.open_groups(),
                  registry_.capped_jobs(),
                  registry_.capped_comms(),
                  series_.capped(),
                  registry_.capped_source_jobs(),
                  registry_.capped_source_comms(),
                  series_.capped_by_source()};
}

}  // namespace ncclwatch::aggregator

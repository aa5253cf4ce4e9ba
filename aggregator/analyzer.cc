#include "aggregator/analyzer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "proto/samples.h"

namespace ncclwatch::aggregator {
namespace {

// A detection event's header: kind, phase, time.
ncclwatch::v1::Event NewEvent(ncclwatch::v1::Event::Kind kind, bool start, int64_t now_ns) {
  ncclwatch::v1::Event event;
  event.set_kind(kind);
  event.set_phase(start ? ncclwatch::v1::Event::START : ncclwatch::v1::Event::END);
  event.set_time_unix_ns(now_ns);
  return event;
}

ncclwatch::v1::NodeSuspectInfo MakeSuspectInfo(const SuspectView& s) {
  ncclwatch::v1::NodeSuspectInfo info;
  info.set_job_id(s.job_id);
  info.set_node(s.node);
  info.set_degraded_comms(static_cast<uint32_t>(s.degraded_comms));
  return info;
}

std::string SeriesKey(const std::string& name, const LabelPairs& labels) {
  std::string key = name;
  for (const auto& [k, v] : labels) absl::StrAppend(&key, "\x1f", k, "=", v);
  return key;
}

}  // namespace

std::string_view ExportedSeriesHelp(std::string_view name) {
  static const std::map<std::string_view, std::string_view> kHelp = {
      {"nccl_bus_bandwidth_gbs",
       "Collective bus bandwidth in GB/s, geometric mean over the rank's last interval "
       "(NCCL Inspector compatible)."},
      {"nccl_collective_exec_time_microseconds",
       "Mean collective execution time in microseconds over the rank's last interval "
       "(NCCL Inspector compatible)."},
      {"nccl_p2p_bus_bandwidth_gbs",
       "Point-to-point bus bandwidth in GB/s, geometric mean over the rank's last interval "
       "(NCCL Inspector compatible)."},
      {"nccl_p2p_exec_time_microseconds",
       "Mean point-to-point execution time in microseconds over the rank's last interval "
       "(NCCL Inspector compatible)."},
      {"ncclwatch_straggler", "1 while the rank is flagged as consistently late, else 0."},
      {"ncclwatch_rank_lateness_seconds",
       "Median time the rank reaches collectives after the first rank of its communicator."},
      {"ncclwatch_hang",
       "1 while a collective of the communicator has made no progress for longer than the hang "
       "threshold, else 0."},
      {"ncclwatch_hang_age_seconds",
       "Age of the communicator's hung collective (0 when none)."},
      {"ncclwatch_rank_missing",
       "1 while the rank is missing from its communicator's hung collective: it never reached "
       "it, or went silent."},
      {"ncclwatch_comm_degraded",
       "1 while the communicator's bus bandwidth stays below the baseline of communicators of "
       "its class (nvlink or hybrid), collective, message size and size, else 0."},
      {"ncclwatch_node_network_suspect",
       "1 while the node's network is the common factor of the job's degraded hybrid "
       "communicators (its NVLink-only communicators being healthy)."},
      {"ncclwatch_node_straggler",
       "1 while every rank the communicator has on the node is flagged slow, else 0."},
      {"ncclwatch_rank_silent",
       "1 while the rank's reports have stopped and the rest of its communicator carries on."},
      {"ncclwatch_plugin_drops_total",
       "What the rank's plugin could not record since its process started, by kind (events, "
       "records, reports, samples_capped, channel_events_orphaned): a pool, ring or queue was "
       "full."},
  };
  auto it = kHelp.find(name);
  return it == kHelp.end() ? std::string_view() : it->second;
}

const std::string& EventJobId(const ncclwatch::v1::Event& e) {
  switch (e.kind()) {
    case ncclwatch::v1::Event::STRAGGLER:
      return e.straggler().job_id();
    case ncclwatch::v1::Event::HANG:
      return e.hang().job_id();
    case ncclwatch::v1::Event::RANK_SILENT:
      return e.silent().job_id();
    case ncclwatch::v1::Event::COMM_DEGRADED:
      return e.degraded().job_id();
    case ncclwatch::v1::Event::NODE_NETWORK_SUSPECT:
      return e.suspect().job_id();
    case ncclwatch::v1::Event::NODE_STRAGGLER:
      return e.node_straggler().job_id();
    default:
      return e.straggler().job_id();  // an unset message: ""
  }
}

std::string HangOpText(const ncclwatch::v1::HangInfo& h) {
  if (h.op() == kP2pHangOp) return "Send/Recv";
  return absl::StrFormat("%s #%d", h.op(), h.seq());
}

Analyzer::Analyzer(AnalyzerOptions options)
    : options_(options),
      correlator_(options.correlator),
      stragglers_(options.straggler),
      hangs_(options.hang),
      degraded_(options.degraded) {}

LabelPairs Analyzer::RankLabels(const CommKey& key, const CommMeta& meta, int rank) const {
  const RankMeta& rm = meta.ranks[rank];
  return {{"job_id", key.job_id},
          {"comm_hash", CommHashText(key.comm_hash)},
          {"comm_name", OrUnknown(meta.comm_name)},
          {"rank", absl::StrCat(rank)},
          {"node", OrUnknown(rm.node)},
          {"gpu", GpuLabel(rm.cuda_device)}};
}

void Analyzer::SetSeries(const CommKey& comm, std::string name, LabelPairs labels, double value,
                         int64_t sample_ns, int64_t now_ns) {
  std::string key = SeriesKey(name, labels);
  auto it = series_.find(key);
  if (it == series_.end()) {
    if (series_.size() >= options_.max_series) {  // neither exported nor stored
      ++capped_series_;
      return;
    }
    it = series_.try_emplace(std::move(key)).first;
  }
  if (points_out_ != nullptr) points_out_->push_back({name, labels, sample_ns / 1'000'000, value});
  SeriesEntry& e = it->second;
  e.sample = ExportedSample{std::move(name), std::move(labels), value, sample_ns / 1'000'000};
  e.comm = comm;
  e.updated_ns = now_ns;
}

void Analyzer::UpdateStatsSeries(const CommKey& key, const CommMeta& meta,
                                 const ncclwatch::v1::RankReport& report, int64_t now_ns) {
  const int rank = report.identity().rank();
  // A value is stamped with the end of the interval it describes (the rank's clock), so that
  // reports delivered together -- e.g. after an outage -- stay distinct points.
  const auto end_ns = static_cast<int64_t>(report.interval_end_unix_ns());
  const int64_t sample_ns = end_ns > 0 ? end_ns : now_ns;
  for (InspectorSample& sample : InspectorSamples(report)) {
    LabelPairs labels = RankLabels(key, meta, rank);
    labels.insert(labels.end(), std::make_move_iterator(sample.labels.begin()),
                  std::make_move_iterator(sample.labels.end()));
    SetSeries(key, sample.name, std::move(labels), sample.value, sample_ns, now_ns);
  }
  // What the plugin could not record (cumulative since the training process started): a pool,
  // ring or queue was full. Anything above zero means findings may miss operations.
  if (report.has_drops()) {
    const auto& d = report.drops();
    const std::pair<const char*, uint64_t> kinds[] = {
        {"events", d.events_dropped()},
        {"records", d.records_dropped()},
        {"reports", d.reports_dropped()},
        {"samples_capped", d.samples_capped()},
        {"channel_events_orphaned", d.channel_events_orphaned()}};
    for (const auto& [kind, value] : kinds) {
      LabelPairs labels = RankLabels(key, meta, rank);
      labels.emplace_back("kind", kind);
      SetSeries(key, "ncclwatch_plugin_drops_total", std::move(labels),
                static_cast<double>(value), sample_ns, now_ns);
    }
  }
}

ncclwatch::v1::StragglerInfo Analyzer::MakeStragglerInfo(const CommKey& key,
                                                         const CommMeta& meta,
                                                         const RankScore& score) const {
  ncclwatch::v1::StragglerInfo info;
  info.set_job_id(key.job_id);
  info.set_comm_hash(key.comm_hash);
  info.set_comm_name(meta.comm_name);
  info.set_rank(score.rank);
  info.set_nranks(meta.nranks);
  if (score.rank < static_cast<int>(meta.ranks.size())) {
    info.set_node(meta.ranks[score.rank].node);
    info.set_cuda_device(meta.ranks[score.rank].cuda_device);
  }
  info.set_lateness_seconds(score.lateness_ns * 1e-9);
  info.set_window_collectives(static_cast<uint32_t>(score.observations));
  info.set_arrived_last_fraction(score.arrived_last_fraction);
  info.set_excess_seconds(score.excess_ns * 1e-9);
  info.set_peer_baseline_seconds(score.peer_baseline_ns * 1e-9);
  info.set_peer_z_score(score.peer_z);
  info.set_history_ratio(score.history_ratio);
  info.set_clocks_aligned(score.clocks_aligned);
  auto since = meta.flagged_since_ns.find(score.rank);
  if (since != meta.flagged_since_ns.end()) info.set_since_unix_ns(since->second);
  return info;
}

ncclwatch::v1::Event Analyzer::StragglerEvent(const CommKey& key, CommMeta& meta,
                                              const FlagChange& change, int64_t now_ns) {
  const int rank = change.score.rank;
  if (change.score.flagged) meta.flagged_since_ns[rank] = now_ns;
  ncclwatch::v1::Event event =
      NewEvent(ncclwatch::v1::Event::STRAGGLER, change.score.flagged, now_ns);
  *event.mutable_straggler() = MakeStragglerInfo(key, meta, change.score);
  const RankMeta& who = meta.ranks[rank];
  event.set_summary(absl::StrFormat(
      "%s: rank %d (node %s, %s) of communicator %s %s in job %s %s: median lateness %.2f ms "
      "(%.2f ms beyond its punctual peers, z %.1f, %.1fx its own usual; %s) over %d "
      "collectives, arrived last in %.0f%%",
      change.score.flagged ? "STRAGGLER" : "RECOVERED", rank, OrUnknown(who.node),
      GpuLabel(who.cuda_device), OrUnknown(meta.comm_name), CommHashText(key.comm_hash),
      key.job_id, change.score.flagged ? "is slow" : "is back in step",
      change.score.lateness_ns / 1e6, change.score.excess_ns / 1e6, change.score.peer_z,
      change.score.history_ratio,
      change.score.clocks_aligned ? "aligned GPU clocks" : "kernel durations",
      change.score.observations, change.score.arrived_last_fraction * 100));
  if (!change.score.flagged) meta.flagged_since_ns.erase(rank);
  return event;
}

void Analyzer::UpdateSlowNodes(const CommKey& key, CommMeta& meta, int64_t now_ns,
                               std::vector<ncclwatch::v1::Event>* events) {
  std::map<std::string, std::vector<int>> ranks_of;
  for (int r = 0; r < static_cast<int>(meta.ranks.size()); ++r) {
    ranks_of[meta.ranks[r].node].push_back(r);
  }
  std::set<std::string> slow;
  if (ranks_of.size() > 1) {  // a node can only be singled out against other nodes
    std::vector<bool> flagged(meta.ranks.size(), false);
    for (const RankScore& s : stragglers_.Scores(key)) {
      if (s.rank < static_cast<int>(flagged.size())) flagged[s.rank] = s.flagged;
    }
    for (const auto& [node, ranks] : ranks_of) {
      if (node.empty()) continue;
      if (std::all_of(ranks.begin(), ranks.end(), [&](int r) { return flagged[r]; })) {
        slow.insert(node);
      }
    }
  }
  auto emit = [&](const std::string& node, bool start) {
    ncclwatch::v1::Event event = NewEvent(ncclwatch::v1::Event::NODE_STRAGGLER, start, now_ns);
    auto* info = event.mutable_node_straggler();
    info->set_job_id(key.job_id);
    info->set_comm_hash(key.comm_hash);
    info->set_comm_name(meta.comm_name);
    info->set_node(node);
    for (int r : ranks_of[node]) info->add_ranks(r);
    event.set_summary(absl::StrFormat(
        "%s: node %s in communicator %s %s of job %s: %s", start ? "SLOW NODE" : "NODE RECOVERED",
        node, OrUnknown(meta.comm_name), CommHashText(key.comm_hash), key.job_id,
        start ? absl::StrFormat("all its %d ranks are late to the collectives",
                                info->ranks_size())
              : std::string("its ranks are back in step")));
    events->push_back(std::move(event));
  };
  for (const auto& node : meta.slow_nodes) {
    if (!slow.count(node)) emit(node, false);
  }
  for (const auto& node : slow) {
    if (!meta.slow_nodes.count(node)) emit(node, true);
  }
  meta.slow_nodes = std::move(slow);
}

std::vector<ncclwatch::v1::Event> Analyzer::Ingest(const ncclwatch::v1::RankReport& report,
                                                   int64_t now_ns,
                                                   std::vector<SeriesPoint>* points) {
  ncclwatch::MutexLock lock(&mu_);
  clock_ns_ = std::max(clock_ns_, now_ns);
  points_out_ = points;
  ++reports_;
  const auto& id = report.identity();
  CommKey key{id.job_id(), id.comm_hash()};
  auto found = comms_.find(key);
  if (found == comms_.end()) {
    auto job = comms_per_job_.find(id.job_id());
    if (job == comms_per_job_.end() && comms_per_job_.size() >= options_.max_jobs) {
      ++capped_jobs_;
      return {};
    }
    if (job != comms_per_job_.end() && job->second >= options_.max_comms_per_job) {
      ++capped_comms_;
      return {};
    }
    ++comms_per_job_[id.job_id()];
    found = comms_.try_emplace(key).first;
  }
  CommMeta& meta = found->second;
  if (meta.nranks != id.nranks()) {
    // New communicator, or one re-created with another size under the same hash: start over.
    meta.nranks = id.nranks();
    meta.ranks.assign(id.nranks(), RankMeta{});
    meta.flagged_since_ns.clear();
    meta.slow_nodes.clear();
    correlator_.Forget(key);
    stragglers_.Forget(key);
  }
  meta.comm_name = id.comm_name();
  meta.n_nodes = id.n_nodes();
  RankMeta& rm = meta.ranks[id.rank()];
  rm.node = id.node();
  rm.cuda_device = id.cuda_device();
  rm.gpu_uuid = id.gpu_uuid();
  rm.pod = id.pod();
  rm.pod_namespace = id.pod_namespace();
  rm.container = id.container();
  rm.last_seen_ns = now_ns;

  UpdateStatsSeries(key, meta, report, now_ns);
  points_out_ = nullptr;
  hangs_.Update(key, report, now_ns);

  std::vector<ncclwatch::v1::Event> events;
  for (const DegradedChange& change : degraded_.Observe(key, report)) {
    events.push_back(DegradedEvent(change, now_ns));
  }
  ForEachSample(report, [&](const ncclwatch::v1::SampleColumn& col, const Sample& s) {
    auto group = correlator_.Add(key, id.nranks(), col.op(), s.seq, id.rank(), s.duration_ns,
                                 s.gpu_start_ns, now_ns);
    if (!group) return;
    auto changes = stragglers_.Observe(*group);
    for (const FlagChange& change : changes) {
      events.push_back(StragglerEvent(key, meta, change, now_ns));
    }
    if (!changes.empty()) UpdateSlowNodes(key, meta, now_ns, &events);
  });
  return events;
}

void Analyzer::FillRank(const CommKey& key, int rank, ncclwatch::v1::RankRef* out) const {
  out->set_rank(rank);
  out->set_cuda_device(-1);
  auto it = comms_.find(key);
  if (it == comms_.end() || rank < 0 || rank >= static_cast<int>(it->second.ranks.size())) return;
  const RankMeta& rm = it->second.ranks[rank];
  out->set_node(rm.node);
  out->set_cuda_device(rm.cuda_device);
  out->set_gpu_uuid(rm.gpu_uuid);
  out->set_pod(rm.pod);
  out->set_pod_namespace(rm.pod_namespace);
  out->set_container(rm.container);
}

ncclwatch::v1::HangInfo Analyzer::MakeHangInfo(const HangView& hang, int64_t now_ns) const {
  ncclwatch::v1::HangInfo info;
  info.set_job_id(hang.comm.job_id);
  info.set_comm_hash(hang.comm.comm_hash);
  if (auto it = comms_.find(hang.comm); it != comms_.end()) {
    info.set_comm_name(it->second.comm_name);
    info.set_nranks(it->second.nranks);
  }
  info.set_op(hang.op);
  info.set_seq(hang.seq);
  info.set_kind(hang.kind == HangKind::kNoProgress ? ncclwatch::v1::HangInfo::NO_PROGRESS
                                                   : ncclwatch::v1::HangInfo::MISSING_RANKS);
  for (int r : hang.missing) FillRank(hang.comm, r, info.add_missing());
  info.set_arrived(static_cast<uint32_t>(hang.arrived));
  info.set_age_seconds(static_cast<double>(now_ns - hang.enqueued_ns) * 1e-9);
  info.set_since_unix_ns(hang.since_ns);
  return info;
}

ncclwatch::v1::SilentRankInfo Analyzer::MakeSilentInfo(const SilentView& silent) const {
  ncclwatch::v1::SilentRankInfo info;
  info.set_job_id(silent.comm.job_id);
  info.set_comm_hash(silent.comm.comm_hash);
  if (auto it = comms_.find(silent.comm); it != comms_.end()) {
    info.set_comm_name(it->second.comm_name);
  }
  FillRank(silent.comm, silent.rank, info.mutable_rank());
  info.set_last_report_unix_ns(silent.last_report_ns);
  info.set_since_unix_ns(silent.since_ns);
  return info;
}

namespace {

std::string RankList(const google::protobuf::RepeatedPtrField<ncclwatch::v1::RankRef>& ranks) {
  std::string out;
  for (const auto& r : ranks) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", "rank ", r.rank(), " (node ",
                    OrUnknown(r.node()), ", ", GpuLabel(r.cuda_device()), ")");
  }
  return out;
}

}  // namespace

ncclwatch::v1::Event Analyzer::HangEvent(const HangChange& change, int64_t now_ns) const {
  if (change.silent) {
    ncclwatch::v1::Event event =
        NewEvent(ncclwatch::v1::Event::RANK_SILENT, change.start, now_ns);
    *event.mutable_silent() = MakeSilentInfo(change.rank);
    const auto& s = event.silent();
    event.set_summary(absl::StrFormat(
        "%s: rank %d (node %s, %s) of communicator %s %s in job %s %s",
        change.start ? "SILENT" : "REPORTING", s.rank().rank(), OrUnknown(s.rank().node()),
        GpuLabel(s.rank().cuda_device()), OrUnknown(s.comm_name()), CommHashText(s.comm_hash()),
        s.job_id(),
        change.start ? absl::StrFormat("stopped reporting %.1f s ago; the other ranks carry on",
                                       (now_ns - s.last_report_unix_ns()) * 1e-9)
                     : std::string("reports again")));
    return event;
  }
  ncclwatch::v1::Event event = NewEvent(ncclwatch::v1::Event::HANG, change.start, now_ns);
  *event.mutable_hang() = MakeHangInfo(change.hang, now_ns);
  const auto& h = event.hang();
  std::string what =
      h.kind() == ncclwatch::v1::HangInfo::NO_PROGRESS
          ? absl::StrFormat("all %d ranks reached it and none finished: network or NVLink fabric",
                            h.arrived())
          : absl::StrFormat("%d of %d ranks never reached it: %s", h.missing_size(), h.nranks(),
                            RankList(h.missing()));
  event.set_summary(absl::StrFormat(
      "%s: %s of communicator %s %s in job %s %s%s", change.start ? "HANG" : "UNHUNG",
      HangOpText(h),
      OrUnknown(h.comm_name()), CommHashText(h.comm_hash()), h.job_id(),
      change.start ? absl::StrFormat("has made no progress for %.1f s; ", h.age_seconds())
                   : std::string("is moving again"),
      change.start ? what : std::string()));
  return event;
}

ncclwatch::v1::DegradedCommInfo Analyzer::MakeDegradedInfo(const DegradedView& v) const {
  ncclwatch::v1::DegradedCommInfo info;
  info.set_job_id(v.comm.job_id);
  info.set_comm_hash(v.comm.comm_hash);
  if (auto it = comms_.find(v.comm); it != comms_.end()) info.set_comm_name(it->second.comm_name);
  info.set_comm_class(v.hybrid ? "hybrid" : "nvlink");
  info.set_op(v.op);
  info.set_message_size(v.message_size);
  info.set_bus_bw_gbs(v.bus_gbs);
  info.set_baseline_bus_bw_gbs(v.baseline_gbs);
  for (const auto& n : v.nodes) info.add_nodes(n);
  return info;
}

ncclwatch::v1::Event Analyzer::DegradedEvent(const DegradedChange& change, int64_t now_ns) const {
  if (change.node) {
    ncclwatch::v1::Event event =
        NewEvent(ncclwatch::v1::Event::NODE_NETWORK_SUSPECT, change.start, now_ns);
    *event.mutable_suspect() = MakeSuspectInfo(change.suspect);
    event.set_summary(
        change.start
            ? absl::StrFormat("NETWORK SUSPECT: node %s in job %s: the %d degraded multi-node "
                              "communicators all go through it while its NVLink-only ones are "
                              "healthy",
                              change.suspect.node, change.suspect.job_id,
                              change.suspect.degraded_comms)
            : absl::StrFormat("NETWORK OK: node %s in job %s is no longer suspected",
                              change.suspect.node, change.suspect.job_id));
    return event;
  }
  ncclwatch::v1::Event event =
      NewEvent(ncclwatch::v1::Event::COMM_DEGRADED, change.start, now_ns);
  *event.mutable_degraded() = MakeDegradedInfo(change.comm);
  const auto& d = event.degraded();
  event.set_summary(absl::StrFormat(
      "%s: %s communicator %s %s in job %s (nodes %s): %s %s bus bandwidth %.1f GB/s against a "
      "baseline of %.1f GB/s",
      change.start ? "DEGRADED" : "RECOVERED", d.comm_class(), OrUnknown(d.comm_name()),
      CommHashText(d.comm_hash()), d.job_id(), absl::StrJoin(d.nodes(), ","), d.op(),
      d.message_size(), d.bus_bw_gbs(), d.baseline_bus_bw_gbs()));
  return event;
}

std::vector<ncclwatch::v1::Event> Analyzer::Tick(int64_t now_ns) {
  ncclwatch::MutexLock lock(&mu_);
  clock_ns_ = std::max(clock_ns_, now_ns);
  std::vector<ncclwatch::v1::Event> events;
  for (const HangChange& change : hangs_.Evaluate(now_ns)) {
    events.push_back(HangEvent(change, now_ns));
  }
  correlator_.Expire(now_ns);
  std::erase_if(series_, [&](const auto& kv) {
    return now_ns - kv.second.updated_ns > options_.series_ttl_ns;
  });
  // A communicator none of whose ranks reported within the TTL is gone (job ended or died).
  std::erase_if(comms_, [&](const auto& kv) {
    for (const RankMeta& rm : kv.second.ranks) {
      if (now_ns - rm.last_seen_ns <= options_.series_ttl_ns) return false;
    }
    correlator_.Forget(kv.first);
    stragglers_.Forget(kv.first);
    hangs_.Forget(kv.first);
    degraded_.Forget(kv.first);
    if (auto job = comms_per_job_.find(kv.first.job_id);
        job != comms_per_job_.end() && --job->second == 0) {
      comms_per_job_.erase(job);
    }
    return true;
  });
  return events;
}

std::vector<ExportedSample> Analyzer::Series(bool detection_only) const {
  ncclwatch::MutexLock lock(&mu_);
  std::vector<ExportedSample> out;
  if (!detection_only) {
    out.reserve(series_.size());
    for (const auto& [k, e] : series_) out.push_back(e.sample);
  }
  // Every detection series is stamped with the analyzer's clock (the latest Ingest or Tick): its
  // value can only change at one of those, so a new value always comes with a new timestamp. (A
  // rank's last report time would repeat while a Tick finds a hang or another rank's report
  // moves its lateness, and Prometheus drops a changed value under a repeated timestamp.)
  const int64_t now_ns = clock_ns_;
  const int64_t now_ms = now_ns / 1'000'000;
  std::map<CommKey, const HangView*> hung;
  std::vector<HangView> hangs = hangs_.Hangs();
  for (const HangView& h : hangs) hung[h.comm] = &h;
  for (const auto& [key, meta] : comms_) {
    LabelPairs comm_labels = {{"job_id", key.job_id},
                              {"comm_hash", CommHashText(key.comm_hash)},
                              {"comm_name", OrUnknown(meta.comm_name)}};
    auto h = hung.find(key);
    out.push_back({"ncclwatch_hang", comm_labels, h != hung.end() ? 1.0 : 0.0, now_ms});
    std::set<std::string> nodes;
    for (const RankMeta& rm : meta.ranks) {
      if (!rm.node.empty()) nodes.insert(rm.node);
    }
    for (const auto& node : nodes) {
      LabelPairs node_labels = comm_labels;
      node_labels.emplace_back("node", node);
      out.push_back({"ncclwatch_node_straggler", std::move(node_labels),
                     meta.slow_nodes.count(node) ? 1.0 : 0.0, now_ms});
    }
    LabelPairs class_labels = comm_labels;
    class_labels.emplace_back("class", degraded_.IsHybrid(key) ? "hybrid" : "nvlink");
    out.push_back({"ncclwatch_comm_degraded", std::move(class_labels),
                   degraded_.IsDegraded(key) ? 1.0 : 0.0, now_ms});
    out.push_back({"ncclwatch_hang_age_seconds", std::move(comm_labels),
                   h != hung.end() ? (now_ns - h->second->enqueued_ns) * 1e-9 : 0.0,
                   now_ms});
    for (int r = 0; r < static_cast<int>(meta.ranks.size()); ++r) {
      LabelPairs labels = RankLabels(key, meta, r);
      out.push_back({"ncclwatch_rank_missing", labels, hangs_.Missing(key, r) ? 1.0 : 0.0,
                     now_ms});
      out.push_back({"ncclwatch_rank_silent", std::move(labels),
                     hangs_.IsSilent(key, r) ? 1.0 : 0.0, now_ms});
    }
    for (const RankScore& score : stragglers_.Scores(key)) {
      if (score.rank >= static_cast<int>(meta.ranks.size())) continue;
      LabelPairs labels = RankLabels(key, meta, score.rank);
      out.push_back({"ncclwatch_straggler", labels, score.flagged ? 1.0 : 0.0, now_ms});
      out.push_back({"ncclwatch_rank_lateness_seconds", std::move(labels),
                     score.lateness_ns * 1e-9, now_ms});
    }
  }
  for (const SuspectView& s : degraded_.Suspects()) {
    out.push_back({"ncclwatch_node_network_suspect", {{"job_id", s.job_id}, {"node", s.node}},
                   1.0, now_ms});
  }
  return out;
}

std::vector<ncclwatch::v1::StragglerInfo> Analyzer::Stragglers(const std::string& job_id) const {
  ncclwatch::MutexLock lock(&mu_);
  std::vector<ncclwatch::v1::StragglerInfo> out;
  for (const auto& [key, meta] : comms_) {
    if (!job_id.empty() && key.job_id != job_id) continue;
    for (const RankScore& score : stragglers_.Scores(key)) {
      if (score.flagged) out.push_back(MakeStragglerInfo(key, meta, score));
    }
  }
  return out;
}

ncclwatch::v1::ListDegradedResponse Analyzer::Degraded(const std::string& job_id) const {
  ncclwatch::MutexLock lock(&mu_);
  ncclwatch::v1::ListDegradedResponse out;
  for (const DegradedView& v : degraded_.Degraded()) {
    if (job_id.empty() || v.comm.job_id == job_id) *out.add_comms() = MakeDegradedInfo(v);
  }
  for (const SuspectView& s : degraded_.Suspects()) {
    if (!job_id.empty() && s.job_id != job_id) continue;
    *out.add_suspects() = MakeSuspectInfo(s);
  }
  return out;
}

ncclwatch::v1::ListHangsResponse Analyzer::Hangs(const std::string& job_id,
                                                int64_t now_ns) const {
  ncclwatch::MutexLock lock(&mu_);
  ncclwatch::v1::ListHangsResponse out;
  for (const HangView& h : hangs_.Hangs()) {
    if (job_id.empty() || h.comm.job_id == job_id) *out.add_hangs() = MakeHangInfo(h, now_ns);
  }
  for (const SilentView& s : hangs_.Silent()) {
    if (job_id.empty() || s.comm.job_id == job_id) *out.add_silent() = MakeSilentInfo(s);
  }
  return out;
}

ncclwatch::v1::CommInfo Analyzer::MakeCommInfo(const CommKey& key, const CommMeta& meta,
                                               CommHealth* health) const {
  ncclwatch::v1::CommInfo c;
  c.set_job_id(key.job_id);
  c.set_comm_hash(key.comm_hash);
  c.set_comm_name(meta.comm_name);
  c.set_nranks(meta.nranks);
  c.set_n_nodes(meta.n_nodes);
  c.set_comm_class(meta.n_nodes > 1 ? "hybrid" : "nvlink");
  int64_t last = 0;
  for (int r = 0; r < static_cast<int>(meta.ranks.size()); ++r) {
    FillRank(key, r, c.add_ranks());
    last = std::max(last, meta.ranks[r].last_seen_ns);
    health->silent_ranks += hangs_.IsSilent(key, r) ? 1 : 0;
  }
  c.set_last_report_unix_ns(static_cast<uint64_t>(last));
  for (const RankScore& s : stragglers_.Scores(key)) health->stragglers += s.flagged ? 1 : 0;
  health->hung = hangs_.Hung(key);
  health->degraded = degraded_.IsDegraded(key);
  std::vector<std::string> findings;
  if (health->stragglers > 0) findings.push_back("straggler");
  if (health->hung) findings.push_back("hung");
  if (health->silent_ranks > 0) findings.push_back("silent");
  if (health->degraded) findings.push_back("degraded");
  c.set_health(findings.empty() ? "ok" : absl::StrJoin(findings, "+"));
  return c;
}

std::vector<ncclwatch::v1::CommInfo> Analyzer::Comms(const std::string& job_id) const {
  ncclwatch::MutexLock lock(&mu_);
  std::vector<ncclwatch::v1::CommInfo> out;
  for (const auto& [key, meta] : comms_) {
    if (!job_id.empty() && key.job_id != job_id) continue;
    CommHealth health;
    out.push_back(MakeCommInfo(key, meta, &health));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::make_tuple(a.job_id(), a.comm_name(), a.comm_hash()) <
           std::make_tuple(b.job_id(), b.comm_name(), b.comm_hash());
  });
  return out;
}

std::vector<ncclwatch::v1::JobInfo> Analyzer::Jobs() const {
  ncclwatch::MutexLock lock(&mu_);
  std::map<std::string, ncclwatch::v1::JobInfo> jobs;  // by id: the answer is sorted
  std::map<std::string, std::set<std::string>> nodes;
  for (const auto& [key, meta] : comms_) {
    CommHealth health;
    const ncclwatch::v1::CommInfo c = MakeCommInfo(key, meta, &health);
    ncclwatch::v1::JobInfo& j = jobs[key.job_id];
    j.set_job_id(key.job_id);
    j.set_communicators(j.communicators() + 1);
    j.set_ranks(std::max<uint32_t>(j.ranks(), static_cast<uint32_t>(c.nranks())));
    j.set_last_report_unix_ns(std::max(j.last_report_unix_ns(), c.last_report_unix_ns()));
    j.set_stragglers(j.stragglers() + health.stragglers);
    j.set_silent_ranks(j.silent_ranks() + health.silent_ranks);
    j.set_hung_communicators(j.hung_communicators() + (health.hung ? 1 : 0));
    j.set_degraded_communicators(j.degraded_communicators() + (health.degraded ? 1 : 0));
    for (const auto& r : c.ranks()) {
      if (!r.node().empty()) nodes[key.job_id].insert(r.node());
    }
  }
  std::vector<ncclwatch::v1::JobInfo> out;
  for (auto& [id, j] : jobs) {
    for (const auto& n : nodes[id]) j.add_nodes(n);
    out.push_back(std::move(j));
  }
  return out;
}

Analyzer::Counters Analyzer::counters() const {
  ncclwatch::MutexLock lock(&mu_);
  return Counters{reports_,
                  correlator_.completed(),
                  correlator_.expired(),
                  correlator_.open_groups(),
                  capped_jobs_,
                  capped_comms_,
                  capped_series_};
}

}  // namespace ncclwatch::aggregator

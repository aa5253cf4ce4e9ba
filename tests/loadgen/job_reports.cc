#include "tests/loadgen/job_reports.h"

#include <algorithm>
#include <cstdio>

#include "plugin/compactor.h"
#include "plugin/hot_path.h"

namespace ncclwatch::loadgen {
namespace {

using simjob::CommRef;
using simjob::JobOp;
using simjob::JobOpKindName;

}  // namespace

// One communicator of one rank over the interval being built: the plugin's own compactor
// (plugin/compactor.h), fed from the model instead of NCCL.
struct JobReports::CommAcc {
  // `rank`: the rank's index in the communicator (point-to-point operations are sampled by it).
  CommAcc(int stride, int rank) : compactor(stride, /*max_samples=*/256, rank) {}
  plugin::CommAccumulator compactor;
};

struct JobReports::RankState {
  int rank = 0;
  int node = 0;
  int local = 0;
  std::vector<CommRef> comms;
  std::vector<int> comm_ids;
  std::vector<int> comm_ranks;  // [index in comms]: its rank there
  std::vector<CommAcc> acc;     // [index in comms]
  std::deque<JobOp> fetched;    // from the model, not yet finished by the last interval's end
  bool exhausted = false;
  int64_t last_end_ns = -1;  // GPU end of the previous finished operation (model time)
  int64_t interval_start_ns = 0;
  uint64_t reports = 0;

  int IndexOf(CommRef comm, const simjob::MegatronLayout& layout) const {
    const int id = layout.CommId(comm);
    for (size_t i = 0; i < comm_ids.size(); ++i) {
      if (comm_ids[i] == id) return static_cast<int>(i);
    }
    return -1;
  }
};

JobReports::JobReports(simjob::JobModelConfig model, JobReportsOptions options)
    : model_(std::move(model)), options_(std::move(options)) {
  const simjob::MegatronLayout& layout = model_.layout();
  comm_names_.resize(layout.NumCommIds());
  comm_hashes_.resize(layout.NumCommIds());
  comm_nodes_.resize(layout.NumCommIds());
  for (const CommRef& c : layout.AllComms()) {
    const int id = layout.CommId(c);
    comm_names_[id] = layout.CommName(c);
    comm_hashes_[id] = simjob::CommHash(options_.job_id, comm_names_[id]);
    comm_nodes_[id] = layout.NodesSpanned(c);
  }
  ranks_.reserve(layout.world_size());
  for (int r = 0; r < layout.world_size(); ++r) {
    auto rs = std::make_unique<RankState>();
    rs->rank = r;
    rs->node = layout.NodeOf(r);
    rs->local = r % layout.gpus_per_node();
    rs->comms = layout.CommsOf(r);
    for (const CommRef& c : rs->comms) rs->comm_ids.push_back(layout.CommId(c));
    rs->comm_ranks.resize(rs->comms.size(), -1);
    ranks_.push_back(std::move(rs));
  }
  // Each rank's index in each of its communicators, from the member lists (a search per rank
  // would cost world-size squared).
  for (const CommRef& c : layout.AllComms()) {
    const std::vector<int>& members = layout.Members(c.family, c.instance);
    for (size_t i = 0; i < members.size(); ++i) {
      RankState& rs = *ranks_[members[i]];
      const int index = rs.IndexOf(c, layout);
      if (index >= 0) rs.comm_ranks[index] = static_cast<int>(i);
    }
  }
  for (auto& rs : ranks_) {
    for (int comm_rank : rs->comm_ranks) rs->acc.emplace_back(options_.stride, comm_rank);
  }
}

JobReports::~JobReports() = default;

simjob::JobModelConfig ScaleJobModel(const ScaleJob& job, uint64_t seed, int64_t t0_ns,
                                     int64_t end_ns) {
  simjob::JobModelConfig m;
  m.tp = job.tp;
  m.pp = job.pp;
  m.dp = job.dp;
  m.gpus_per_node = job.gpus_per_node;
  m.program.microbatches = job.microbatches;
  m.program.layers = 1;
  m.program.layer_fwd_ns = static_cast<int64_t>(job.layer_ms * 1e6);
  m.program.optimizer_ns = 2 * m.program.layer_fwd_ns;
  m.seed = seed;
  m.t0_ns = t0_ns;
  m.end_ns = end_ns;
  m.warmup_iterations = 2;
  m.clock_skew_ns = 20'000'000;
  return m;
}

std::string JobReports::NodeName(int node) {
  char name[32];
  std::snprintf(name, sizeof name, "loadgen-node-%d", node);
  return name;
}

void JobReports::Account(RankState& rs, const JobOp& op) {
  const simjob::MegatronLayout& layout = model_.layout();
  const int index = rs.IndexOf(op.comm, layout);
  if (index < 0) return;
  CommAcc& acc = rs.acc[index];
  const int nranks = static_cast<int>(layout.Members(op.comm.family, op.comm.instance).size());
  const uint64_t gpu_start = model_.GpuTimerNs(rs.rank, op.gpu_start_ns, 0);
  const uint64_t gpu_stop = model_.GpuTimerNs(rs.rank, op.gpu_end_ns, options_.channels - 1);
  const int64_t own_time_ns = rs.last_end_ns < 0 ? -1 : op.gpu_start_ns - rs.last_end_ns;
  for (int t = 0; t < op.n_tasks; ++t) {
    const simjob::JobTask& task = op.tasks[t];
    const bool p2p = simjob::IsP2p(task.kind);
    plugin::Completion c;
    c.func = JobOpKindName(task.kind);  // static strings, as NCCL passes them
    c.algo = p2p ? nullptr : "RING";
    c.proto = p2p ? nullptr : "SIMPLE";
    // NCCL's message size: per rank for AllGather and ReduceScatter, whose model size is the
    // nccl-tests total; in bytes of ncclInt8.
    const bool per_rank = task.kind == simjob::JobOpKind::kAllGather ||
                          task.kind == simjob::JobOpKind::kReduceScatter;
    c.datatype = "ncclInt8";
    c.count = per_rank ? task.bytes / static_cast<uint64_t>(nranks) : task.bytes;
    c.peer = p2p ? task.peer : -1;
    c.p2p = p2p;
    c.channels = static_cast<uint8_t>(options_.channels);
    c.gpu_start_ns = gpu_start;
    c.gpu_stop_ns = gpu_stop;
    c.exec_ns = static_cast<uint64_t>(op.gpu_end_ns - op.gpu_start_ns);
    c.host_done_unix_ns = op.gpu_end_ns;  // the model's clock is CLOCK_REALTIME
    // The model operation stands for `stride` real ones; the first of them is the sampled one.
    for (int k = 0; k < options_.stride; ++k) {
      // Point-to-point operations are numbered per peer and direction, as the plugin does.
      c.seq = static_cast<uint64_t>(task.seq) * options_.stride + k;
      // The same own time for each: the sampled one of a collective is the first, of a
      // point-to-point exchange whichever the pair's rule picks.
      acc.compactor.Add(c, nranks, own_time_ns);
    }
  }
  rs.last_end_ns = op.gpu_end_ns;
  ++ops_;
}

void JobReports::FillReport(RankState& rs, int index, int64_t start_ns, int64_t end_ns,
                            ncclwatch::v1::RankReport* report) {
  const simjob::MegatronLayout& layout = model_.layout();
  const CommRef comm = rs.comms[index];
  const int id = rs.comm_ids[index];
  CommAcc& acc = rs.acc[index];
  report->set_report_id((static_cast<uint64_t>(rs.rank) << 32) | ++rs.reports);
  auto* who = report->mutable_identity();
  who->set_job_id(options_.job_id);
  who->set_host(NodeName(rs.node));
  who->set_pid(static_cast<uint32_t>(100000 + rs.rank));
  who->set_cuda_device(rs.local);
  char uuid[48];
  std::snprintf(uuid, sizeof uuid, "GPU-00000000-0000-0000-0000-%012d", rs.rank);
  who->set_gpu_uuid(uuid);
  who->set_comm_hash(comm_hashes_[id]);
  who->set_comm_name(comm_names_[id]);
  who->set_rank(rs.comm_ranks[index]);
  who->set_nranks(static_cast<int>(layout.Members(comm.family, comm.instance).size()));
  who->set_n_nodes(comm_nodes_[id]);
  who->set_node(NodeName(rs.node));
  report->set_interval_start_unix_ns(static_cast<uint64_t>(start_ns));
  report->set_interval_end_unix_ns(static_cast<uint64_t>(end_ns));
  // Stats, sample columns, sample stride and clock pair, as the plugin compacts them.
  acc.compactor.TakeInto(report);
  // The operations of this communicator enqueued but not finished at the interval's end.
  uint32_t in_flight = 0;
  for (const JobOp& op : rs.fetched) {
    if (op.host_enqueue_ns > end_ns) break;
    if (op.comm != comm) continue;
    ++in_flight;
    if (report->in_flight_size() >= options_.max_in_flight) continue;
    const simjob::JobTask& task = op.tasks[0];
    auto* f = report->add_in_flight();
    f->set_op(JobOpKindName(task.kind));
    const bool p2p = simjob::IsP2p(task.kind);
    f->set_p2p(p2p);
    f->set_seq(p2p ? 0 : static_cast<uint64_t>(task.seq) * options_.stride);
    f->set_peer(p2p ? task.peer : -1);
    f->set_age_ns(static_cast<uint64_t>(end_ns - op.host_enqueue_ns));
    f->set_channels(static_cast<uint32_t>(options_.channels));
    f->set_channels_started(op.gpu_start_ns <= end_ns ? options_.channels : 0);
  }
  report->set_in_flight_count(in_flight);
  report->mutable_drops();
}

void JobReports::NodeReports(int node, int64_t end_ns,
                             std::vector<ncclwatch::v1::RankReport>* out) {
  const simjob::MegatronLayout& layout = model_.layout();
  const int first = node * layout.gpus_per_node();
  const int last = std::min(first + layout.gpus_per_node(), layout.world_size());
  for (int r = first; r < last; ++r) {
    RankState& rs = *ranks_[r];
    // Everything enqueued by the interval's end, and one operation beyond.
    while (!rs.exhausted && (rs.fetched.empty() || rs.fetched.back().host_enqueue_ns <= end_ns)) {
      const JobOp* op = model_.Next(r);
      if (op == nullptr) {
        rs.exhausted = true;
      } else {
        rs.fetched.push_back(*op);
      }
    }
    while (!rs.fetched.empty() && rs.fetched.front().gpu_end_ns <= end_ns) {
      Account(rs, rs.fetched.front());
      rs.fetched.pop_front();
    }
    const int64_t start_ns =
        rs.interval_start_ns > 0 ? rs.interval_start_ns : end_ns - 1'000'000'000;
    for (size_t i = 0; i < rs.comms.size(); ++i) {
      out->emplace_back();
      FillReport(rs, static_cast<int>(i), start_ns, end_ns, &out->back());
    }
    rs.interval_start_ns = end_ns;
  }
}

}  // namespace ncclwatch::loadgen

// The closed-loop job model; the equations and the contract are in job_model.h.
//
// Engine: every rank runs its program one op at a time. An op's start needs only its own rank's
// past (the previous op's end, the host's state), so a rank computes it as soon as its previous op
// ended and then registers the op's tasks at their rendezvous. The last party to register resolves
// a rendezvous: its end is then known for every party, and the ranks whose op has no unresolved
// task left move on. A worklist holds the ranks that can move. The result is the unique fixpoint
// of these dependencies, so the order in which ranks are processed does not change any time.
// Ranks wait for the job-wide decisions of an iteration (job_model.h) and for the horizon, the
// newest iteration a rank may start; the horizon moves only when nothing else can, which keeps
// the model about one iteration ahead of its consumer. When nothing can move at all, the job has
// either ended or hung; ranks then list the ops their host enqueued behind a stuck one.
#include "tests/simjob/job_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace ncclwatch::simjob {
struct JobModel::Rank {
  enum class Phase { kStartIteration, kNeedArrival, kWaiting, kStuck, kDone };

  int rank = 0;
  bool output = false;
  bool queued = false;  // in worklist_
  Phase phase = Phase::kStartIteration;
  RankFate fate = RankFate::kRunning;
  int64_t iteration = -1;
  std::vector<JobOp> prog;  // the current iteration's program
  size_t pc = 0;            // prog[pc] is the op being run
  int64_t next_index = 0;   // its index
  int64_t carry_ns = 0;
  int64_t stall_ns = 0;       // before this iteration's first op
  double warmup = 1.0;        // this iteration's warm-up factor
  int64_t prev_end = 0;       // end of the previous op
  int64_t last_enq = 0;       // enqueue of the previous op
  std::vector<int64_t> ends;  // ring: ends[i % size] = end of op i, for the last host_ahead+1 ops
  int pending = 0;            // unresolved tasks of prog[pc]
  int64_t op_end = 0;
  int64_t op_all_arrived = 0;  // the latest last_arrival of prog[pc]'s resolved tasks
  bool op_never = false;
  std::unordered_map<uint64_t, int64_t> seq;
  std::deque<JobOp> out;
};

struct JobModel::Rendezvous {
  RvKey key;
  CommRef comm;
  JobTask task;     // the issuer's task (for the transfer time)
  int issuer = -1;  // a party's global rank
  int needed = 0;
  bool has_killed = false;
  int64_t last_arrival = 0;
  std::vector<std::pair<int, int>> parties;  // (rank, task index)
};

JobModel::JobModel(JobModelConfig config, std::optional<std::vector<int>> output_ranks)
    : config_(std::move(config)),
      layout_(config_.tp, config_.pp, config_.dp, config_.gpus_per_node) {
  has_fabric_hang_ = !config_.fabric_hang_comm.empty() &&
                     layout_.FindComm(config_.fabric_hang_comm, &fabric_comm_);
  multi_node_.assign(layout_.NumCommIds(), false);
  touches_degraded_.assign(layout_.NumCommIds(), false);
  for (const CommRef& c : layout_.AllComms()) {
    const int id = layout_.CommId(c);
    multi_node_[id] = layout_.NodesSpanned(c) > 1;
    for (int r : layout_.Members(c.family, c.instance)) {
      if (layout_.NodeOf(r) == config_.degrade_node) touches_degraded_[id] = true;
    }
  }
  const int ring = std::max(config_.host_ahead, 0) + 1;
  for (int r = 0; r < world_size(); ++r) {
    auto rs = std::make_unique<Rank>();
    rs->rank = r;
    rs->output = !output_ranks.has_value() ||
                 std::find(output_ranks->begin(), output_ranks->end(), r) != output_ranks->end();
    rs->prev_end = config_.t0_ns;
    rs->last_enq = config_.t0_ns - config_.host_overhead_ns;
    rs->ends.assign(ring, config_.t0_ns);
    ranks_.push_back(std::move(rs));
  }
  if (world_size() < 2) {
    finished_ = true;  // nothing to communicate
    for (auto& rs : ranks_) rs->fate = RankFate::kCompleted;
  }
  for (int r = 0; r < world_size() && !finished_; ++r) Wake(r);
}

JobModel::~JobModel() = default;

const JobOp* JobModel::Next(int rank) {
  Rank& rs = *ranks_[rank];
  while (rs.out.empty() && Pump()) {
  }
  if (rs.out.empty()) return nullptr;
  current_ = rs.out.front();
  rs.out.pop_front();
  return &current_;
}

bool JobModel::RunToEnd(int64_t max_ops) {
  while (Pump()) {
    if (ops_finalized_ >= max_ops) return false;
  }
  return true;
}

RankFate JobModel::Fate(int rank) const {
  const RankFate f = ranks_[rank]->fate;
  if (rank == config_.kill_rank && f != RankFate::kRunning && f != RankFate::kCompleted) {
    return RankFate::kKilled;
  }
  return f;
}

bool JobModel::hung() const {
  if (!finished_) return false;
  for (int r = 0; r < world_size(); ++r) {
    if (Fate(r) != RankFate::kCompleted) return true;
  }
  return false;
}

int64_t JobModel::iterations_in_run() const {
  int64_t n = 0;
  while (n < static_cast<int64_t>(decisions_.size()) && decisions_[n].in_run) ++n;
  return n;
}

void JobModel::Wake(int r) {
  Rank& rs = *ranks_[r];
  if (rs.queued) return;
  rs.queued = true;
  worklist_.push_back(r);
}

bool JobModel::Pump() {
  if (!worklist_.empty()) {
    const int r = worklist_.front();
    worklist_.pop_front();
    Process(r);
    return true;
  }
  if (!horizon_waiters_.empty()) {
    ++horizon_;
    for (int r : horizon_waiters_) Wake(r);
    horizon_waiters_.clear();
    return true;
  }
  if (!decision_waiters_.empty()) {
    // Nothing else can move: the iteration these ranks need will never end everywhere (a hang).
    // Decide it without that iteration's end, the same way in every process.
    auto it = decision_waiters_.begin();
    Decision d;
    Decide(it->first, /*fallback=*/true, &d);
    for (int r : it->second) Wake(r);
    decision_waiters_.erase(it);
    return true;
  }
  if (finished_) return false;
  for (auto& rs : ranks_) {
    if (rs->phase == Rank::Phase::kWaiting || rs->phase == Rank::Phase::kStuck) {
      ListQueuedOps(*rs);
    }
  }
  finished_ = true;
  return true;
}

bool JobModel::Decide(int64_t k, bool fallback, Decision* d) {
  if (k < static_cast<int64_t>(decisions_.size())) {
    *d = decisions_[k];
    return true;
  }
  // Decisions are made in iteration order: a rank reaches iteration k only after k-1.
  *d = Decision{};
  if (k >= config_.max_iterations) {
    d->in_run = false;
  } else if (k < 2) {
    d->in_run = true;
  } else {
    auto it = summaries_.find(k - 2);
    const bool known = it != summaries_.end() && it->second.finished == world_size();
    if (!known && !fallback) return false;
    d->in_run = true;
    if (known) {
      const int64_t ended = it->second.max_end;
      d->in_run = ended < config_.end_ns;
      if (config_.stall_every_ns > 0) {
        if (next_stall_ns_ == kNever) next_stall_ns_ = config_.t0_ns + config_.stall_every_ns;
        if (ended >= next_stall_ns_) {
          d->stall = true;
          while (next_stall_ns_ <= ended) next_stall_ns_ += config_.stall_every_ns;
        }
      }
      if (config_.gc_every_ns > 0) {
        if (next_gc_ns_ == kNever) next_gc_ns_ = config_.t0_ns + config_.gc_every_ns;
        if (ended >= next_gc_ns_) {
          d->gc_rank = static_cast<int>(SplitMix64(config_.seed ^ SplitMix64(k)) %
                                        static_cast<uint64_t>(world_size()));
          while (next_gc_ns_ <= ended) next_gc_ns_ += config_.gc_every_ns;
        }
      }
    }
  }
  decisions_.push_back(*d);
  summaries_.erase(summaries_.begin(), summaries_.upper_bound(k - 2));
  return true;
}

bool JobModel::StartIteration(Rank& rs) {
  const int64_t k = rs.iteration + 1;
  if (k > horizon_) {
    horizon_waiters_.push_back(rs.rank);
    return false;
  }
  Decision d;
  if (!Decide(k, /*fallback=*/false, &d)) {
    decision_waiters_[k].push_back(rs.rank);
    return false;
  }
  if (!d.in_run) {
    rs.phase = Rank::Phase::kDone;
    rs.fate = RankFate::kCompleted;
    return true;
  }
  rs.iteration = k;
  rs.prog.clear();
  BuildIteration(layout_, config_.program, rs.rank, k, &rs.prog, &rs.carry_ns);
  rs.pc = 0;
  rs.stall_ns = (d.stall ? StallNs(rs.rank, k) : 0) + (d.gc_rank == rs.rank ? config_.gc_ns : 0);
  rs.warmup = WarmupFactor(rs.rank, k);
  rs.phase = Rank::Phase::kNeedArrival;
  return true;
}

// The host enqueues op i once it is ready and op i-1-host_ahead has ended.
int64_t JobModel::EnqueueTime(const Rank& rs, const JobOp& op) const {
  const int64_t ready = rs.last_enq + config_.host_overhead_ns + (rs.pc == 0 ? rs.stall_ns : 0);
  const int64_t back = op.index - static_cast<int64_t>(rs.ends.size());
  const int64_t blocker = back < 0 ? config_.t0_ns : rs.ends[back % rs.ends.size()];
  return blocker == kNever ? kNever : std::max(ready, blocker);
}

void JobModel::AssignSeq(Rank& rs, JobOp& op) {
  const auto comm = static_cast<uint64_t>(layout_.CommId(op.comm));
  for (JobTask& task : op.tasks) {
    uint64_t key = comm << 20;
    if (IsP2p(task.kind)) {
      key |= (uint64_t{1} << 62) | (static_cast<uint64_t>(task.peer) << 1) |
             (task.kind == JobOpKind::kSend ? 1 : 0);
    } else {
      key |= static_cast<uint64_t>(task.kind);
    }
    task.seq = rs.seq[key]++;
  }
}

void JobModel::Process(int r) {
  Rank& rs = *ranks_[r];
  rs.queued = false;
  for (;;) {
    switch (rs.phase) {
      case Rank::Phase::kStartIteration:
        if (!StartIteration(rs)) return;
        break;
      case Rank::Phase::kNeedArrival: {
        if (rs.pc == rs.prog.size()) {
          IterationDone(rs);
          rs.phase = Rank::Phase::kStartIteration;
          break;
        }
        JobOp& op = rs.prog[rs.pc];
        op.index = rs.next_index;
        const int64_t enq = EnqueueTime(rs, op);  // finite: every earlier op has ended
        if ((r == config_.hang_rank && enq >= config_.hang_at_ns) ||
            (r == config_.kill_rank && enq >= config_.kill_at_ns)) {
          rs.fate = r == config_.hang_rank ? RankFate::kHostStopped : RankFate::kKilled;
          rs.phase = Rank::Phase::kDone;
          return;
        }
        AssignSeq(rs, op);
        const int64_t ready =
            rs.last_enq + config_.host_overhead_ns + (rs.pc == 0 ? rs.stall_ns : 0);
        const int64_t compute_start = std::max(rs.prev_end, ready);
        op.compute_ns = ComputeNs(rs.rank, rs.warmup, op, compute_start);
        op.host_enqueue_ns = enq;
        op.gpu_start_ns = std::max(compute_start + op.compute_ns, enq);
        rs.last_enq = enq;
        if (r == config_.kill_rank && op.gpu_start_ns >= config_.kill_at_ns) {
          // The process dies before its GPU gets there; ops its host enqueued before the kill are
          // listed behind this one like behind any stuck op.
          op.gpu_start_ns = kNever;
          Finalize(rs, kNever);
          return;
        }
        const int n_tasks = static_cast<int>(op.tasks.size());
        rs.pending = n_tasks;
        rs.op_end = op.gpu_start_ns;
        rs.op_all_arrived = op.gpu_start_ns;
        rs.op_never = false;
        rs.phase = Rank::Phase::kWaiting;
        for (int t = 0; t < n_tasks; ++t) Register(r, t);  // may resolve some
        break;
      }
      case Rank::Phase::kWaiting:
        if (rs.pending > 0) return;
        Finalize(rs, rs.op_never ? kNever : rs.op_end);
        break;
      case Rank::Phase::kStuck:
      case Rank::Phase::kDone:
        return;
    }
  }
}

void JobModel::Register(int r, int t) {
  const Rank& rs = *ranks_[r];
  const JobOp& op = rs.prog[rs.pc];
  const JobTask& task = op.tasks[t];
  RvKey key;
  key.a = static_cast<uint64_t>(layout_.CommId(op.comm)) << 32;
  key.b = task.seq;
  const std::vector<int>& members = layout_.Members(op.comm.family, op.comm.instance);
  int needed = static_cast<int>(members.size());
  bool has_killed = config_.kill_rank >= 0 &&
                    layout_.InstanceOf(op.comm.family, config_.kill_rank) == op.comm.instance;
  if (IsP2p(task.kind)) {
    const bool send = task.kind == JobOpKind::kSend;
    const uint64_t sender = send ? op.comm_rank : task.peer;
    const uint64_t receiver = send ? task.peer : op.comm_rank;
    key.a |= (uint64_t{1} << 31) | (sender << 15) | receiver;
    needed = 2;
    has_killed = config_.kill_rank >= 0 &&
                 (config_.kill_rank == r || config_.kill_rank == members[task.peer]);
  } else {
    key.a |= static_cast<uint64_t>(task.kind);
  }
  std::unique_ptr<Rendezvous>& slot = rendezvous_[key];
  if (slot == nullptr) {
    slot = std::make_unique<Rendezvous>();
    slot->key = key;
    slot->comm = op.comm;
    slot->task = task;
    slot->issuer = r;
    slot->needed = needed;
    slot->has_killed = has_killed;
    slot->last_arrival = op.gpu_start_ns;
  }
  Rendezvous& rv = *slot;
  rv.last_arrival = std::max(rv.last_arrival, op.gpu_start_ns);
  rv.parties.emplace_back(r, t);
  if (static_cast<int>(rv.parties.size()) < rv.needed) return;
  const std::unique_ptr<Rendezvous> done = std::move(slot);
  rendezvous_.erase(key);
  Resolve(*done);
}

void JobModel::Resolve(const Rendezvous& rv) {
  const int64_t start = rv.last_arrival;
  int64_t end = start + TransferNs(rv.comm, rv.issuer, rv.task, start);
  if (has_fabric_hang_ && rv.comm == fabric_comm_ && start >= config_.fabric_hang_at_ns) {
    end = kNever;  // every party arrived; the fabric never delivers
  }
  if (rv.has_killed && end > config_.kill_at_ns) end = kNever;  // a party dies mid-op
  for (const auto& [r, t] : rv.parties) {
    Rank& p = *ranks_[r];
    p.op_all_arrived = std::max(p.op_all_arrived, start);
    if (end == kNever) {
      p.op_never = true;
    } else {
      p.op_end = std::max(p.op_end, end);
    }
    if (--p.pending == 0) Wake(r);
  }
}

void JobModel::Finalize(Rank& rs, int64_t end_ns) {
  JobOp& op = rs.prog[rs.pc];
  op.gpu_end_ns = end_ns;
  // Some party never came (pending tasks), or the op never started.
  op.all_arrived_ns = op.gpu_start_ns == kNever || rs.pending > 0 ? kNever : rs.op_all_arrived;
  rs.ends[op.index % rs.ends.size()] = end_ns;
  rs.prev_end = end_ns;
  if (end_ns != kNever) last_end_ns_ = std::max(last_end_ns_, end_ns);
  ++ops_finalized_;
  Emit(rs, op);
  ++rs.pc;
  ++rs.next_index;
  rs.phase = end_ns == kNever ? Rank::Phase::kStuck : Rank::Phase::kNeedArrival;
  if (end_ns == kNever) rs.fate = RankFate::kStuck;
}

void JobModel::Emit(Rank& rs, const JobOp& op) {
  if (rs.output) rs.out.push_back(op);
}

void JobModel::IterationDone(Rank& rs) {
  Summary& s = summaries_[rs.iteration];
  ++s.finished;
  s.max_end = std::max(s.max_end, rs.prev_end);
  if (s.finished < world_size()) return;
  auto it = decision_waiters_.find(rs.iteration + 2);
  if (it == decision_waiters_.end()) return;
  for (int r : it->second) Wake(r);
  decision_waiters_.erase(it);
}

void JobModel::ListQueuedOps(Rank& rs) {
  if (rs.phase == Rank::Phase::kWaiting) Finalize(rs, kNever);  // its peers never came
  // The GPU is stuck; the host goes on enqueuing until host_ahead ops wait behind the stuck one.
  for (;;) {
    if (rs.pc == rs.prog.size()) {
      Decision d;
      Decide(rs.iteration + 1, /*fallback=*/true, &d);
      if (!d.in_run) break;
      rs.iteration += 1;
      rs.prog.clear();
      BuildIteration(layout_, config_.program, rs.rank, rs.iteration, &rs.prog, &rs.carry_ns);
      rs.pc = 0;
      rs.stall_ns = (d.stall ? StallNs(rs.rank, rs.iteration) : 0) +
                    (d.gc_rank == rs.rank ? config_.gc_ns : 0);
      if (rs.prog.empty()) break;
    }
    JobOp& op = rs.prog[rs.pc];
    op.index = rs.next_index;
    const int64_t enq = EnqueueTime(rs, op);
    if (enq == kNever) break;
    if ((rs.rank == config_.hang_rank && enq >= config_.hang_at_ns) ||
        (rs.rank == config_.kill_rank && enq >= config_.kill_at_ns)) {
      break;
    }
    AssignSeq(rs, op);
    op.compute_ns = 0;
    op.host_enqueue_ns = enq;
    op.gpu_start_ns = kNever;
    rs.last_enq = enq;
    Finalize(rs, kNever);
  }
  rs.phase = Rank::Phase::kDone;
}

}  // namespace ncclwatch::simjob

// Unit tests of the closed-loop job model (job_model.h): the closed-loop rule, how delay
// propagates, the patterns that are nobody's fault, determinism and cost (hangs:
// job_model_hang_test.cc; the layout: megatron_layout_test.cc). Everything is virtual time: no
// sleeps, no clocks except to measure the model's own cost.
#include "tests/simjob/job_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "tests/simjob/job_model_test_util.h"
#include "tests/simjob/megatron_layout.h"

namespace ncclwatch::simjob {
namespace {

using testing::BaseConfig;
using testing::kMs;
using testing::kS;
using testing::kT0;
using testing::RankOps;
using testing::RankTimes;
using testing::RunAll;
using testing::Times;

// The start of op i of every rank must obey the host and stream rules; every collective must end
// at its last arrival plus its transfer time; every Send must have exactly one Recv of the same
// size with the same per-(communicator, sender, receiver) seq, and an op of p2p tasks (a group)
// must end when the last of its pairs does, each at the pair's last arrival plus its transfer.
void CheckClosedLoop(const JobModel& model, const RankOps& ops) {
  const JobModelConfig& c = model.config();
  const int H = c.host_ahead;
  struct P2pTask {
    int rank;
    const JobOp* op;
    const JobTask* task;
  };
  std::map<std::tuple<int, int, int64_t>, std::vector<const JobOp*>> colls;
  std::map<std::tuple<int, int, int, int64_t>, P2pTask> sends, recvs;
  for (int r = 0; r < model.world_size(); ++r) {
    const std::vector<JobOp>& v = ops[r];
    for (size_t i = 0; i < v.size(); ++i) {
      const JobOp& op = v[i];
      ASSERT_EQ(op.index, static_cast<int64_t>(i));
      ASSERT_FALSE(op.tasks.empty());
      ASSERT_EQ(op.n_tasks, static_cast<int>(op.tasks.size()));
      const int64_t prev_end = i == 0 ? c.t0_ns : v[i - 1].gpu_end_ns;
      const int64_t blocker = i < static_cast<size_t>(H) + 1 ? c.t0_ns : v[i - H - 1].gpu_end_ns;
      const int64_t prev_enq = i == 0 ? c.t0_ns - c.host_overhead_ns : v[i - 1].host_enqueue_ns;
      EXPECT_EQ(op.host_enqueue_ns, std::max(prev_enq + c.host_overhead_ns, blocker));
      EXPECT_LE(op.host_enqueue_ns, op.gpu_start_ns);
      EXPECT_EQ(op.gpu_start_ns,
                std::max(std::max(prev_end, prev_enq + c.host_overhead_ns) + op.compute_ns,
                         op.host_enqueue_ns));
      EXPECT_GT(op.gpu_end_ns, op.gpu_start_ns);
      const int id = model.layout().CommId(op.comm);
      for (const JobTask& task : op.tasks) {
        if (task.kind == JobOpKind::kSend) {
          EXPECT_TRUE(sends
                          .emplace(std::tuple{id, op.comm_rank, task.peer, task.seq},
                                   P2pTask{r, &op, &task})
                          .second);
        } else if (task.kind == JobOpKind::kRecv) {
          EXPECT_TRUE(recvs
                          .emplace(std::tuple{id, task.peer, op.comm_rank, task.seq},
                                   P2pTask{r, &op, &task})
                          .second);
        } else {
          ASSERT_EQ(op.tasks.size(), 1u);  // collectives are launched alone
          colls[{id, static_cast<int>(task.kind), task.seq}].push_back(&op);
        }
      }
    }
  }
  for (const auto& [key, members] : colls) {
    const JobOp& first = *members[0];
    ASSERT_EQ(members.size(),
              model.layout().Members(first.comm.family, first.comm.instance).size());
    int64_t last = 0;
    for (const JobOp* op : members) last = std::max(last, op->gpu_start_ns);
    const int64_t end = last + model.TransferNs(first.comm, 0, first.tasks[0], last);
    for (const JobOp* op : members) {
      EXPECT_EQ(op->tasks[0].bytes, first.tasks[0].bytes);
      EXPECT_EQ(op->gpu_end_ns, end);
      EXPECT_EQ(op->all_arrived_ns, last);  // its kernel waits for its peers until then
      // The last arriver has the shortest kernel: only the transfer.
      if (op->gpu_start_ns == last) {
        EXPECT_EQ(op->gpu_end_ns - op->gpu_start_ns, end - last);
      } else {
        EXPECT_GT(op->gpu_end_ns - op->gpu_start_ns, end - last);
      }
    }
  }
  ASSERT_EQ(sends.size(), recvs.size());
  // Per p2p op: the latest end and last arrival of its pairs.
  std::map<const JobOp*, std::pair<int64_t, int64_t>> group;
  for (const auto& [key, send] : sends) {
    const auto it = recvs.find(key);
    ASSERT_NE(it, recvs.end());
    const P2pTask& recv = it->second;
    EXPECT_EQ(send.task->bytes, recv.task->bytes);
    const int64_t last = std::max(send.op->gpu_start_ns, recv.op->gpu_start_ns);
    const int64_t end = last + model.TransferNs(send.op->comm, send.rank, *send.task, last);
    for (const JobOp* op : {send.op, recv.op}) {
      auto [g, fresh] = group.emplace(op, std::pair{end, last});
      if (!fresh) g->second = {std::max(g->second.first, end), std::max(g->second.second, last)};
    }
  }
  for (const auto& [op, end_last] : group) {
    EXPECT_EQ(op->gpu_end_ns, end_last.first);
    EXPECT_EQ(op->all_arrived_ns, end_last.second);
  }
}

TEST(JobModelTest, EndIsLastArrivalPlusTransfer) {
  JobModelConfig c = BaseConfig();
  c.max_iterations = 12;
  JobModel model(c);
  const RankOps ops = RunAll(&model);
  EXPECT_TRUE(model.finished());
  EXPECT_FALSE(model.hung());
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(model.Fate(r), RankFate::kCompleted);
    EXPECT_EQ(ops[r].back().iteration, 11);
  }
  CheckClosedLoop(model, ops);
}

TEST(JobModelTest, DeeperPipelinesAndOtherLayoutsNeverDeadlock) {
  for (const auto& [tp, pp, dp, gpus, m] : std::vector<std::tuple<int, int, int, int, int>>{
           {1, 4, 2, 4, 4}, {2, 4, 1, 4, 8}, {1, 8, 1, 2, 3}, {4, 1, 2, 4, 4}, {1, 1, 4, 1, 2}}) {
    JobModelConfig c = BaseConfig();
    c.tp = tp;
    c.pp = pp;
    c.dp = dp;
    c.gpus_per_node = gpus;
    c.program.microbatches = m;
    c.max_iterations = 6;
    JobModel model(c);
    const RankOps ops = RunAll(&model);
    EXPECT_FALSE(model.hung()) << tp << "x" << pp << "x" << dp;
    CheckClosedLoop(model, ops);
  }
}

// Mean arrival of `rank` minus that of `other` at their ops on `family` with task `kind`.
double MeanLateness(const RankOps& ops, int rank, int other, CommFamily family, JobOpKind kind) {
  std::map<int64_t, int64_t> at;  // seq -> arrival of `other`
  for (const JobOp& op : ops[other]) {
    if (op.comm.family == family && op.tasks[0].kind == kind) at[op.tasks[0].seq] = op.gpu_start_ns;
  }
  double sum = 0;
  int n = 0;
  for (const JobOp& op : ops[rank]) {
    if (op.comm.family != family || op.tasks[0].kind != kind || op.iteration < 2) continue;
    sum += static_cast<double>(op.gpu_start_ns - at.at(op.tasks[0].seq));
    ++n;
  }
  return n > 0 ? sum / n : 0;
}

// The property the root-cause detector relies on: a slow GPU makes innocent ranks arrive late
// (its TP partner, the downstream stage), but only the slow GPU's own compute grows.
TEST(JobModelTest, SlowGpuIsTheOnlyRankWhoseOwnTimeGrows) {
  JobModelConfig healthy = BaseConfig();
  healthy.max_iterations = 20;
  healthy.compute_jitter = 0.01;
  JobModelConfig slow = healthy;
  slow.slow.push_back({0, 1.5, 0});  // rank 0: stage 0, replica 0, tp_i 0
  const RankOps h = RunAll(healthy);
  const RankOps s = RunAll(slow);
  for (int r = 0; r < 8; ++r) {
    const RankTimes th = Times(h[r], kT0, 2, 20);
    const RankTimes ts = Times(s[r], kT0, 2, 20);
    const double own_ratio = static_cast<double>(ts.own_ns) / th.own_ns;
    if (r == 0) {
      EXPECT_NEAR(own_ratio, 1.5, 0.02) << "rank " << r;
    } else {
      EXPECT_NEAR(own_ratio, 1.0, 0.02) << "rank " << r;
    }
  }
  // The slow GPU's TP partner waits in every TP AllReduce: long kernels, normal own time.
  EXPECT_GT(Times(s[1], kT0, 2, 20).kernel_ns, Times(s[0], kT0, 2, 20).kernel_ns + 100 * kMs);
  // In DP the partner arrives as late as the slow GPU itself, against the healthy replica.
  const double partner_late = MeanLateness(s, 1, 3, CommFamily::kDp, JobOpKind::kReduceScatter);
  const double slow_late = MeanLateness(s, 0, 2, CommFamily::kDp, JobOpKind::kReduceScatter);
  EXPECT_GT(partner_late, 5 * kMs);
  EXPECT_NEAR(partner_late, slow_late, 0.1 * kMs);
  // Downstream, stage 1 of the slow replica arrives late too (it waited in its Recvs).
  EXPECT_GT(MeanLateness(s, 4, 6, CommFamily::kDp, JobOpKind::kReduceScatter), 5 * kMs);
  EXPECT_GT(MeanLateness(s, 5, 7, CommFamily::kDp, JobOpKind::kReduceScatter), 5 * kMs);
  // The healthy job has no such lateness.
  EXPECT_LT(std::abs(MeanLateness(h, 1, 3, CommFamily::kDp, JobOpKind::kReduceScatter)), kMs);
}

TEST(JobModelTest, SlowGpuFromATimeOnlyAfterIt) {
  JobModelConfig c = BaseConfig();
  c.max_iterations = 40;
  c.slow.push_back({5, 2.0, kT0 + 500 * kMs});
  const RankOps ops = RunAll(c);
  // Before the onset rank 5's own compute is nominal, after it twice as long (2% jitter).
  const int64_t before = Times(ops[5], kT0, 2, 8).own_ns;
  int64_t after_from = 0;
  for (const JobOp& op : ops[5]) {
    if (after_from == 0 && op.gpu_start_ns > kT0 + 600 * kMs) after_from = op.iteration + 1;
  }
  ASSERT_GT(after_from, 8);
  const int64_t after = Times(ops[5], kT0, after_from, after_from + 6).own_ns;
  EXPECT_NEAR(static_cast<double>(after) / before, 2.0, 0.05);
}

// Arrival of the first member minus that of the last member of each tied-embedding AllReduce.
std::vector<int64_t> EmbSpread(const RankOps& ops, int first, int last) {
  std::vector<int64_t> d;
  for (size_t i = 0, j = 0; i < ops[first].size() && j < ops[last].size();) {
    const JobOp& a = ops[first][i];
    const JobOp& b = ops[last][j];
    if (a.comm.family != CommFamily::kEmb) {
      ++i;
    } else if (b.comm.family != CommFamily::kEmb) {
      ++j;
    } else {
      d.push_back(a.gpu_start_ns - b.gpu_start_ns);
      ++i;
      ++j;
    }
  }
  return d;
}

TEST(JobModelTest, StageImbalanceIsConsistentFromTheStartAndAcrossReplicas) {
  JobModelConfig c = BaseConfig();
  c.max_iterations = 10;
  c.program.stage_factors = {1.5, 1.0};
  const RankOps ops = RunAll(c);
  // emb0 = ranks 0 and 4 (replica 0), emb2 = ranks 2 and 6 (replica 1).
  const std::vector<int64_t> r0 = EmbSpread(ops, 0, 4);
  const std::vector<int64_t> r1 = EmbSpread(ops, 2, 6);
  ASSERT_EQ(r0.size(), 10u);
  ASSERT_EQ(r1.size(), 10u);
  for (size_t k = 1; k < r0.size(); ++k) {
    // The first stage drains last and is heavier: it reaches the embedding AllReduce well after
    // the last stage, by the same amount in both replicas and every iteration.
    EXPECT_GT(r0[k], 5 * kMs) << k;
    EXPECT_NEAR(r0[k], r1[k], 0.1 * r0[k]) << k;
    EXPECT_NEAR(r0[k], r0[1], 0.1 * r0[1]) << k;
  }
}

TEST(JobModelTest, WarmupIterationsAreSlowerAndUneven) {
  JobModelConfig c = BaseConfig();
  c.max_iterations = 8;
  c.warmup_iterations = 3;
  const RankOps ops = RunAll(c);
  const int64_t first = Times(ops[0], kT0, 0, 1).own_ns;
  const int64_t steady = Times(ops[0], kT0, 5, 6).own_ns;
  EXPECT_GT(first, 1.4 * steady);
  // Uneven: ranks differ by more than the 2% jitter in the first iteration.
  const int64_t other = Times(ops[2], kT0, 0, 1).own_ns;
  EXPECT_GT(std::abs(first - other), 0.05 * steady);
}

// The iterations in which a rank's GPU idled over `min_idle_ns` waiting for its host (the ranks
// that wait for a peer do so inside a collective's kernel), with those ranks.
std::map<int64_t, std::set<int>> HostPauses(const RankOps& ops, int64_t min_idle_ns) {
  std::map<int64_t, std::set<int>> paused;
  for (int r = 0; r < static_cast<int>(ops.size()); ++r) {
    for (size_t i = 1; i < ops[r].size(); ++i) {
      const int64_t idle = ops[r][i].gpu_start_ns - ops[r][i - 1].gpu_end_ns - ops[r][i].compute_ns;
      if (idle > min_idle_ns) paused[ops[r][i].iteration].insert(r);
    }
  }
  return paused;
}

TEST(JobModelTest, JobWideStallsPauseEveryRankSlightlyDifferently) {
  JobModelConfig c = BaseConfig();
  c.end_ns = kT0 + 3500 * kMs;
  c.stall_every_ns = 1 * kS;
  c.stall_ns = 200 * kMs;
  const std::map<int64_t, std::set<int>> paused = HostPauses(RunAll(c), 150 * kMs);
  EXPECT_EQ(paused.size(), 3u);  // at about 1, 2 and 3 s
  for (const auto& [iteration, ranks] : paused) {
    EXPECT_EQ(ranks.size(), 8u) << "iteration " << iteration;  // every rank, the same iterations
  }
}

// Garbage collection: one rank's host at a time pauses, a different one each time (the rank is
// drawn per iteration); every other rank only waits for it inside a collective.
TEST(JobModelTest, HostPausesHitOneRankAtATime) {
  JobModelConfig c = BaseConfig();
  c.end_ns = kT0 + 6500 * kMs;
  c.gc_every_ns = 1 * kS;
  c.gc_ns = 200 * kMs;
  const std::map<int64_t, std::set<int>> paused = HostPauses(RunAll(c), 150 * kMs);
  ASSERT_EQ(paused.size(), 6u);  // at about 1, 2, ... 6 s
  std::set<int> who;
  for (const auto& [iteration, ranks] : paused) {
    EXPECT_EQ(ranks.size(), 1u) << "iteration " << iteration;
    who.insert(*ranks.begin());
  }
  EXPECT_GE(who.size(), 3u);  // not the same rank every time
}

TEST(JobModelTest, DriftingGpuSlowsLinearlyFromItsStart) {
  JobModelConfig c = BaseConfig();
  c.drifting.push_back({5, 0.01, kT0 + kS});
  const JobModel m(c);
  EXPECT_DOUBLE_EQ(m.FaultFactor(5, kT0), 1.0);
  EXPECT_DOUBLE_EQ(m.FaultFactor(5, kT0 + kS), 1.0);
  EXPECT_NEAR(m.FaultFactor(5, kT0 + 16 * kS), 1.15, 1e-12);
  EXPECT_NEAR(m.FaultFactor(5, kT0 + 21 * kS), 1.20, 1e-12);
  EXPECT_DOUBLE_EQ(m.FaultFactor(4, kT0 + 21 * kS), 1.0);
}

TEST(JobModelTest, DegradedNicSlowsOnlyNetworkTransfersThroughItsNode) {
  JobModelConfig c = BaseConfig();
  c.degrade_node = 1;  // ranks 2 and 3
  c.degrade_factor = 0.1;
  c.degrade_at_ns = kT0 + kS;
  const JobModel m(c);
  const JobTask rs{JobOpKind::kReduceScatter, -1, 48ull << 20, 0};
  const JobTask ar{JobOpKind::kAllReduce, -1, 4ull << 20, 0};
  const CommRef dp0{CommFamily::kDp, 0};  // ranks 0, 2: nodes 0 and 1
  const CommRef dp2{CommFamily::kDp, 2};  // ranks 4, 6: nodes 2 and 3
  const CommRef tp1{CommFamily::kTp, 1};  // ranks 2, 3: node 1, NVLink
  EXPECT_DOUBLE_EQ(m.BandwidthGbs(dp0, 0, rs, kT0), 25.0);
  EXPECT_DOUBLE_EQ(m.BandwidthGbs(dp0, 0, rs, kT0 + kS), 2.5);
  EXPECT_DOUBLE_EQ(m.BandwidthGbs(dp2, 4, rs, kT0 + kS), 25.0);
  EXPECT_DOUBLE_EQ(m.BandwidthGbs(tp1, 2, ar, kT0 + kS), 300.0);
  // p2p by the peers' nodes: pp0 = ranks 0 (node 0) and 4 (node 2).
  const JobTask send{JobOpKind::kSend, 1, 2ull << 20, 0};
  EXPECT_DOUBLE_EQ(m.BandwidthGbs({CommFamily::kPp, 0}, 0, send, kT0 + kS), 25.0);
  EXPECT_DOUBLE_EQ(m.BandwidthGbs({CommFamily::kPp, 2}, 2, send, kT0 + kS), 2.5);
  // ReduceScatter 48 MiB over 2 ranks: 20 us + 1/2 x 48 MiB / 25 bytes per ns.
  EXPECT_EQ(m.TransferNs(dp0, 0, rs, kT0), 20'000 + 1'006'633);
}

TEST(JobModelTest, ThrottledGpuIsSlowOnlyInItsOnPeriods) {
  JobModelConfig c = BaseConfig();
  c.throttled.push_back({3, 2.0, 500 * kMs, 500 * kMs, kT0});
  const JobModel m(c);
  EXPECT_DOUBLE_EQ(m.FaultFactor(3, kT0), 2.0);
  EXPECT_DOUBLE_EQ(m.FaultFactor(3, kT0 + 499 * kMs), 2.0);
  EXPECT_DOUBLE_EQ(m.FaultFactor(3, kT0 + 500 * kMs), 1.0);
  EXPECT_DOUBLE_EQ(m.FaultFactor(3, kT0 + 1000 * kMs), 2.0);
  EXPECT_DOUBLE_EQ(m.FaultFactor(2, kT0), 1.0);
}

TEST(JobModelTest, DeterministicWhateverTheConsumer) {
  JobModelConfig c = BaseConfig();
  c.end_ns = kT0 + kS;
  c.warmup_iterations = 3;
  c.slow.push_back({6, 1.3, kT0 + 200 * kMs});
  c.stall_every_ns = 300 * kMs;
  c.stall_ns = 20 * kMs;
  const RankOps all = RunAll(c);
  JobModel only3(c, std::vector<int>{3});
  std::vector<JobOp> got;
  while (const JobOp* op = only3.Next(3)) got.push_back(*op);
  ASSERT_EQ(got.size(), all[3].size());
  ASSERT_GT(got.size(), 500u);
  for (size_t i = 0; i < got.size(); ++i) {
    const JobOp& a = got[i];
    const JobOp& b = all[3][i];
    EXPECT_TRUE(a.index == b.index && a.iteration == b.iteration && a.comm == b.comm &&
                a.comm_rank == b.comm_rank && a.tasks.size() == b.tasks.size() &&
                a.tasks[0].seq == b.tasks[0].seq && a.tasks[0].bytes == b.tasks[0].bytes &&
                a.compute_ns == b.compute_ns && a.host_enqueue_ns == b.host_enqueue_ns &&
                a.gpu_start_ns == b.gpu_start_ns && a.gpu_end_ns == b.gpu_end_ns)
        << "op " << i;
  }
}

TEST(JobModelTest, SequenceNumbersCountPerCommunicatorAndKind) {
  JobModelConfig c = BaseConfig();
  c.max_iterations = 3;
  const RankOps ops = RunAll(c);
  std::map<std::tuple<int, int, int>, int64_t> next;  // (comm family/instance, kind, peer)
  for (const JobOp& op : ops[4]) {
    for (const JobTask& task : op.tasks) {
      const auto key = std::tuple{static_cast<int>(op.comm.family) * 1000 + op.comm.instance,
                                  static_cast<int>(task.kind), task.peer};
      EXPECT_EQ(task.seq, next[key]++);
    }
  }
  // Rank 4 (stage 1): 16 TP AllReduces per iteration, 8 Recv + 8 Send with stage 0.
  EXPECT_EQ((next[{0 * 1000 + 2, 0, -1}]), 48);
  EXPECT_EQ((next[{2 * 1000 + 0, static_cast<int>(JobOpKind::kRecv), 0}]), 12);
  EXPECT_EQ((next[{2 * 1000 + 0, static_cast<int>(JobOpKind::kSend), 0}]), 12);
}

// --- Other shapes (megatron_layout.h): MoE all-to-all, FSDP, interleaved 1F1B, ring attention ---

struct ShapeCase {
  const char* name;
  int tp, pp, dp, gpus, microbatches, layers, virtual_stages;
  bool fsdp, cp_ring, moe_a2a;
};

JobModelConfig ShapeConfig(const ShapeCase& s) {
  JobModelConfig c = BaseConfig();
  c.tp = s.tp;
  c.pp = s.pp;
  c.dp = s.dp;
  c.gpus_per_node = s.gpus;
  c.program.microbatches = s.microbatches;
  c.program.layers = s.layers;
  c.program.virtual_stages = s.virtual_stages;
  c.program.fsdp = s.fsdp;
  c.program.cp_ring = s.cp_ring;
  if (s.moe_a2a) {
    c.program.moe_expert_ns = 300'000;
    c.program.moe_dispatcher = MoeDispatcher::kAllToAll;
  }
  return c;
}

TEST(JobModelTest, OtherShapesNeverDeadlockAndKeepTheClosedLoop) {
  const ShapeCase cases[] = {
      {"moe a2a", 2, 2, 4, 2, 4, 2, 1, false, false, true},
      {"moe a2a, ep 8", 1, 1, 8, 2, 2, 1, 1, false, false, true},
      {"fsdp", 2, 2, 2, 2, 4, 2, 1, true, false, false},
      {"fsdp, pp 1", 2, 1, 4, 2, 4, 3, 1, true, false, false},
      {"interleaved pp 2 v 2", 2, 2, 2, 2, 4, 2, 2, false, false, false},
      {"interleaved pp 4 v 2", 1, 4, 2, 4, 8, 2, 2, false, false, false},
      {"interleaved pp 4 v 4", 2, 4, 1, 2, 4, 4, 4, false, false, false},
      {"interleaved pp 3 v 3", 1, 3, 2, 2, 6, 3, 3, false, false, false},
      {"ring tp 4", 4, 2, 1, 4, 4, 2, 1, false, true, false},
      {"ring tp 2", 2, 2, 2, 2, 4, 2, 1, false, true, false},
      {"everything", 2, 2, 4, 4, 4, 2, 2, true, true, true},
  };
  for (const ShapeCase& s : cases) {
    SCOPED_TRACE(s.name);
    JobModelConfig c = ShapeConfig(s);
    c.max_iterations = 4;
    c.slow.push_back({1, 1.7, 0});  // timing never decides whether it deadlocks, but vary it
    JobModel model(c);
    const RankOps ops = RunAll(&model);
    EXPECT_TRUE(model.finished());
    EXPECT_FALSE(model.hung());
    for (int r = 0; r < model.world_size(); ++r) {
      EXPECT_EQ(model.Fate(r), RankFate::kCompleted) << "rank " << r;
      ASSERT_FALSE(ops[r].empty());
      EXPECT_EQ(ops[r].back().iteration, 3) << "rank " << r;
    }
    CheckClosedLoop(model, ops);
  }
}

// Mean time `rank`'s kernels waited for their peers (the initial sync: all parties arrived minus
// its own start) over its ops from iteration 2 on that `pick` selects (by op and its ordinal among
// the picked ops of its iteration).
template <typename Pick>
double MeanWaitNs(const std::vector<JobOp>& ops, Pick pick) {
  double sum = 0;
  int n = 0;
  int64_t iteration = -1;
  int ordinal = 0;
  for (const JobOp& op : ops) {
    if (op.iteration != iteration) {
      iteration = op.iteration;
      ordinal = 0;
    }
    if (!pick(op)) continue;
    if (op.iteration >= 2 && pick(op, ordinal)) {
      sum += static_cast<double>(op.all_arrived_ns - op.gpu_start_ns);
      ++n;
    }
    ++ordinal;
  }
  EXPECT_GT(n, 0);
  return n > 0 ? sum / n : 0;
}

bool IsA2a(const JobOp& op) { return op.comm.family == CommFamily::kDp && IsP2p(op.tasks[0].kind); }

// A slow expert GPU: every peer of its expert-parallel group waits for it in both all-to-alls
// of every MoE layer (the dispatch, for its slower attention; the combine, for its slower
// experts), while it waits for nobody.
TEST(JobModelTest, SlowExpertGpuMakesEveryEpPeerWaitInBothAllToAlls) {
  JobModelConfig healthy = ShapeConfig({"", 2, 1, 4, 2, 4, 2, 1, false, false, true});
  healthy.program.moe_expert_ns = 1'000'000;
  healthy.max_iterations = 12;
  healthy.compute_jitter = 0.01;
  JobModelConfig slow = healthy;
  slow.slow.push_back({0, 2.0, 0});  // rank 0: EP group dp0 = ranks 0, 2, 4, 6
  const RankOps h = RunAll(healthy);
  const RankOps s = RunAll(slow);
  auto wait = [](const std::vector<JobOp>& ops, bool combine) {
    return MeanWaitNs(ops, [combine](const JobOp& op, int ordinal = -1) {
      return IsA2a(op) && (ordinal < 0 || (ordinal % 2 == 1) == combine);
    });
  };
  for (bool combine : {false, true}) {
    SCOPED_TRACE(combine ? "combine" : "dispatch");
    const double slow_waits = wait(s[0], combine);
    EXPECT_LT(slow_waits, 0.1 * kMs);
    for (int peer : {2, 4, 6}) {
      EXPECT_GT(wait(s[peer], combine), slow_waits + 0.7 * kMs) << "peer " << peer;
      // Without the slow GPU nobody waits that long in the dispatch (the combine waits for the
      // hot expert of the moment, a different one each time).
      if (!combine) {
        EXPECT_LT(wait(h[peer], combine), 0.1 * kMs) << "peer " << peer;
      }
    }
  }
}

// A GPU slow at its expert compute only (--slow-scope=expert): its EP peers wait for it in the
// combine, nowhere else; in the dispatch nobody waits for it.
TEST(JobModelTest, ExpertOnlySlownessShowsInTheCombineAlone) {
  JobModelConfig slow = ShapeConfig({"", 2, 1, 4, 2, 4, 2, 1, false, false, true});
  slow.program.moe_expert_ns = 1'000'000;
  slow.max_iterations = 12;
  slow.compute_jitter = 0.01;
  slow.slow.push_back({0, 3.0, 0, /*expert_only=*/true});  // rank 0: EP group ranks 0, 2, 4, 6
  const RankOps s = RunAll(slow);
  auto wait = [](const std::vector<JobOp>& ops, bool combine) {
    return MeanWaitNs(ops, [combine](const JobOp& op, int ordinal = -1) {
      return IsA2a(op) && (ordinal < 0 || (ordinal % 2 == 1) == combine);
    });
  };
  for (int peer : {2, 4, 6}) {
    EXPECT_GT(wait(s[peer], /*combine=*/true), 1.0 * kMs) << "peer " << peer;
    EXPECT_LT(wait(s[peer], /*combine=*/false), 0.1 * kMs) << "peer " << peer;
  }
  // Its combines, and only they, follow its slowed compute.
  int combines = 0;
  for (const JobOp& op : s[0]) {
    if (!op.expert_compute) continue;
    ++combines;
    EXPECT_TRUE(IsA2a(op));
  }
  EXPECT_GT(combines, 0);
}

// FSDP: a slow GPU makes its DP peer wait in the parameter AllGathers and gradient
// ReduceScatters of every layer.
TEST(JobModelTest, FsdpSlowGpuDelaysItsDpPeersLayerByLayer) {
  JobModelConfig healthy = ShapeConfig({"", 2, 2, 2, 2, 4, 2, 1, true, false, false});
  healthy.max_iterations = 10;
  healthy.compute_jitter = 0.01;
  JobModelConfig slow = healthy;
  slow.slow.push_back({0, 2.0, 0});  // rank 0: DP group dp0 = ranks 0, 2
  auto dp_wait = [](const std::vector<JobOp>& ops, JobOpKind kind) {
    return MeanWaitNs(ops, [kind](const JobOp& op, int = 0) {
      return op.comm.family == CommFamily::kDp && op.tasks[0].kind == kind;
    });
  };
  const RankOps h = RunAll(healthy);
  const RankOps s = RunAll(slow);
  for (JobOpKind kind : {JobOpKind::kAllGather, JobOpKind::kReduceScatter}) {
    SCOPED_TRACE(JobOpKindName(kind));
    EXPECT_LT(dp_wait(s[0], kind), 0.1 * kMs);
    // The prefetched gather of each pass's second layer directly follows the first one's, so
    // half of the gathers find everybody there already.
    EXPECT_GT(dp_wait(s[2], kind), (kind == JobOpKind::kAllGather ? 0.3 : 1.0) * kMs);
    EXPECT_LT(dp_wait(h[2], kind), 0.1 * kMs);
  }
  // 4 microbatches x 2 layers x 2 gathers per iteration, no end-of-iteration DP sync.
  int gathers = 0;
  for (const JobOp& op : s[2]) {
    gathers += op.iteration == 5 && op.comm.family == CommFamily::kDp &&
               op.tasks[0].kind == JobOpKind::kAllGather;
  }
  EXPECT_EQ(gathers, 16);
}

// The job-wide end of each iteration, minus that of the one before, from iteration 2 on: the mean.
double MeanIterationNs(const RankOps& ops) {
  std::map<int64_t, int64_t> end;
  for (const std::vector<JobOp>& v : ops) {
    for (const JobOp& op : v) end[op.iteration] = std::max(end[op.iteration], op.gpu_end_ns);
  }
  return static_cast<double>(end.rbegin()->second - end.at(1)) / (end.rbegin()->first - 1);
}

// Interleaving V chunks per rank shrinks the pipeline bubble, as it does in Megatron; a slow
// stage delays both its neighbours, the wrap-around included.
TEST(JobModelTest, InterleavedPipelineShrinksTheBubbleAndSpreadsASlowStage) {
  std::map<int, double> iteration_ns;
  for (int v : {1, 2, 4}) {
    JobModelConfig c = ShapeConfig({"", 1, 4, 1, 1, 8, 4, v, false, false, false});
    c.max_iterations = 6;
    c.compute_jitter = 0;
    iteration_ns[v] = MeanIterationNs(RunAll(c));
  }
  // Compute per rank and iteration: 8 x 4 x 3 ms = 96 ms plus the optimizer's 4 ms; 1F1B adds a
  // bubble of (P - 1) x 12 ms, interleaving about 1/V of it (plus more, smaller messages).
  EXPECT_GT(iteration_ns[1], 130 * kMs);
  EXPECT_LT(iteration_ns[2], iteration_ns[1] - 10 * kMs);
  EXPECT_LT(iteration_ns[4], iteration_ns[2]);

  JobModelConfig healthy = ShapeConfig({"", 1, 4, 2, 2, 8, 2, 2, false, false, false});
  healthy.max_iterations = 8;
  healthy.compute_jitter = 0.01;
  JobModelConfig slow = healthy;
  slow.slow.push_back({0, 2.0, 0});  // stage 0 of replica 0: pp0 = ranks 0, 2, 4, 6
  const RankOps h = RunAll(healthy);
  const RankOps s = RunAll(slow);
  auto pp_wait = [](const std::vector<JobOp>& ops) {
    return MeanWaitNs(ops,
                      [](const JobOp& op, int = 0) { return op.comm.family == CommFamily::kPp; });
  };
  EXPECT_LT(pp_wait(s[0]), pp_wait(h[0]));
  EXPECT_GT(pp_wait(s[2]), pp_wait(h[2]) + 0.5 * kMs);  // stage 1 waits for stage 0's forwards
  EXPECT_GT(pp_wait(s[6]), pp_wait(h[6]) + 0.5 * kMs);  // stage 3, through the wrap-around
}

// Ring attention: a slow GPU holds up its whole TP ring, step by step.
TEST(JobModelTest, RingAttentionSlowGpuHoldsUpItsRing) {
  JobModelConfig healthy = ShapeConfig({"", 4, 1, 2, 4, 4, 2, 1, false, true, false});
  healthy.max_iterations = 10;
  healthy.compute_jitter = 0.01;
  JobModelConfig slow = healthy;
  slow.slow.push_back({1, 2.0, 0});  // tp0 = ranks 0-3
  auto ring_wait = [](const std::vector<JobOp>& ops) {
    return MeanWaitNs(ops,
                      [](const JobOp& op, int = 0) { return op.comm.family == CommFamily::kTp; });
  };
  const RankOps h = RunAll(healthy);
  const RankOps s = RunAll(slow);
  const double slow_waits = ring_wait(s[1]);
  for (int r : {0, 2, 3}) {
    EXPECT_GT(ring_wait(s[r]), slow_waits + 0.3 * kMs) << "rank " << r;
    EXPECT_LT(ring_wait(h[r]), 0.05 * kMs) << "rank " << r;
  }
  // The other TP group (ranks 4-7) meets the slow one only in the DP collectives.
  for (int r : {4, 5, 6, 7}) EXPECT_LT(ring_wait(s[r]), 0.1 * kMs) << "rank " << r;
}

// Cost of the schedule as one rank process computes it: the whole job, keeping one rank's ops.
double CpuSecondsFor(const JobModelConfig& c, int rank, int64_t* ops) {
  const auto start = std::chrono::steady_clock::now();
  JobModel model(c, std::vector<int>{rank});
  *ops = 0;
  while (model.Next(rank) != nullptr) ++*ops;
  EXPECT_FALSE(model.hung());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The cost is printed, not asserted (speed is measured, not timed in tests): 8-15 ms for 8 ranks
// and 55-88 ms for 64 on the 2-core machine when written.
TEST(JobModelTest, TenSecondsOfEightAndSixtyFourRanksComputeToTheEnd) {
  JobModelConfig c = BaseConfig();
  c.end_ns = kT0 + 10 * kS;
  int64_t ops = 0;
  const double eight = CpuSecondsFor(c, 5, &ops);
  std::printf("8 ranks, 10 s: %lld ops of rank 5, %.3f s\n", static_cast<long long>(ops), eight);
  EXPECT_GT(ops, 5'000);  // about 280 iterations of 25 ops
  c.tp = 4;
  c.pp = 4;
  c.dp = 4;
  c.gpus_per_node = 8;
  const double sixty_four = CpuSecondsFor(c, 17, &ops);
  std::printf("64 ranks, 10 s: %lld ops of rank 17, %.3f s\n", static_cast<long long>(ops),
              sixty_four);
  EXPECT_GT(ops, 1'000);
}

}  // namespace
}  // namespace ncclwatch::simjob

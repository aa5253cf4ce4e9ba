#include "tests/loadgen/job_reports.h"

#include <map>
#include <set>
#include <tuple>

#include "aggregator/analysis/analyzer.h"
#include "aggregator/analysis/answers.h"
#include "gtest/gtest.h"
#include "plugin/compactor.h"
#include "proto/samples.h"
#include "proto/validate.h"

namespace ncclwatch::loadgen {
namespace {

constexpr int64_t kT0 = 1'800'000'000'000'000'000;  // 2027, on the model's (unix ns) clock
constexpr int64_t kSecond = 1'000'000'000;

simjob::JobModelConfig SmallJob() {
  simjob::JobModelConfig m;
  m.tp = 2;
  m.pp = 2;
  m.dp = 4;
  m.gpus_per_node = 2;
  m.program.microbatches = 4;
  m.program.layers = 1;
  m.program.layer_fwd_ns = 20'000'000;
  m.program.optimizer_ns = 40'000'000;
  m.t0_ns = kT0;
  m.warmup_iterations = 2;
  m.clock_skew_ns = 20'000'000;
  return m;
}

// Runs `seconds` intervals of the job through an in-process analyzer, as the aggregator would
// (reports in node order, ticks four times a second); returns the root causes found, by pid, with
// the first time each was seen.
std::map<uint32_t, int64_t> Judge(JobReports& job, int seconds, aggregator::Analyzer& analyzer,
                                  std::vector<ncclwatch::v1::RankReport>* all = nullptr) {
  std::map<uint32_t, int64_t> found;
  for (int k = 1; k <= seconds; ++k) {
    const int64_t end = kT0 + k * kSecond;
    for (int n = 0; n < job.nodes(); ++n) {
      std::vector<ncclwatch::v1::RankReport> reports;
      job.NodeReports(n, end, &reports);
      for (const auto& r : reports) {
        const ReportVerdict verdict = ValidateReport(r);
        EXPECT_TRUE(verdict.ok) << verdict.reason << ": " << verdict.detail;
        analyzer.Ingest(r, end);
        if (all != nullptr) all->push_back(r);
      }
    }
    for (int q = 1; q <= 4; ++q) analyzer.Tick(end + q * kSecond / 4 - kSecond / 4);
    for (const auto& rc : analyzer.answers().RootCauses("job")) found.try_emplace(rc.pid(), end);
  }
  return found;
}

TEST(JobReportsTest, EveryRankOfACommunicatorReportsTheSameSampledCollectives) {
  JobReportsOptions o;
  o.job_id = "job";
  o.stride = 4;
  JobReports job(SmallJob(), o);
  aggregator::Analyzer analyzer;
  std::vector<ncclwatch::v1::RankReport> all;
  Judge(job, 8, analyzer, &all);
  // (comm, op, seq) -> the comm ranks that sampled it; for a point-to-point exchange op is
  // "sender>receiver".
  std::map<std::tuple<uint64_t, std::string, uint64_t>, std::set<int>> seen;
  std::map<uint64_t, int> nranks;
  int samples = 0, p2p_stats = 0, exchanges = 0;
  for (const auto& r : all) {
    nranks[r.identity().comm_hash()] = r.identity().nranks();
    EXPECT_EQ(r.sample_stride(), 4u);
    for (const auto& s : r.stats()) p2p_stats += s.p2p() ? 1 : 0;
    ForEachSample(r, [&](const ncclwatch::v1::SampleColumn& col, const Sample& s) {
      EXPECT_GT(s.duration_ns, 0u);
      std::string op = col.op();
      if (col.has_peer()) {  // sampled by the pick of (seq, pair) (plugin/compactor.h)
        const bool send = col.op() == "Send";
        const int sender = send ? r.identity().rank() : col.peer();
        const int receiver = send ? col.peer() : r.identity().rank();
        // Stride 4 x 4 (exchanges) x f 1 (communicators of up to 15 ranks).
        EXPECT_EQ(
            plugin::ExchangePick(s.seq, sender, receiver) % (4 * plugin::kExchangeStrideFactor),
            0u);
        op = std::to_string(sender) + ">" + std::to_string(receiver);
        ++exchanges;
      } else {
        EXPECT_EQ(s.seq % 4, 0u);
      }
      seen[{r.identity().comm_hash(), op, s.seq}].insert(r.identity().rank());
      ++samples;
    });
  }
  EXPECT_GT(samples, 500);
  EXPECT_GT(p2p_stats, 0);   // pipeline Send/Recv are counted
  EXPECT_GT(exchanges, 50);  // and sampled at both ends
  // Every collective but the last few of each communicator (still running at the end) was
  // sampled by all its ranks.
  int complete = 0, partial = 0;
  for (const auto& [key, ranks] : seen) {
    const bool exchange = std::get<1>(key).find('>') != std::string::npos;
    const int parties = exchange ? 2 : nranks[std::get<0>(key)];
    (static_cast<int>(ranks.size()) == parties ? complete : partial)++;
  }
  EXPECT_GT(complete, 100);
  EXPECT_LT(partial, complete / 10);
  // 16 ranks, each in world, tp, dp, pp, mp and emb (with 2 stages every rank is on the first or
  // the last), one report per communicator and interval, 8 intervals.
  EXPECT_EQ(all.size(), 8u * 16 * 6);
}

TEST(JobReportsTest, AHealthyJobHasNoRootCause) {
  JobReportsOptions o;
  o.job_id = "job";
  JobReports job(SmallJob(), o);
  aggregator::Analyzer analyzer;
  EXPECT_TRUE(Judge(job, 40, analyzer).empty());
  EXPECT_TRUE(analyzer.answers().Stragglers("job").empty());
}

TEST(JobReportsTest, TheAnalyzerNamesTheSlowGpuAndNoOther) {
  simjob::JobModelConfig m = SmallJob();
  m.slow.push_back({.rank = 5, .factor = 1.5, .at_ns = kT0 + 20 * kSecond});
  JobReportsOptions o;
  o.job_id = "job";
  JobReports job(m, o);
  aggregator::Analyzer analyzer;
  const std::map<uint32_t, int64_t> found = Judge(job, 40, analyzer);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found.begin()->first, 100005u);
  EXPECT_LE(found.begin()->second - (kT0 + 20 * kSecond), 5 * kSecond);
}

TEST(JobReportsTest, AHungRankLeavesItsCollectivesInFlight) {
  simjob::JobModelConfig m = SmallJob();
  m.hang_rank = 3;
  m.hang_at_ns = kT0 + 5 * kSecond;
  JobReportsOptions o;
  o.job_id = "job";
  JobReports job(m, o);
  aggregator::Analyzer analyzer;
  Judge(job, 25, analyzer);
  const ncclwatch::v1::ListHangsResponse hangs =
      analyzer.answers().Hangs("job", kT0 + 25 * kSecond);
  ASSERT_GT(hangs.hangs_size(), 0);
  bool rank3_missing = false;
  for (const auto& h : hangs.hangs()) {
    for (const auto& m : h.missing()) {
      rank3_missing |= m.gpu_uuid() == "GPU-00000000-0000-0000-0000-000000000003";
    }
  }
  EXPECT_TRUE(rank3_missing) << hangs.DebugString();
}

}  // namespace
}  // namespace ncclwatch::loadgen

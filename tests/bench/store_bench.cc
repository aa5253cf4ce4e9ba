// Storage and federation speed of the aggregator, on a real RocksDB in a temporary directory.
//
// BM_AppendPoints: sustained ingest into the time series -- batches of 1,000 points spread over
//   10,000 series (as the points of one agent batch are), rate counter in points per second.
// BM_SyncedIngest / BM_UnsyncedIngest: what a durable acknowledgement costs -- 1, 8 or 32 agents
//   pushing node batches at once, each batch synced to RocksDB's WAL before its ack (group commit),
//   then its points stored; acks and points per second (below, at the function).
// BM_QueryOneHour: Query.QueryRange's work for one series holding 1 h of 1 s points, among 10,000
//   series: selector match over the series index, range read, response built. Reported as the
//   median of repetitions.
// BM_Federate100k: GET /federate of 113,000 series over loopback HTTP, from the aggregator's own
//   routes: the analyzer's export of every series (Inspector statistics plus detection series of
//   5 communicators x 1,024 ranks), selector matching, rendering in Prometheus text format, and
//   the transfer of the ~26 MiB answer.
// BM_FederateDetection16k: GET /federate of the detection series (what alerting federates) of a
//   16,384-rank job (TP 8 x PP 8 x DP 256, ~4,400 communicators) after 3 s of its reports from
//   the loadgen's job model: the analyzer's export, matching, rendering and the transfer.
//
// Usage: store_bench [Google Benchmark flags]
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "aggregator/analysis/analyzer.h"
#include "aggregator/query/query.h"
#include "aggregator/server/http_routes.h"
#include "aggregator/store/store.h"
#include "benchmark/benchmark.h"
#include "common/daemon.h"
#include "common/metrics.h"
#include "httplib.h"
#include "tests/loadgen/job_reports.h"

namespace ncclwatch::bench {
namespace {

using aggregator::Store;
using ncclwatch::SeriesPoint;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ncclwatch-store-bench-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

LabelPairs RankSeriesLabels(int i) {
  return {{"job_id", "bench"},
          {"comm_hash", "0x00000000000be7c4"},
          {"comm_name", "world"},
          {"rank", std::to_string(i)},
          {"node", "node-" + std::to_string(i / 8)},
          {"gpu", "GPU" + std::to_string(i % 8)},
          {"collective", "AllReduce"},
          {"message_size", "32-33MB"}};
}

void BM_AppendPoints(benchmark::State& state) {
  TempDir dir;
  auto store = Store::Open(dir.path());
  if (!store.ok()) return state.SkipWithError("cannot open the store");
  constexpr int kSeries = 10'000;
  constexpr int kBatch = 1'000;
  std::vector<SeriesPoint> batch(kBatch);
  int64_t t = 1'700'000'000'000;
  int next_series = 0;
  int64_t points = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (SeriesPoint& p : batch) {
      p = {"nccl_bus_bandwidth_gbs", RankSeriesLabels(next_series), 20.0, t};
      if (++next_series == kSeries) {
        next_series = 0;
        t += 1'000;
      }
    }
    state.ResumeTiming();
    if (!(*store)->AppendPoints(batch).ok()) return state.SkipWithError("write failed");
    points += kBatch;
  }
  state.counters["points_per_s"] =
      benchmark::Counter(static_cast<double>(points), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AppendPoints)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_QueryOneHour(benchmark::State& state) {
  TempDir dir;
  auto store = Store::Open(dir.path());
  if (!store.ok()) return state.SkipWithError("cannot open the store");
  // 10,000 series; the queried one (rank 4242) has 3,600 points, one per second.
  const int64_t t0 = 1'700'000'000'000;
  std::vector<SeriesPoint> batch;
  for (int i = 0; i < 10'000; ++i)
    batch.push_back({"nccl_bus_bandwidth_gbs", RankSeriesLabels(i), 1, t0});
  for (int s = 0; s < 3'600; ++s) {
    batch.push_back({"nccl_bus_bandwidth_gbs", RankSeriesLabels(4242), 20.0 + s, t0 + s * 1'000});
  }
  if (!(*store)->AppendPoints(batch).ok()) return state.SkipWithError("write failed");
  if (!(*store)->Compact().ok()) return state.SkipWithError("compaction failed");
  aggregator::Analyzer analyzer;
  MetricRegistry metrics;
  aggregator::QueryEngine core(**store, analyzer);
  ncclwatch::v1::QueryRangeRequest request;
  request.set_selector(R"(nccl_bus_bandwidth_gbs{job_id="bench",rank="4242"})");
  request.set_start_unix_ms(t0);
  request.set_end_unix_ms(t0 + 3'600'000);
  size_t points = 0;
  for (auto _ : state) {
    auto answer = core.QueryRange(request, 0);
    if (!answer.ok() || answer->series_size() != 1) return state.SkipWithError("query failed");
    points = answer->series(0).points_size();
    benchmark::DoNotOptimize(answer);
  }
  state.counters["points"] = static_cast<double>(points);
}
BENCHMARK(BM_QueryOneHour)
    ->Unit(benchmark::kMillisecond)
    ->Repetitions(9)
    ->ReportAggregatesOnly(true);

// A report of rank `rank` of communicator `comm` (1,024 ranks) with 10 message sizes.
ncclwatch::v1::RankReport StatsReport(int comm, int rank) {
  ncclwatch::v1::RankReport r;
  auto* id = r.mutable_identity();
  id->set_job_id("bench");
  id->set_comm_hash(0x1000 + comm);
  id->set_comm_name("comm" + std::to_string(comm));
  id->set_rank(rank);
  id->set_nranks(1024);
  id->set_n_nodes(128);
  id->set_node("node-" + std::to_string(rank / 8));
  id->set_cuda_device(rank % 8);
  r.set_interval_end_unix_ns(1'700'000'000'000'000'000);
  for (int size = 0; size < 10; ++size) {
    auto* st = r.add_stats();
    st->set_op("AllReduce");
    st->set_algo_proto("RING_SIMPLE");
    st->set_message_size(std::to_string(1 << size) + "-" + std::to_string((1 << size) + 1) + "MB");
    st->set_peer(-1);
    st->set_count(10);
    st->set_bytes(10ull << (20 + size));
    st->set_exec_time_us_sum(10 * 900.0);
    st->set_exec_time_us_min(800);
    st->set_exec_time_us_max(1000);
    st->set_bus_bw_gbs_log_sum(10 * std::log(20.0));
    st->set_bw_samples(10);
  }
  return r;
}

// BM_SyncedIngest: what an acknowledgement costs. N agents (the argument) push at once, each 25
// node batches (8 rank reports each) in a row, the way Ingest::Push stores them: the batch synced
// to the write-ahead log (fdatasync) before the ack, then the 320 points derived from it
// (4 Inspector families x 8 ranks x 10 message sizes). Concurrent pushes are committed in groups
// by RocksDB: one WAL write and one sync for all that wait. One iteration is all N x 25 acks;
// points_per_s and acks_per_s are their rates. BM_UnsyncedIngest is the same without the sync.
void Ingest(benchmark::State& state, bool synced) {
  TempDir dir;
  auto store = Store::Open(dir.path(), nullptr, synced);
  if (!store.ok()) return state.SkipWithError("cannot open the store");
  const int agents = static_cast<int>(state.range(0));
  constexpr int kBatchesPerAgent = 25;
  std::vector<ncclwatch::v1::NodeBatch> batches(agents);
  std::vector<std::vector<SeriesPoint>> points(agents);
  const char* families[] = {"nccl_bus_bandwidth_gbs", "nccl_collective_exec_time_microseconds",
                            "nccl_algo_bandwidth_gbs", "ncclwatch_collective_count"};
  for (int a = 0; a < agents; ++a) {
    batches[a].set_agent_id("agent-" + std::to_string(a));
    batches[a].set_node("node-" + std::to_string(a));
    for (int rank = 0; rank < 8; ++rank) *batches[a].add_reports() = StatsReport(0, a * 8 + rank);
    for (const char* family : families) {
      for (int rank = 0; rank < 8; ++rank) {
        for (int size = 0; size < 10; ++size) {
          LabelPairs labels = RankSeriesLabels(a * 8 + rank);
          labels.back().second = std::to_string(1 << size) + "MB";
          points[a].push_back({family, std::move(labels), 20.0, 0});
        }
      }
    }
  }
  std::atomic<bool> failed{false};
  uint64_t seq = 0;
  int64_t t = 1'700'000'000'000;
  int64_t acks = 0;
  for (auto _ : state) {
    std::vector<std::thread> threads;
    for (int a = 0; a < agents; ++a) {
      threads.emplace_back([&, a, first_seq = seq, first_t = t] {
        for (int b = 0; b < kBatchesPerAgent; ++b) {
          batches[a].set_batch_seq(first_seq + b + 1);
          const int64_t when = first_t + (b + 1) * 1'000;
          for (SeriesPoint& p : points[a]) p.time_ms = when;
          auto is_new = (*store)->PutBatchIfNew(batches[a], when * 1'000'000 + a);
          if (!is_new.ok() || !*is_new || !(*store)->AppendPoints(points[a]).ok()) failed = true;
        }
      });
    }
    for (auto& th : threads) th.join();
    seq += kBatchesPerAgent;
    t += kBatchesPerAgent * 1'000;
    acks += static_cast<int64_t>(agents) * kBatchesPerAgent;
  }
  if (failed) return state.SkipWithError("a write failed");
  state.counters["acks_per_s"] =
      benchmark::Counter(static_cast<double>(acks), benchmark::Counter::kIsRate);
  state.counters["points_per_s"] =
      benchmark::Counter(static_cast<double>(acks * static_cast<int64_t>(points[0].size())),
                         benchmark::Counter::kIsRate);
}
void BM_SyncedIngest(benchmark::State& state) { Ingest(state, true); }
void BM_UnsyncedIngest(benchmark::State& state) { Ingest(state, false); }
BENCHMARK(BM_SyncedIngest)
    ->ArgName("agents")
    ->Arg(1)
    ->Arg(8)
    ->Arg(32)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_UnsyncedIngest)
    ->ArgName("agents")
    ->Arg(1)
    ->Arg(8)
    ->Arg(32)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// GET `path` of the aggregator's HTTP routes over `analyzer`, once per iteration; counts the
// answer's lines and MiB.
void FederateLoop(benchmark::State& state, const aggregator::Analyzer& analyzer,
                  const std::string& path) {
  MetricRegistry metrics;
  HttpServer http;
  TempDir dir;  // /federate reads no stored point, but the query engine is built over a store
  auto store = Store::Open(dir.path());
  if (!store.ok()) return state.SkipWithError("cannot open the store");
  aggregator::QueryEngine query(**store, analyzer);
  aggregator::InstallHttpRoutes(http, metrics, query);
  auto port = http.Start("127.0.0.1", 0);
  if (!port.ok()) return state.SkipWithError("cannot start the HTTP server");
  httplib::Client client("127.0.0.1", *port);
  size_t lines = 0;
  size_t bytes = 0;
  for (auto _ : state) {
    auto res = client.Get(path);
    if (!res || res->status != 200) return state.SkipWithError("GET /federate failed");
    bytes = res->body.size();
    lines = static_cast<size_t>(std::count(res->body.begin(), res->body.end(), '\n'));
  }
  http.Stop();
  state.counters["series"] = static_cast<double>(lines);  // one line per series, plus # TYPE lines
  state.counters["MiB"] = static_cast<double>(bytes) / (1 << 20);
}

void BM_Federate100k(benchmark::State& state) {
  aggregator::Analyzer analyzer;
  for (int comm = 0; comm < 5; ++comm) {
    for (int rank = 0; rank < 1024; ++rank) analyzer.Ingest(StatsReport(comm, rank), 1);
  }
  FederateLoop(state, analyzer, "/federate?match%5B%5D=%7Bjob_id%3D%22bench%22%7D");
}
BENCHMARK(BM_Federate100k)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_FederateDetection16k(benchmark::State& state) {
  aggregator::Analyzer analyzer;
  simjob::JobModelConfig m;
  m.tp = 8;
  m.pp = 8;
  m.dp = 256;
  m.gpus_per_node = 8;
  m.program.microbatches = 4;
  m.program.layers = 1;
  m.program.layer_fwd_ns = 40'000'000;
  m.program.optimizer_ns = 2 * m.program.layer_fwd_ns;
  const int64_t t0 = 1'800'000'000'000'000'000;
  m.t0_ns = t0;
  m.end_ns = t0 + 10'000'000'000;
  loadgen::JobReports job(m, {});
  std::vector<ncclwatch::v1::RankReport> reports;
  for (int second = 1; second <= 3; ++second) {
    const int64_t end_ns = t0 + second * 1'000'000'000LL;
    for (int node = 0; node < job.nodes(); ++node) {
      reports.clear();
      job.NodeReports(node, end_ns, &reports);
      for (const auto& r : reports) {
        analyzer.Ingest(r, end_ns, "agent:" + loadgen::JobReports::NodeName(node));
      }
    }
    analyzer.Tick(end_ns);
  }
  // The families scripts/bench-scale federates (every detection family).
  FederateLoop(state, analyzer,
               "/federate?match%5B%5D=%7B__name__%3D~%22ncclwatch_(straggler%7C"
               "rank_lateness_seconds%7Chang%7Chang_age_seconds%7Crank_missing%7Ccomm_degraded%7C"
               "node_network_suspect%7Cnode_straggler%7Crank_silent)%22%7D");
}
BENCHMARK(BM_FederateDetection16k)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace ncclwatch::bench

BENCHMARK_MAIN();

// Correlation + detection throughput of the aggregator's Analyzer (plain structs, no network), and
// its memory at 4,096 ranks.
//
// BM_Ingest/<nranks>: every rank of one communicator sends one report per interval holding 256
// sampled collectives (the plugin's default cap), with Inspector statistics and an in-flight
// list; the Analyzer correlates the samples into groups, runs the straggler, hang and degraded
// detectors and the own-time (root-cause) analysis and updates the series. The rate counter is
// sampled collective records per second.
//
// Before the benchmarks, the program prints the resident memory the Analyzer holds for a
// 4,096-rank job after 8 intervals (steady state: windows full, series populated): once as one
// communicator, once as a 3D-parallel job (8 GPUs per node, TP 8 in a node, PP 8, DP the rest:
// every rank in a TP, a PP, a DP communicator and the world, each reporting its own collectives).
//
// Usage: detect_bench [--memory-ranks=N] [Google Benchmark flags]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "aggregator/analysis/analyzer.h"
#include "aggregator/analysis/answers.h"
#include "benchmark/benchmark.h"
#include "common/op_math.h"
#include "proto/samples.h"
#include "proto/testing/report_builder.h"

namespace ncclwatch::bench {
namespace {

using aggregator::Analyzer;

constexpr int kSamplesPerReport = 256;

// Rank `rank`'s report of interval `interval`: 256 AllReduces (seq numbers of the interval), rank
// 3 arriving 2 ms late, plus statistics and one operation in flight.
ncclwatch::v1::RankReport MakeReport(int rank, int nranks, int interval) {
  ncclwatch::v1::RankReport r = testing::ReportFrom({.job_id = "bench-job",
                                                     .host = "host-" + std::to_string(rank / 8),
                                                     .pid = static_cast<uint32_t>(1000 + rank),
                                                     .cuda_device = rank % 8,
                                                     .comm_hash = 0xbe7c4,
                                                     .comm_name = "world",
                                                     .rank = rank,
                                                     .nranks = nranks,
                                                     .n_nodes = std::max(1, nranks / 8),
                                                     .node = "node-" + std::to_string(rank / 8)});
  auto* st = r.add_stats();
  st->set_op("AllReduce");
  st->set_algo_proto("RING_SIMPLE");
  st->set_message_size("32-33MB");
  st->set_peer(-1);
  st->set_count(kSamplesPerReport);
  st->set_exec_time_us_sum(kSamplesPerReport * 900.0);
  st->set_bus_bw_gbs_log_sum(kSamplesPerReport * std::log(20.0));
  st->set_bw_samples(kSamplesPerReport);
  auto* f = r.add_in_flight();
  f->set_op("AllReduce");
  f->set_seq(static_cast<uint64_t>(interval + 1) * kSamplesPerReport);
  f->set_age_ns(100'000);
  r.set_in_flight_count(1);
  SampleColumnWriter writer(&r);
  for (int i = 0; i < kSamplesPerReport; ++i) {
    uint64_t seq = static_cast<uint64_t>(interval) * kSamplesPerReport + i;
    uint64_t start = seq * 1'000'000 + (rank == 3 ? 2'000'000 : (rank % 7) * 20'000);
    // The own time before it (which the root-cause analysis compares): rank 3 is slow itself.
    const int64_t own = 3'000'000 + (rank == 3 ? 2'000'000 : (rank % 7) * 20'000);
    writer.Add("AllReduce", "RING_SIMPLE", 1 << 25, 8,
               Sample{seq, start, seq * 1'000'000 + 5'000'000 - start, own});
  }
  r.set_sample_stride(1);
  return r;
}

void BM_Ingest(benchmark::State& state) {
  const int nranks = static_cast<int>(state.range(0));
  // Reports are built outside the timed region, 4 intervals' worth, and replayed with shifted
  // intervals by rebuilding every 4 (rebuilding is paused).
  Analyzer analyzer;
  int interval = 0;
  int64_t records = 0;
  std::vector<ncclwatch::v1::RankReport> reports;
  for (auto _ : state) {
    state.PauseTiming();
    reports.clear();
    for (int r = 0; r < nranks; ++r) reports.push_back(MakeReport(r, nranks, interval));
    ++interval;
    state.ResumeTiming();
    for (const auto& report : reports) {
      benchmark::DoNotOptimize(analyzer.Ingest(report, interval * 1'000'000'000ll));
    }
    records += static_cast<int64_t>(nranks) * kSamplesPerReport;
  }
  state.counters["records_per_s"] =
      benchmark::Counter(static_cast<double>(records), benchmark::Counter::kIsRate);
  state.counters["groups_completed"] = static_cast<double>(analyzer.counters().groups_completed);
}
BENCHMARK(BM_Ingest)->Arg(8)->Arg(64)->Arg(512)->Unit(benchmark::kMillisecond);

long ResidentKiB() {
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

void PrintMemory(int nranks) {
  const long before = ResidentKiB();
  auto analyzer = std::make_unique<Analyzer>();
  for (int interval = 0; interval < 8; ++interval) {
    for (int r = 0; r < nranks; ++r) {
      analyzer->Ingest(MakeReport(r, nranks, interval), (interval + 1) * 1'000'000'000ll);
    }
  }
  const long after = ResidentKiB();
  const auto c = analyzer->counters();
  std::printf(
      "aggregator memory at %d ranks (one communicator, 8 intervals of %d samples per rank): "
      "%.1f MiB resident growth, %llu groups completed, %llu open\n",
      nranks, kSamplesPerReport, (after - before) / 1024.0,
      static_cast<unsigned long long>(c.groups_completed),
      static_cast<unsigned long long>(c.open_groups));
  std::fflush(stdout);
}

// One report of rank `rank` (world rank `world`) of a communicator of the 3D job: `count` samples
// of `op` at `bytes` per interval (none for a pipeline communicator, whose Send/Recv the
// correlator does not join), its statistics and one operation in flight.
ncclwatch::v1::RankReport Make3DReport(const std::string& name, uint64_t hash, int rank, int nranks,
                                       int n_nodes, int world, const char* op, uint64_t bytes,
                                       int count, int interval) {
  ncclwatch::v1::RankReport r = testing::ReportFrom({.job_id = "bench-3d",
                                                     .host = "host-" + std::to_string(world / 8),
                                                     .pid = static_cast<uint32_t>(1000 + world),
                                                     .cuda_device = world % 8,
                                                     .comm_hash = hash,
                                                     .comm_name = name,
                                                     .rank = rank,
                                                     .nranks = nranks,
                                                     .n_nodes = n_nodes,
                                                     .node = "node-" + std::to_string(world / 8)});
  auto* st = r.add_stats();
  st->set_op(count > 0 ? op : "Send");
  st->set_algo_proto("RING_SIMPLE");
  st->set_message_size(MessageSizeBucket(bytes));
  st->set_peer(count > 0 ? -1 : (rank + 1) % nranks);
  st->set_count(std::max(count, 64));
  st->set_exec_time_us_sum(std::max(count, 64) * 900.0);
  st->set_bus_bw_gbs_log_sum(std::max(count, 64) * std::log(20.0));
  st->set_bw_samples(std::max(count, 64));
  SampleColumnWriter writer(&r);
  for (int i = 0; i < count; ++i) {
    const uint64_t seq = static_cast<uint64_t>(interval) * count + i;
    const int64_t own = 3'000'000 + (world == 3 ? 2'000'000 : (world % 7) * 20'000);
    const uint64_t start = seq * 1'000'000 + (world == 3 ? 2'000'000 : (world % 7) * 20'000);
    writer.Add(op, "RING_SIMPLE", bytes, 8,
               Sample{seq, start, seq * 1'000'000 + 5'000'000 - start, own});
  }
  r.set_sample_stride(1);
  return r;
}

void Print3DMemory(int nranks) {
  constexpr int kTp = 8, kPp = 8;
  const int dp = nranks / (kTp * kPp);
  if (dp < 1 || nranks % (kTp * kPp) != 0) return;
  const long before = ResidentKiB();
  auto analyzer = std::make_unique<Analyzer>();
  // World rank w: TP position w % 8 (one node), stage (w / 8) % 8, replica w / 64.
  for (int interval = 0; interval < 8; ++interval) {
    const int64_t now = (interval + 1) * 1'000'000'000ll;
    for (int w = 0; w < nranks; ++w) {
      const int tp = w % kTp, stage = (w / kTp) % kPp, replica = w / (kTp * kPp);
      analyzer->Ingest(Make3DReport("tp" + std::to_string(w / kTp), 0x100000 + w / kTp, tp, kTp, 1,
                                    w, "AllReduce", 4 << 20, 64, interval),
                       now);
      analyzer->Ingest(
          Make3DReport("pp" + std::to_string(replica * kTp + tp), 0x200000 + replica * kTp + tp,
                       stage, kPp, kPp, w, "Send", 8 << 20, 0, interval),
          now);
      const int dp_comm = stage * kTp + tp;
      analyzer->Ingest(Make3DReport("dp" + std::to_string(dp_comm), 0x300000 + dp_comm, replica, dp,
                                    dp, w, "ReduceScatter", 64 << 20, 8, interval),
                       now);
      analyzer->Ingest(
          Make3DReport("world", 0x400000, w, nranks, nranks / 8, w, "AllReduce", 4, 1, interval),
          now);
    }
  }
  const long after = ResidentKiB();
  const auto c = analyzer->counters();
  std::printf(
      "aggregator memory at %d ranks as a 3D job (TP %d x PP %d x DP %d: %d communicators, 8 "
      "intervals): %.1f MiB resident growth, %llu groups completed, %zu root cause(s)\n",
      nranks, kTp, kPp, dp, nranks / kTp + nranks / kPp + kTp * kPp + 1, (after - before) / 1024.0,
      static_cast<unsigned long long>(c.groups_completed),
      analyzer->answers().SlowProcesses("bench-3d").size());
  std::fflush(stdout);
}

}  // namespace
}  // namespace ncclwatch::bench

int main(int argc, char** argv) {
  int memory_ranks = 4096;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: detect_bench [--memory-ranks=N] [Google Benchmark flags]\n"
          "Measures the aggregator's correlation + detection throughput (sampled collective\n"
          "records per second) and prints its memory for an N-rank job (default 4096; 0 skips).\n");
    }
    if (a.rfind("--memory-ranks=", 0) == 0) {
      memory_ranks = std::atoi(a.c_str() + 15);
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (memory_ranks > 0) {
    // The 3D job in a child process: freed memory of the first measurement would otherwise be
    // reused by the second and hide its growth.
    const pid_t child = fork();
    if (child == 0) {
      ncclwatch::bench::Print3DMemory(memory_ranks);
      _exit(0);
    }
    if (child > 0) waitpid(child, nullptr, 0);
    ncclwatch::bench::PrintMemory(memory_ranks);
  }
  int bench_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&bench_argc, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

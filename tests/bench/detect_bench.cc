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
// 4,096-rank job after 8 intervals (steady state: windows full, series populated).
//
// Usage: detect_bench [--memory-ranks=N] [Google Benchmark flags]
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "aggregator/analysis/analyzer.h"
#include "benchmark/benchmark.h"
#include "proto/samples.h"

namespace ncclwatch::bench {
namespace {

using aggregator::Analyzer;

constexpr int kSamplesPerReport = 256;

// Rank `rank`'s report of interval `interval`: 256 AllReduces (seq numbers of the interval), rank
// 3 arriving 2 ms late, plus statistics and one operation in flight.
ncclwatch::v1::RankReport MakeReport(int rank, int nranks, int interval) {
  ncclwatch::v1::RankReport r;
  auto* id = r.mutable_identity();
  id->set_job_id("bench-job");
  id->set_comm_hash(0xbe7c4);
  id->set_comm_name("world");
  id->set_rank(rank);
  id->set_nranks(nranks);
  id->set_n_nodes(std::max(1, nranks / 8));
  id->set_node("node-" + std::to_string(rank / 8));
  id->set_host("host-" + std::to_string(rank / 8));
  id->set_pid(1000 + rank);
  id->set_cuda_device(rank % 8);
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
  if (memory_ranks > 0) ncclwatch::bench::PrintMemory(memory_ranks);
  int bench_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&bench_argc, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// Throughput and memory of one real node agent (the ncclwatch-agent binary).
//
// N client threads stand in for N training processes: each opens the agent's StreamReports
// stream on its unix socket, as the plugin does, and writes reports as fast as the stream accepts
// them (each with 4 Inspector statistics and 64 sampled collectives, about 1 KiB). The agent
// validates, batches and forwards them to a stand-in aggregator in this process that acknowledges
// every batch and counts the reports. Printed: reports per second that reached the aggregator
// during the measured window, and the agent's resident memory (VmRSS) at the end.
//
// With --rate=R each rank writes R reports per second instead (a realistic load, for the memory
// figure). The agent's CPU use over the window is printed too: the clients share the 2 cores.
//
// Usage: agent_bench [--ranks=64] [--seconds=5] [--rate=0] [--spool]
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "ncclwatch/v1/ingest.grpc.pb.h"
#include "ncclwatch/v1/report.grpc.pb.h"
#include "proto/samples.h"
#include "proto/testing/report_builder.h"
#include "tests/e2e/process.h"

namespace ncclwatch::bench {
namespace {

// Acknowledges every batch and counts its reports. It decodes a batch only down to its reports'
// bytes (NodeBatchBytes): the stand-in must leave the shared cores to the agent.
class CountingAggregator final
    : public ncclwatch::v1::Ingest::WithRawCallbackMethod_Push<ncclwatch::v1::Ingest::Service> {
 public:
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override {
    ncclwatch::v1::NodeBatchBytes batch;
    grpc::ByteBuffer copy(*request);
    grpc::Status status =
        grpc::SerializationTraits<ncclwatch::v1::NodeBatchBytes>::Deserialize(&copy, &batch);
    if (status.ok()) {
      reports.fetch_add(static_cast<uint64_t>(batch.reports_size()), std::memory_order_relaxed);
      ncclwatch::v1::BatchAck ack;
      ack.set_batch_seq(batch.batch_seq());
      bool own = false;
      status = grpc::SerializationTraits<ncclwatch::v1::BatchAck>::Serialize(ack, response, &own);
    }
    auto* reactor = context->DefaultReactor();
    reactor->Finish(status);
    return reactor;
  }
  std::atomic<uint64_t> reports{0};
};

ncclwatch::v1::RankReport MakeReport(int rank, int nranks) {
  ncclwatch::v1::RankReport r = testing::ReportFrom({.job_id = "bench-job",
                                                     .cuda_device = rank % 8,
                                                     .comm_hash = 0xbe7c4,
                                                     .comm_name = "world",
                                                     .rank = rank,
                                                     .nranks = nranks,
                                                     .n_nodes = 1});
  r.set_interval_start_unix_ns(1'700'000'000'000'000'000);
  r.set_interval_end_unix_ns(1'700'000'001'000'000'000);
  for (const char* op : {"AllReduce", "AllGather", "ReduceScatter", "Broadcast"}) {
    auto* st = r.add_stats();
    st->set_op(op);
    st->set_algo_proto("RING_SIMPLE");
    st->set_message_size("32-33MB");
    st->set_peer(-1);
    st->set_count(100);
    st->set_bytes(100ull << 25);
    st->set_exec_time_us_sum(100 * 900.0);
    st->set_exec_time_us_min(800);
    st->set_exec_time_us_max(1000);
  }
  SampleColumnWriter writer(&r);
  for (uint64_t seq = 0; seq < 64; ++seq) {
    writer.Add("AllReduce", "RING_SIMPLE", 1 << 25, 8,
               Sample{seq, 1'700'000'000'000'000'000 + seq * 1'000'000, 900'000});
  }
  r.set_sample_stride(1);
  return r;
}

// User + system CPU seconds the process has used so far.
double CpuSeconds(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');  // the command name may contain spaces
  if (close == std::string::npos) return -1;
  std::istringstream fields(text.substr(close + 2));
  std::string f;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::stoull(f);
    if (i == 15) stime = std::stoull(f);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

int64_t ResidentKiB(int pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

int Main(int argc, char** argv) {
  int ranks = 64;
  double seconds = 5;
  bool spool = false;
  double rate = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--ranks=", 8) == 0) {
      ranks = std::atoi(argv[i] + 8);
    } else if (std::strncmp(argv[i], "--seconds=", 10) == 0) {
      seconds = std::atof(argv[i] + 10);
    } else if (std::strncmp(argv[i], "--rate=", 7) == 0) {
      rate = std::atof(argv[i] + 7);
    } else if (std::strcmp(argv[i], "--spool") == 0) {
      spool = true;
    } else {
      std::fprintf(stderr, "usage: agent_bench [--ranks=64] [--seconds=5] [--rate=0] [--spool]\n");
      return std::strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  if (ranks < 1 || ranks > 4096 || !(seconds > 0)) {
    std::fprintf(stderr, "agent_bench: --ranks must be 1..4096 and --seconds positive\n");
    return 2;
  }
  char tmpl[] = "/tmp/ncclwatch-agent-bench-XXXXXX";
  const std::string dir = mkdtemp(tmpl);

  CountingAggregator aggregator;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&aggregator);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "agent_bench: cannot start the stand-in aggregator\n");
    return 1;
  }
  const std::string socket = "unix://" + dir + "/agent.sock";
  std::vector<std::string> args = {NCCLWATCH_AGENT_BIN, "--listen=" + socket,
                                   "--aggregator=127.0.0.1:" + std::to_string(port),
                                   "--http-port=0", "--node-name=bench-node"};
  if (spool) args.push_back("--spool-dir=" + dir + "/spool");
  testing::Process agent(args, {}, dir + "/agent.log", "--ready-fd");
  if (agent.ReadyValue("http_port") <= 0) {
    std::fprintf(stderr, "agent_bench: the agent did not start:\n%s\n", agent.Log().c_str());
    return 1;
  }

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> written{0};
  std::vector<std::thread> clients;
  for (int r = 0; r < ranks; ++r) {
    clients.emplace_back([&, r] {
      auto stub = ncclwatch::v1::Agent::NewStub(
          grpc::CreateChannel(socket, grpc::InsecureChannelCredentials()));
      grpc::ClientContext ctx;
      ncclwatch::v1::StreamSummary summary;
      auto writer = stub->StreamReports(&ctx, &summary);
      ncclwatch::v1::RankReport report = MakeReport(r, ranks);
      uint64_t n = 0;
      const auto t0 = std::chrono::steady_clock::now();
      while (!stop.load(std::memory_order_relaxed)) {
        if (rate > 0) {  // paced: report n goes out at t0 + n / rate
          std::this_thread::sleep_until(t0 + std::chrono::duration<double>(n / rate));
        }
        report.set_report_id((static_cast<uint64_t>(r + 1) << 32) | ++n);
        if (!writer->Write(report)) break;
        written.fetch_add(1, std::memory_order_relaxed);
      }
      writer->WritesDone();
      writer->Finish();
    });
  }
  // Warm up for a second, then measure what reaches the aggregator.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const uint64_t before = aggregator.reports.load();
  const double cpu_before = CpuSeconds(agent.pid());
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const uint64_t after = aggregator.reports.load();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double agent_cores = (CpuSeconds(agent.pid()) - cpu_before) / elapsed;
  const int64_t rss_kib = ResidentKiB(agent.pid());
  stop = true;
  for (auto& c : clients) c.join();
  agent.Signal(SIGTERM);
  agent.Wait();
  server->Shutdown();
  std::filesystem::remove_all(dir);

  const double per_s = (after - before) / elapsed;
  std::printf("%-6s %-10s %-6s %20s %12s %22s %16s\n", "ranks", "load", "spool",
              "reports/s forwarded", "agent cores", "reports/s per core", "agent RSS (MiB)");
  std::printf("%-6d %-10s %-6s %20.0f %12.2f %22.0f %16.1f\n", ranks,
              rate > 0 ? (std::to_string(static_cast<int>(rate)) + "/s/rank").c_str() : "max",
              spool ? "yes" : "no", per_s, agent_cores, agent_cores > 0 ? per_s / agent_cores : 0.0,
              rss_kib / 1024.0);
  return 0;
}

}  // namespace
}  // namespace ncclwatch::bench

int main(int argc, char** argv) { return ncclwatch::bench::Main(argc, argv); }

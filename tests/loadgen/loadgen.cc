// ncclwatch-loadgen: stands in for the node agents of one or more large Megatron-style jobs and
// pushes their NodeBatches to an aggregator through the real Ingest gRPC, exactly as agents do
// (bearer token, one batch per node and interval, batch_seq from 1, retried until acknowledged
// under the same sequence number). The reports come from simjob's closed-loop job model
// (job_reports.h), so the aggregator correlates and judges them for real; a slow GPU or a hung
// rank can be injected at a chosen time, and the loadgen watches the Query API for the finding.
//
// It prints one line per second (progress) and, at the end, a summary with the figures the scale
// benchmark (scripts/bench --scale) puts in its table: wire bytes per rank-second, ack latency
// percentiles, the largest send backlog, how late the generator ran behind its schedule, the
// detection latency and every finding the aggregator started (anything but the injected fault is
// a false page), and the Query API's latency at that size.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/config.h"
#include "common/rpc/backoff.h"
#include "common/rpc/channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "ncclwatch/v1/ingest.grpc.pb.h"
#include "ncclwatch/v1/query.grpc.pb.h"
#include "tests/loadgen/job_reports.h"
#include "tests/simjob/job_common.h"

namespace ncclwatch::loadgen {
namespace {

struct Config {
  std::string aggregator = "127.0.0.1:9470";
  std::string token_file;
  std::string query_token_file;
  int64_t jobs = 1;
  int64_t tp = 8, pp = 8, dp = 16;
  int64_t gpus_per_node = 8;
  int64_t microbatches = 4;
  double layer_ms = 40;
  int64_t stride = 8;
  double interval_s = 1;
  double seconds = 60;
  double warmup_s = 20;
  double steady_start_s = 0;
  double steady_end_s = 0;
  int64_t senders = 256;
  std::string job_prefix = "loadgen";
  int64_t slow_rank = -1;
  double slow_factor = 1.5;
  double slow_at_s = 30;
  int64_t hang_rank = -1;
  double hang_at_s = 30;
  double query_every_s = 2;
  std::string summary_file;
  int64_t seed = 1;
  bool prebuild = false;
  double prebuild_margin_s = 0;
};

std::string ReadToken(const std::string& file) {
  if (file.empty()) return "";
  std::ifstream in(file);
  std::string token;
  std::getline(in, token);
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' '))
    token.pop_back();
  return token;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

// Sends node batches with a pool of threads; each node's batches go out in order, one at a time,
// retried (same batch_seq) until acknowledged, as an agent's forwarder does.
class Sender {
 public:
  Sender(std::shared_ptr<grpc::Channel> channel, std::string token, int threads)
      : stub_(std::move(channel)), token_(std::move(token)) {
    queues_.resize(threads);
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this, i] { Run(i); });
  }
  ~Sender() { Stop(); }

  // A batch as the agents send it: every report already encoded (NodeBatchBytes).
  void Enqueue(int node, std::unique_ptr<ncclwatch::v1::NodeBatchBytes> batch) {
    Queue& q = queues_[node % queues_.size()];
    {
      std::lock_guard<std::mutex> lock(q.mu);
      q.items.push_back(std::move(batch));
    }
    backlog_.fetch_add(1);
    q.cv.notify_one();
  }
  void Stop() {
    for (Queue& q : queues_) {
      std::lock_guard<std::mutex> lock(q.mu);
      q.stop = true;
      q.cv.notify_all();
    }
    for (auto& w : workers_) {
      if (w.joinable()) w.join();
    }
  }
  // Waits until every queued batch is acknowledged (or `deadline` passes).
  bool Drain(std::chrono::steady_clock::time_point deadline) {
    while (backlog_.load() > 0) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }
  int64_t backlog() const { return backlog_.load(); }
  int64_t wire_bytes() const { return wire_bytes_.load(); }
  int64_t acked() const { return acked_.load(); }
  // Batches given up on: refused for good, or still unacknowledged at Stop().
  int64_t lost() const { return lost_.load(); }
  int64_t retries() const { return retries_.load(); }
  int64_t rejected_reports() const { return rejected_.load(); }
  // Ack latencies (s) since the last call.
  std::vector<double> TakeLatencies() {
    std::lock_guard<std::mutex> lock(lat_mu_);
    std::vector<double> out;
    out.swap(latencies_);
    return out;
  }

 private:
  struct Queue {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::unique_ptr<ncclwatch::v1::NodeBatchBytes>> items;
    bool stop = false;
  };

  void Run(int i) {
    Queue& q = queues_[i];
    Backoff backoff(std::chrono::milliseconds(100), kPushRetryMaxDelay, static_cast<uint32_t>(i));
    for (;;) {
      std::unique_ptr<ncclwatch::v1::NodeBatchBytes> batch;
      {
        std::unique_lock<std::mutex> lock(q.mu);
        q.cv.wait(lock, [&] { return q.stop || !q.items.empty(); });
        if (q.items.empty()) return;
        batch = std::move(q.items.front());
        q.items.pop_front();
      }
      const auto start = std::chrono::steady_clock::now();
      const int64_t bytes = static_cast<int64_t>(batch->ByteSizeLong());
      bool acked = false;
      for (;;) {
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        if (!token_.empty()) context.AddMetadata("authorization", "Bearer " + token_);
        batch->set_sent_unix_ns(static_cast<uint64_t>(simjob::NowNs()));
        ncclwatch::v1::BatchAck ack;
        wire_bytes_.fetch_add(bytes);
        grpc::Status s;
        std::promise<void> done;
        stub_.UnaryCall(&context, "/ncclwatch.v1.Ingest/Push", grpc::StubOptions(), batch.get(),
                        &ack, [&](grpc::Status status) {
                          s = std::move(status);
                          done.set_value();
                        });
        done.get_future().wait();
        if (s.ok()) {
          backoff.Reset();
          rejected_.fetch_add(ack.rejected_reports());
          acked = true;
          break;
        }
        if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
            s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
            s.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
          std::fprintf(stderr, "loadgen: batch %llu of %s refused for good: %s\n",
                       static_cast<unsigned long long>(batch->batch_seq()),
                       batch->agent_id().c_str(), s.error_message().c_str());
          break;
        }
        retries_.fetch_add(1);
        std::this_thread::sleep_for(backoff.NextDelay());
        std::lock_guard<std::mutex> lock(q.mu);
        if (q.stop) break;
      }
      if (acked) {
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::lock_guard<std::mutex> lock(lat_mu_);
        latencies_.push_back(seconds);
        acked_.fetch_add(1);
      } else {
        lost_.fetch_add(1);
      }
      backlog_.fetch_sub(1);
    }
  }

  grpc::TemplatedGenericStub<ncclwatch::v1::NodeBatchBytes, ncclwatch::v1::BatchAck> stub_;
  const std::string token_;
  std::deque<Queue> queues_;
  std::vector<std::thread> workers_;
  std::atomic<int64_t> backlog_{0}, wire_bytes_{0}, acked_{0}, retries_{0}, rejected_{0}, lost_{0};
  std::mutex lat_mu_;
  std::vector<double> latencies_;
};

// The job an event is about (each kind carries it in its own part).
struct QueryTimes {
  std::vector<double> stragglers_s, comms_s;
};

int Main(int argc, char** argv) {
  Config c;
  ConfigTable t("ncclwatch-loadgen",
                "Stands in for the node agents of large simulated Megatron-style jobs (TP x PP x "
                "DP ranks each) and pushes their batches to an aggregator through the real "
                "Ingest gRPC; injects a slow GPU or a hang and times its finding.");
  t.AddString("aggregator", "", &c.aggregator, "The aggregator's gRPC address, HOST:PORT.");
  t.AddString("token-file", "", &c.token_file, "File with the ingest bearer token (optional).");
  t.AddString("query-token-file", "", &c.query_token_file,
              "File with the query bearer token (optional; default: the ingest token's file).");
  t.AddInt("jobs", "", &c.jobs, "Jobs to run side by side, each TP x PP x DP ranks.");
  t.AddInt("tp", "", &c.tp, "Tensor-parallel size (inside a node).");
  t.AddInt("pp", "", &c.pp, "Pipeline stages.");
  t.AddInt("dp", "", &c.dp, "Data-parallel replicas.");
  t.AddInt("gpus-per-node", "", &c.gpus_per_node, "GPUs (ranks) per node: one batch per node.");
  t.AddInt("microbatches", "", &c.microbatches, "Microbatches per iteration (1F1B).");
  t.AddDouble("layer-ms", "", &c.layer_ms,
              "Forward compute of one layer and microbatch, ms (sets the step time).");
  t.AddInt("stride", "", &c.stride,
           "Real operations per modelled one (the plugin's sample stride): reported seqNumbers "
           "and operation counts are multiplied by it.");
  t.AddDouble("interval-s", "", &c.interval_s, "Flush interval of the simulated plugins, s.");
  t.AddDouble("seconds", "", &c.seconds, "How long to run, s.");
  t.AddDouble("warmup-s", "", &c.warmup_s,
              "Findings before this (job warm-up) are listed but not counted as false pages.");
  t.AddDouble("steady-start-s", "", &c.steady_start_s,
              "The steady window starts this many seconds after the start (after the job's "
              "warm-up): ack percentiles and the largest backlog are also reported for it "
              "(ack_p50_steady_s, ack_p99_steady_s, max_backlog_steady_batches).");
  t.AddDouble("steady-end-s", "", &c.steady_end_s,
              "...and it ends this many seconds after the start, e.g. before a benchmark's own "
              "probes load the aggregator (0: at the end of the run).");
  t.AddInt("senders", "", &c.senders,
           "Threads pushing batches, each one push in flight at a time (each node's batches in "
           "order). Every agent has a push in flight of its own: with fewer senders than nodes, "
           "the rate is capped at senders / ack latency (16 senders at 8 ms: 2,000 batches/s).");
  t.AddString("job-prefix", "", &c.job_prefix, "Job ids are <prefix>-<i>.");
  t.AddInt("slow-rank", "", &c.slow_rank, "A rank of job 0 whose GPU turns slow (-1: none).");
  t.AddDouble("slow-factor", "", &c.slow_factor, "Its compute takes this many times as long.");
  t.AddDouble("slow-at-s", "", &c.slow_at_s, "When it turns slow, s after the start.");
  t.AddInt("hang-rank", "", &c.hang_rank, "A rank of job 0 that stops calling NCCL (-1: none).");
  t.AddDouble("hang-at-s", "", &c.hang_at_s, "When it stops, s after the start.");
  t.AddDouble("query-every-s", "", &c.query_every_s,
              "How often ListStragglers and ListComms are timed while the job runs (the "
              "finding itself is awaited on a Watch stream).");
  t.AddString("summary-file", "", &c.summary_file,
              "Also write the summary as key=value lines to this file.");
  t.AddInt("seed", "", &c.seed, "Seed of the job model's jitter.");
  t.AddBool("prebuild", "", &c.prebuild,
            "Build every interval's batches before sending any (memory: ~2 KB per rank-second), "
            "so that building them does not compete with the aggregator for the machine's "
            "cores; sending then only stamps each batch's sent time. Prints 'loadgen: sending' "
            "when the load starts.");
  t.AddDouble("prebuild-margin-s", "", &c.prebuild_margin_s,
              "With --prebuild, how far ahead the job's clock starts, to leave time for the "
              "build (0: 5 s + 1.6 s per second of load and 16,384 ranks; a 2-vCPU machine "
              "builds one in 0.72-1.3 s, depending on its neighbours).");
  absl::StatusOr<std::vector<std::string>> parsed = t.Parse(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "ncclwatch-loadgen: %s\n", std::string(parsed.status().message()).c_str());
    return 2;
  }
  if (t.help_requested()) {
    std::printf("%s", t.HelpText().c_str());
    return 0;
  }
  if (c.jobs < 1 || c.tp < 1 || c.pp < 1 || c.dp < 1 || c.gpus_per_node < 1 ||
      c.gpus_per_node % c.tp != 0 || c.stride < 1 || c.interval_s < 0.05 || c.senders < 1 ||
      c.seconds <= 0) {
    std::fprintf(stderr,
                 "ncclwatch-loadgen: need jobs, tp, pp, dp, stride, senders >= 1, gpus-per-node "
                 "a multiple of tp, interval-s >= 0.05 and seconds > 0\n");
    return 2;
  }
  if (c.query_token_file.empty()) c.query_token_file = c.token_file;
  const int64_t ranks_per_job = c.tp * c.pp * c.dp;
  const int64_t interval_ns = static_cast<int64_t>(c.interval_s * 1e9);
  const int intervals = static_cast<int>(c.seconds / c.interval_s);
  // With --prebuild the job's clock starts once every batch is built.
  const double margin_s =
      !c.prebuild ? 0
      : c.prebuild_margin_s > 0
          ? c.prebuild_margin_s
          : 5 + 1.6 * c.seconds * static_cast<double>(ranks_per_job * c.jobs) / 16384;
  const int64_t t0 =
      ((simjob::NowNs() + static_cast<int64_t>(margin_s * 1e9)) / interval_ns + 1) * interval_ns;

  std::vector<std::unique_ptr<JobReports>> jobs;
  for (int64_t j = 0; j < c.jobs; ++j) {
    const ScaleJob shape{.tp = static_cast<int>(c.tp),
                         .pp = static_cast<int>(c.pp),
                         .dp = static_cast<int>(c.dp),
                         .gpus_per_node = static_cast<int>(c.gpus_per_node),
                         .microbatches = static_cast<int>(c.microbatches),
                         .layer_ms = c.layer_ms};
    simjob::JobModelConfig m = ScaleJobModel(shape, static_cast<uint64_t>(c.seed + j), t0,
                                             t0 + static_cast<int64_t>((c.seconds + 5) * 1e9));
    if (j == 0 && c.slow_rank >= 0 && c.slow_rank < ranks_per_job) {
      m.slow.push_back({static_cast<int>(c.slow_rank), c.slow_factor,
                        t0 + static_cast<int64_t>(c.slow_at_s * 1e9)});
    }
    if (j == 0 && c.hang_rank >= 0 && c.hang_rank < ranks_per_job) {
      m.hang_rank = static_cast<int>(c.hang_rank);
      m.hang_at_ns = t0 + static_cast<int64_t>(c.hang_at_s * 1e9);
    }
    JobReportsOptions o;
    o.job_id = absl::StrCat(c.job_prefix, "-", j);
    o.stride = static_cast<int>(c.stride);
    jobs.push_back(std::make_unique<JobReports>(m, o));
  }
  const int64_t total_ranks = ranks_per_job * c.jobs;
  std::fprintf(stderr,
               "loadgen: %lld job(s) of %lld ranks (TP %lld x PP %lld x DP %lld, %lld nodes "
               "each), %lld ranks in all, interval %.2f s, stride %lld, for %.0f s -> %s\n",
               static_cast<long long>(c.jobs), static_cast<long long>(ranks_per_job),
               static_cast<long long>(c.tp), static_cast<long long>(c.pp),
               static_cast<long long>(c.dp), static_cast<long long>(jobs[0]->nodes()),
               static_cast<long long>(total_ranks), c.interval_s, static_cast<long long>(c.stride),
               c.seconds, c.aggregator.c_str());

  // The schedule: every interval, every node of every job sends one batch.
  std::vector<uint64_t> batch_seq(static_cast<size_t>(jobs[0]->nodes() * c.jobs), 0);
  std::vector<double> lags, all_latencies, steady_latencies;
  int64_t max_backlog = 0, max_backlog_steady = 0, reports = 0;
  using Batches = std::vector<std::pair<int, std::unique_ptr<ncclwatch::v1::NodeBatchBytes>>>;
  // The batches of the interval ending at `end_ns`, each with its node's slot.
  auto build = [&](int64_t end_ns) {
    Batches out;
    std::vector<ncclwatch::v1::RankReport> node_reports;
    for (size_t j = 0; j < jobs.size(); ++j) {
      JobReports& job = *jobs[j];
      for (int n = 0; n < job.nodes(); ++n) {
        auto batch = std::make_unique<ncclwatch::v1::NodeBatchBytes>();
        node_reports.clear();
        job.NodeReports(n, end_ns, &node_reports);
        const size_t slot = j * job.nodes() + n;
        batch->set_agent_id(absl::StrCat("loadgen-", j, "-", JobReports::NodeName(n)));
        batch->set_batch_seq(++batch_seq[slot]);
        batch->set_node(JobReports::NodeName(n));
        batch->mutable_reports()->Reserve(static_cast<int>(node_reports.size()));
        for (const auto& r : node_reports) r.SerializeToString(batch->add_reports());
        reports += static_cast<int64_t>(node_reports.size());
        out.emplace_back(static_cast<int>(slot), std::move(batch));
      }
    }
    return out;
  };
  std::vector<Batches> prebuilt;
  if (c.prebuild) {
    const int64_t build_start = simjob::NowNs();
    for (int k = 1; k <= intervals; ++k) {
      prebuilt.push_back(build(t0 + k * interval_ns));
      if (k % 10 == 0 || k == intervals) {
        std::fprintf(stderr, "loadgen: built %d of %d intervals in %.1f s\n", k, intervals,
                     static_cast<double>(simjob::NowNs() - build_start) / 1e9);
      }
    }
    if (simjob::NowNs() > t0 + interval_ns / 2) {
      std::fprintf(stderr,
                   "ncclwatch-loadgen: building took %.1f s, past the job's start: raise "
                   "--prebuild-margin-s\n",
                   static_cast<double>(simjob::NowNs() - build_start) / 1e9);
      return 1;
    }
    // Said when the job's clock starts, not when building ends: the benchmark's windows count
    // from this line.
    simjob::SleepUntil(t0);
    std::fprintf(stderr, "loadgen: sending\n");
  }
  auto channel = ReconnectingChannel(c.aggregator, 1000);
  Sender sender(channel, ReadToken(c.token_file), static_cast<int>(c.senders));
  // Its own channel: a large job's ListComms is above gRPC's default 4 MiB (as the CLI allows).
  grpc::ChannelArguments query_args;
  query_args.SetMaxReceiveMessageSize(256 << 20);
  auto query = ncclwatch::v1::Query::NewStub(
      grpc::CreateCustomChannel(c.aggregator, grpc::InsecureChannelCredentials(), query_args));
  const std::string query_token = ReadToken(c.query_token_file);

  // The Query API, asked while the job runs: how long a large job's answers take, and when the
  // injected fault is first named.
  std::atomic<bool> stop_queries{false};
  std::atomic<int64_t> detected_ns{0};
  QueryTimes qt;
  std::mutex qt_mu;
  const int64_t fault_ns =
      c.slow_rank >= 0 ? t0 + static_cast<int64_t>(c.slow_at_s * 1e9)
                       : (c.hang_rank >= 0 ? t0 + static_cast<int64_t>(c.hang_at_s * 1e9) : 0);
  const uint32_t fault_pid =
      static_cast<uint32_t>(100000 + (c.slow_rank >= 0 ? c.slow_rank : c.hang_rank));
  // The finding as on-call would get it first: the Watch stream of detection events.
  grpc::ClientContext watch_ctx;
  if (!query_token.empty()) watch_ctx.AddMetadata("authorization", "Bearer " + query_token);
  std::thread watcher([&] {
    auto stream = query->Watch(&watch_ctx, ncclwatch::v1::WatchRequest());
    ncclwatch::v1::Event e;
    const std::string job0 = absl::StrCat(c.job_prefix, "-0");
    while (stream->Read(&e)) {
      if (e.phase() != ncclwatch::v1::Event::START || detected_ns.load() != 0) continue;
      const bool slow = c.slow_rank >= 0 && e.kind() == ncclwatch::v1::Event::STRAGGLER &&
                        e.root_cause().pid() == fault_pid;
      const bool hang =
          c.hang_rank >= 0 && e.job_id() == job0 &&
          (e.kind() == ncclwatch::v1::Event::HANG || e.kind() == ncclwatch::v1::Event::RANK_SILENT);
      if (slow || hang) detected_ns.store(simjob::NowNs());
    }
  });
  std::thread querier([&] {
    const std::string job0 = absl::StrCat(c.job_prefix, "-0");
    while (!stop_queries.load()) {
      std::this_thread::sleep_for(std::chrono::duration<double>(c.query_every_s));
      auto ask = [&](auto call) {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        if (!query_token.empty()) ctx.AddMetadata("authorization", "Bearer " + query_token);
        const auto start = std::chrono::steady_clock::now();
        const bool ok = call(&ctx);
        return ok ? std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
                  : -1.0;
      };
      ncclwatch::v1::ListStragglersRequest sreq;
      sreq.set_job_id(job0);
      ncclwatch::v1::ListStragglersResponse sresp;
      const double s_s = ask(
          [&](grpc::ClientContext* ctx) { return query->ListStragglers(ctx, sreq, &sresp).ok(); });
      if (s_s >= 0 && simjob::NowNs() > t0) {
        std::lock_guard<std::mutex> lock(qt_mu);
        qt.stragglers_s.push_back(s_s);
      }
      ncclwatch::v1::ListCommsRequest creq;
      creq.set_job_id(job0);
      ncclwatch::v1::ListCommsResponse cresp;
      const double c_s =
          ask([&](grpc::ClientContext* ctx) { return query->ListComms(ctx, creq, &cresp).ok(); });
      if (c_s >= 0 && simjob::NowNs() > t0) {
        std::lock_guard<std::mutex> lock(qt_mu);
        qt.comms_s.push_back(c_s);
      }
    }
  });

  const auto cpu_start = std::clock();
  for (int k = 1; k <= intervals; ++k) {
    const int64_t end_ns = t0 + k * interval_ns;
    simjob::SleepUntil(end_ns);
    // What is still unacknowledged from earlier intervals: a backlog that grows means the
    // aggregator does not keep up.
    const int64_t backlog = sender.backlog();
    max_backlog = std::max(max_backlog, backlog);
    const double at_s = static_cast<double>(k) * c.interval_s;
    const bool steady = at_s > c.steady_start_s && (c.steady_end_s <= 0 || at_s <= c.steady_end_s);
    if (steady) max_backlog_steady = std::max(max_backlog_steady, backlog);
    Batches batches = c.prebuild ? std::move(prebuilt[k - 1]) : build(end_ns);
    for (auto& [slot, batch] : batches) sender.Enqueue(slot, std::move(batch));
    const double lag = static_cast<double>(simjob::NowNs() - end_ns) / 1e9;
    lags.push_back(lag);
    std::vector<double> lat = sender.TakeLatencies();
    all_latencies.insert(all_latencies.end(), lat.begin(), lat.end());
    // Acknowledged during the interval before this one's end: inside the window if it is.
    if (steady && at_s - c.interval_s >= c.steady_start_s) {
      steady_latencies.insert(steady_latencies.end(), lat.begin(), lat.end());
    }
    std::fprintf(stderr,
                 "loadgen: t=%5.1f s  built in %.3f s  backlog %lld batches  acked %lld  ack p50 "
                 "%.3f s p99 %.3f s  %.1f MB sent\n",
                 k * c.interval_s, lag, static_cast<long long>(sender.backlog()),
                 static_cast<long long>(sender.acked()), Percentile(lat, 0.5),
                 Percentile(lat, 0.99), static_cast<double>(sender.wire_bytes()) / 1e6);
  }
  const double gen_cpu_s = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  const bool drained = sender.Drain(std::chrono::steady_clock::now() + std::chrono::seconds(60));
  stop_queries.store(true);
  querier.join();
  watch_ctx.TryCancel();
  watcher.join();
  std::vector<double> lat = sender.TakeLatencies();
  all_latencies.insert(all_latencies.end(), lat.begin(), lat.end());
  sender.Stop();

  // Every finding the aggregator started for these jobs: the injected one, or a false page.
  ncclwatch::v1::ListEventsRequest ereq;
  ereq.set_since_unix_ns(static_cast<uint64_t>(t0));
  ereq.set_limit(10000);
  ncclwatch::v1::ListEventsResponse eresp;
  for (;;) {  // every page
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    if (!query_token.empty()) ctx.AddMetadata("authorization", "Bearer " + query_token);
    ncclwatch::v1::ListEventsResponse page;
    const grpc::Status s = query->ListEvents(&ctx, ereq, &page);
    if (!s.ok()) {
      std::fprintf(stderr, "loadgen: ListEvents: %s\n", s.error_message().c_str());
      break;
    }
    for (auto& e : *page.mutable_events()) *eresp.add_events() = std::move(e);
    if (page.next_page_token().empty()) break;
    ereq.set_page_token(page.next_page_token());
  }
  int true_pages = 0, false_pages = 0, warmup_pages = 0;
  const int64_t warm_ns = t0 + static_cast<int64_t>(c.warmup_s * 1e9);
  for (const auto& e : eresp.events()) {
    if (e.phase() != ncclwatch::v1::Event::START) continue;
    const std::string job = e.job_id();
    if (job.rfind(c.job_prefix + "-", 0) != 0) continue;
    const bool in_fault_window = fault_ns > 0 && job == absl::StrCat(c.job_prefix, "-0") &&
                                 static_cast<int64_t>(e.time_unix_ns()) >= fault_ns;
    const bool injected =
        in_fault_window && ((c.slow_rank >= 0 && e.kind() == ncclwatch::v1::Event::STRAGGLER &&
                             e.root_cause().pid() == fault_pid) ||
                            (c.hang_rank >= 0 && (e.kind() == ncclwatch::v1::Event::HANG ||
                                                  e.kind() == ncclwatch::v1::Event::RANK_SILENT)));
    if (injected) {
      ++true_pages;
    } else if (static_cast<int64_t>(e.time_unix_ns()) < warm_ns) {
      ++warmup_pages;
    } else {
      ++false_pages;
    }
    std::fprintf(stderr, "loadgen: finding %s at t=%.3f s: %s\n",
                 injected ? "(injected)"
                          : (static_cast<int64_t>(e.time_unix_ns()) < warm_ns ? "(warm-up)"
                                                                              : "(FALSE PAGE)"),
                 static_cast<double>(static_cast<int64_t>(e.time_unix_ns()) - t0) / 1e9,
                 e.summary().c_str());
  }

  const double rank_seconds = static_cast<double>(total_ranks) * intervals * c.interval_s;
  int64_t model_ops = 0;
  for (const auto& j : jobs) model_ops += j->ops();
  std::ostringstream s;
  s << "ranks=" << total_ranks << "\n"
    << "jobs=" << c.jobs << "\n"
    << "seconds=" << intervals * c.interval_s << "\n"
    << "reports=" << reports << "\n"
    << "reports_per_rank_s=" << static_cast<double>(reports) / rank_seconds << "\n"
    << "batches_acked=" << sender.acked() << "\n"
    << "batches_lost=" << sender.lost() << "\n"
    << "push_retries=" << sender.retries() << "\n"
    << "rejected_reports=" << sender.rejected_reports() << "\n"
    << "drained=" << (drained && sender.lost() == 0 ? 1 : 0) << "\n"
    << "wire_bytes=" << sender.wire_bytes() << "\n"
    << "wire_bytes_per_rank_s=" << static_cast<double>(sender.wire_bytes()) / rank_seconds << "\n"
    << "model_ops_per_rank_s=" << static_cast<double>(model_ops) / rank_seconds << "\n"
    << "nccl_ops_per_rank_s="
    << static_cast<double>(model_ops) * static_cast<double>(c.stride) / rank_seconds << "\n"
    << "ack_p50_s=" << Percentile(all_latencies, 0.5) << "\n"
    << "ack_p99_s=" << Percentile(all_latencies, 0.99) << "\n"
    << "ack_max_s=" << Percentile(all_latencies, 1.0) << "\n"
    << "ack_p50_steady_s=" << Percentile(steady_latencies, 0.5) << "\n"
    << "ack_p99_steady_s=" << Percentile(steady_latencies, 0.99) << "\n"
    << "ack_max_steady_s=" << Percentile(steady_latencies, 1.0) << "\n"
    << "max_backlog_batches=" << max_backlog << "\n"
    << "max_backlog_steady_batches=" << max_backlog_steady << "\n"
    << "generator_lag_p50_s=" << Percentile(lags, 0.5) << "\n"
    << "generator_lag_max_s=" << Percentile(lags, 1.0) << "\n"
    << "generator_cpu_s=" << gen_cpu_s << "\n"
    << "detection_s="
    << (detected_ns.load() > 0 && fault_ns > 0
            ? static_cast<double>(detected_ns.load() - fault_ns) / 1e9
            : -1.0)
    << "\n"
    << "true_pages=" << true_pages << "\n"
    << "false_pages=" << false_pages << "\n"
    << "warmup_pages=" << warmup_pages << "\n";
  {
    std::lock_guard<std::mutex> lock(qt_mu);
    s << "list_stragglers_p50_s=" << Percentile(qt.stragglers_s, 0.5) << "\n"
      << "list_stragglers_max_s=" << Percentile(qt.stragglers_s, 1.0) << "\n"
      << "list_comms_p50_s=" << Percentile(qt.comms_s, 0.5) << "\n"
      << "list_comms_max_s=" << Percentile(qt.comms_s, 1.0) << "\n";
  }
  std::printf("%s", s.str().c_str());
  if (!c.summary_file.empty()) {
    std::ofstream out(c.summary_file);
    out << s.str();
  }
  return drained && sender.lost() == 0 ? 0 : 1;
}

}  // namespace
}  // namespace ncclwatch::loadgen

int main(int argc, char** argv) { return ncclwatch::loadgen::Main(argc, argv); }

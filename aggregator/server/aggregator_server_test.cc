// The aggregator run in-process: it serves Ingest, Query and HTTP on the ports it reports, its
// detection tick runs, it answers what it stored after a restart on the same data directory, and
// a Start that cannot bind leaves nothing running. Caps per agent: one agent (as the aggregator
// authenticates it) cannot take every job slot, the source is the aggregator's word and never the
// batch's, and a replay counts it the same way.
#include "aggregator/server/aggregator_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "aggregator/store/store.h"
#include "common/daemon.h"
#include "common/status_matchers.h"
#include "common/sync.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "ncclwatch/v1/ingest.grpc.pb.h"
#include "ncclwatch/v1/query.grpc.pb.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/metadata.h"
#include "tests/crashfs/full_disk_fs.h"

namespace ncclwatch::aggregator {
namespace {

using ::ncclwatch::testutil::IsOk;

// Pushes one report of `job` as agent `agent_id` (batch `seq`), the batch claiming `source`.
void PushAs(const std::string& address, const std::string& agent_id, uint64_t seq,
            const std::string& job) {
  ncclwatch::v1::NodeBatch batch;
  batch.set_agent_id(agent_id);
  batch.set_batch_seq(seq);
  batch.set_source("ip:192.0.2.1");  // a claim the aggregator must ignore
  auto* report = batch.add_reports();
  report->set_report_id(seq);
  auto* id = report->mutable_identity();
  id->set_job_id(job);
  id->set_comm_hash(7);
  id->set_rank(0);
  id->set_nranks(2);
  id->set_n_nodes(1);
  grpc::ClientContext context;
  ncclwatch::v1::BatchAck ack;
  auto stub = ncclwatch::v1::Ingest::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  ASSERT_THAT(stub->Push(&context, batch, &ack), IsOk());
}

// How many communicators of `job` the aggregator at `address` analyses.
int CommsOf(const std::string& address, const std::string& job) {
  grpc::ClientContext context;
  ncclwatch::v1::ListCommsRequest request;
  request.set_job_id(job);
  ncclwatch::v1::ListCommsResponse comms;
  auto stub = ncclwatch::v1::Query::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  EXPECT_THAT(stub->ListComms(&context, request, &comms), IsOk());
  return comms.comms_size();
}

// The value of the reports capped by --max-jobs-per-agent on /metrics, as text.
std::string CappedByAgentJobs(int http_port) {
  auto metrics = httplib::Client("127.0.0.1", http_port).Get("/metrics");
  if (!metrics) return "no /metrics";
  const std::string name =
      "ncclwatch_aggregator_reports_capped_total{reason=\"too_many_jobs_per_agent\"} ";
  const size_t at = metrics->body.find(name);
  if (at == std::string::npos) return "absent";
  return metrics->body.substr(at + name.size(), metrics->body.find('\n', at) - at - name.size());
}

class AggregatorServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ncclwatch-aggregator-server-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  AggregatorServerOptions Options() const {
    AggregatorServerOptions o;
    o.listen_host = "127.0.0.1";
    o.grpc_port = 0;
    o.http_port = 0;
    o.data_dir = dir_;
    o.tick_period = absl::Milliseconds(1);
    return o;
  }

  // One job per agent (as authenticated) at most, on `host`.
  AggregatorServerOptions CappedOptions(const std::string& host) const {
    AggregatorServerOptions o = Options();
    o.listen_host = host;
    o.analyzer.max_jobs_per_agent = 1;
    return o;
  }

  static ncclwatch::v1::NodeBatch Batch(uint64_t seq) {
    ncclwatch::v1::NodeBatch batch;
    batch.set_agent_id("agent-1");
    batch.set_batch_seq(seq);
    auto* report = batch.add_reports();
    report->set_report_id(seq);
    auto* id = report->mutable_identity();
    id->set_job_id("job");
    id->set_comm_name("world");
    id->set_comm_hash(0x77);
    id->set_rank(0);
    id->set_nranks(2);
    id->set_n_nodes(1);
    id->set_node("node-a");
    return batch;
  }

  // Options() with the store on `env` (a file system that fails on command).
  AggregatorServerOptions OptionsOn(rocksdb::Env* env) const {
    AggregatorServerOptions o = Options();
    o.env = env;
    return o;
  }

  // A plaintext channel to `server`'s gRPC port on loopback.
  static std::shared_ptr<grpc::Channel> ChannelTo(const AggregatorServer& server) {
    return grpc::CreateChannel("127.0.0.1:" + std::to_string(server.grpc_port()),
                               grpc::InsecureChannelCredentials());
  }

  // Pushes Batch(seq) to `server` as an agent does.
  static grpc::Status PushBatch(const AggregatorServer& server, uint64_t seq) {
    auto ingest = ncclwatch::v1::Ingest::NewStub(ChannelTo(server));
    grpc::ClientContext context;
    ncclwatch::v1::BatchAck ack;
    return ingest->Push(&context, Batch(seq), &ack);
  }

  std::string dir_;
};

// /readyz tells the truth: 200 while pushes are stored, 503 saying why once the disk is full
// (it had stayed 200 while every push failed); /healthz, the liveness probe, stays 200.
TEST_F(AggregatorServerTest, ReadinessFailsWhileTheStoreTakesNoWrites) {
  auto fs = std::make_shared<ncclwatch::testing::FullDiskFileSystem>();
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  AggregatorServer server(OptionsOn(env.get()));
  ASSERT_THAT(server.Start(), IsOk());
  httplib::Client http("127.0.0.1", server.http_port());
  ASSERT_THAT(PushBatch(server, 1), IsOk());
  auto ready = http.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
  EXPECT_EQ(ready->body, "ready\n");

  fs->full = true;
  grpc::Status refused = PushBatch(server, 2);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  ready = http.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
  EXPECT_NE(ready->body.find("takes no writes"), std::string::npos) << ready->body;
  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("ncclwatch_aggregator_store_writes_stopped 1"), std::string::npos);
  server.Stop();
  fs->full = false;
}

// When RocksDB cannot resume (its resume found no room: the disk filled again meanwhile), only a
// restart gets the store going again: the liveness probe says so, and Kubernetes restarts the pod.
TEST_F(AggregatorServerTest, LivenessFailsWhenOnlyARestartCanResumeTheStore) {
  auto fs = std::make_shared<ncclwatch::testing::CountdownFileSystem>(1 << 30);
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  AggregatorServerOptions options = OptionsOn(env.get());
  options.resume_period = absl::Milliseconds(50);
  AggregatorServer server(options);
  ASSERT_THAT(server.Start(), IsOk());
  httplib::Client http("127.0.0.1", server.http_port());
  ASSERT_THAT(PushBatch(server, 1), IsOk());
  fs->room = 0;  // full, and still full when the aggregator resumes (within 50 ms)
  EXPECT_FALSE(PushBatch(server, 2).ok());
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  int status = 0;
  std::string body;
  while (absl::Now() < give_up) {
    auto health = http.Get("/healthz");
    if (health && health->status != 200) {
      status = health->status;
      body = health->body;
      break;
    }
  }
  EXPECT_EQ(status, 503);
  EXPECT_NE(body.find("restart"), std::string::npos) << body;
}

TEST_F(AggregatorServerTest, ServesIngestQueryAndHttpOnTheBoundPortsAndTicks) {
  AggregatorServer server(Options());
  ASSERT_THAT(server.Start(), IsOk());
  ASSERT_NE(server.grpc_port(), 0);
  ASSERT_NE(server.http_port(), 0);
  EXPECT_TRUE(server.ticker().WaitForIterations(3, absl::Seconds(30)));

  auto channel = ChannelTo(server);
  auto ingest = ncclwatch::v1::Ingest::NewStub(channel);
  grpc::ClientContext push;
  ncclwatch::v1::BatchAck ack;
  ASSERT_THAT(ingest->Push(&push, Batch(1), &ack), IsOk());
  EXPECT_EQ(ack.batch_seq(), 1u);
  EXPECT_FALSE(ack.duplicate());

  auto query = ncclwatch::v1::Query::NewStub(channel);
  grpc::ClientContext list;
  ncclwatch::v1::ListCommsRequest request;
  ncclwatch::v1::ListCommsResponse comms;
  ASSERT_THAT(query->ListComms(&list, request, &comms), IsOk());
  ASSERT_EQ(comms.comms_size(), 1);
  EXPECT_EQ(comms.comms(0).comm_name(), "world");

  httplib::Client http("127.0.0.1", server.http_port());
  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto federate = http.Get("/federate?match[]=ncclwatch_hang");
  ASSERT_TRUE(federate);
  EXPECT_EQ(federate->status, 200);
  EXPECT_NE(federate->body.find("ncclwatch_hang{job_id=\"job\""), std::string::npos)
      << federate->body;
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("ncclwatch_aggregator_batches_stored_total 1"), std::string::npos)
      << metrics->body;

  server.Stop();
  server.Stop();  // idempotent
  grpc::ClientContext after;
  after.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  EXPECT_FALSE(ingest->Push(&after, Batch(2), &ack).ok()) << "no longer serving";
}

TEST_F(AggregatorServerTest, ARestartOnTheSameDataAcknowledgesAReplayedBatchAsADuplicate) {
  {
    AggregatorServer server(Options());
    ASSERT_THAT(server.Start(), IsOk());
    auto ingest = ncclwatch::v1::Ingest::NewStub(ChannelTo(server));
    grpc::ClientContext push;
    ncclwatch::v1::BatchAck ack;
    ASSERT_THAT(ingest->Push(&push, Batch(1), &ack), IsOk());
    EXPECT_FALSE(ack.duplicate());
  }  // the destructor stops it
  AggregatorServer again(Options());
  ASSERT_THAT(again.Start(), IsOk());
  auto channel = ChannelTo(again);
  grpc::ClientContext push;
  ncclwatch::v1::BatchAck ack;
  ASSERT_THAT(ncclwatch::v1::Ingest::NewStub(channel)->Push(&push, Batch(1), &ack), IsOk());
  EXPECT_TRUE(ack.duplicate()) << "the batch log survived the restart";
  // The replay at start-up fed the stored batch to the detectors again.
  grpc::ClientContext list;
  ncclwatch::v1::ListCommsResponse comms;
  ASSERT_THAT(ncclwatch::v1::Query::NewStub(channel)->ListComms(&list, {}, &comms), IsOk());
  EXPECT_EQ(comms.comms_size(), 1);
}

// The table files of the store in `dir` (closed) holding its long-term history, not the batch log.
std::vector<std::string> HistoryTableFiles(const std::string& dir) {
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {{rocksdb::kDefaultColumnFamilyName, {}},
                                                           {"batches", {}}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  std::vector<std::string> files;
  if (!rocksdb::DB::OpenForReadOnly({}, dir, families, &handles, &db).ok()) return files;
  std::vector<rocksdb::LiveFileMetaData> live;
  db->GetLiveFilesMetaData(&live);
  for (const auto& f : live) {
    if (f.column_family_name == rocksdb::kDefaultColumnFamilyName) files.push_back(dir + f.name);
  }
  for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
  delete db;
  return files;
}

// A unlabelled sample of the aggregator's /metrics, as text ("absent" if it is not there).
std::string AggregatorMetric(int http_port, const std::string& name) {
  auto metrics = httplib::Client("127.0.0.1", http_port).Get("/metrics");
  if (!metrics) return "no /metrics";
  const size_t at = metrics->body.find("\n" + name + " ");
  if (at == std::string::npos) return "absent";
  const size_t from = at + name.size() + 2;
  return metrics->body.substr(from, metrics->body.find('\n', from) - from);
}

// Push is served from its bytes (a raw method): bytes that are no NodeBatch are refused with a
// clear error and counted, and the connection goes on taking batches.
TEST_F(AggregatorServerTest, PushedBytesThatAreNoBatchAreRefusedCountedAndTheNextBatchIsTaken) {
  AggregatorServer server(Options());
  ASSERT_THAT(server.Start(), IsOk());
  auto channel = ChannelTo(server);
  grpc::GenericStub generic(channel);
  grpc::ClientContext bad;
  bad.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice garbage(std::string("\xff\xff\xff"));  // a field tag that never ends
  grpc::ByteBuffer request(&garbage, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  ncclwatch::Notification answered;
  generic.UnaryCall(&bad, "/ncclwatch.v1.Ingest/Push", grpc::StubOptions(), &request, &response,
                    [&](grpc::Status s) {
                      status = std::move(s);
                      answered.Notify();
                    });
  answered.WaitForNotification();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("not a NodeBatch"));
  EXPECT_EQ(AggregatorMetric(server.http_port(), "ncclwatch_aggregator_pushes_unparsable_total"),
            "1");

  grpc::ClientContext push;
  ncclwatch::v1::BatchAck ack;
  ASSERT_THAT(ncclwatch::v1::Ingest::NewStub(channel)->Push(&push, Batch(1), &ack), IsOk());
  EXPECT_EQ(ack.batch_seq(), 1u);
  EXPECT_EQ(AggregatorMetric(server.http_port(), "ncclwatch_aggregator_batches_stored_total"), "1");
}

// A batch of hundreds of KiB (a node of many busy ranks) reaches the service in many slices (about
// 8 KiB each here: 65 for this one), which are joined before it is parsed and logged. Every report
// of it is analysed, and the bytes logged are the ones sent: a restart replays all of them, and
// the same batch pushed again is a duplicate.
TEST_F(AggregatorServerTest, ABatchThatArrivesInManySlicesIsAnalysedAndLoggedWhole) {
  constexpr int kRanks = 512;
  ncclwatch::v1::NodeBatch big = Batch(7);
  big.clear_reports();
  for (int r = 0; r < kRanks; ++r) {
    auto* report = big.add_reports();
    report->set_report_id(1000 + r);
    auto* id = report->mutable_identity();
    id->set_job_id("big-job");
    id->set_comm_name("world");
    id->set_comm_hash(0x99);
    id->set_rank(r);
    id->set_nranks(kRanks);
    id->set_n_nodes(kRanks / 8);
    id->set_node("node-" + std::to_string(r / 8));
    for (int size = 0; size < 16; ++size) {
      auto* stat = report->add_stats();
      stat->set_op("AllReduce");
      stat->set_algo_proto("RING_SIMPLE");
      stat->set_message_size(std::to_string(size) + "-" + std::to_string(size + 1) + "MB");
      stat->set_peer(-1);
      stat->set_count(4);
      stat->set_bytes(4ull * (size + 1) << 20);
      stat->set_exec_time_us_sum(4000.0 + r);
    }
  }
  ASSERT_GT(big.ByteSizeLong(), size_t{256} << 10);
  auto ranks_of = [](const std::shared_ptr<grpc::Channel>& channel) {
    grpc::ClientContext list;
    ncclwatch::v1::ListCommsRequest request;
    request.set_job_id("big-job");
    ncclwatch::v1::ListCommsResponse comms;
    EXPECT_THAT(ncclwatch::v1::Query::NewStub(channel)->ListComms(&list, request, &comms), IsOk());
    return comms.comms_size() == 1 ? comms.comms(0).ranks_size() : -1;
  };
  {
    AggregatorServer server(Options());
    ASSERT_THAT(server.Start(), IsOk());
    auto channel = ChannelTo(server);
    grpc::ClientContext push;
    ncclwatch::v1::BatchAck ack;
    ASSERT_THAT(ncclwatch::v1::Ingest::NewStub(channel)->Push(&push, big, &ack), IsOk());
    EXPECT_FALSE(ack.duplicate());
    EXPECT_EQ(ranks_of(channel), kRanks);
  }
  AggregatorServer again(Options());
  ASSERT_THAT(again.Start(), IsOk());
  auto channel = ChannelTo(again);
  EXPECT_EQ(ranks_of(channel), kRanks) << "the replay read back every report of the logged batch";
  grpc::ClientContext push;
  ncclwatch::v1::BatchAck ack;
  ASSERT_THAT(ncclwatch::v1::Ingest::NewStub(channel)->Push(&push, big, &ack), IsOk());
  EXPECT_TRUE(ack.duplicate());
  EXPECT_EQ(AggregatorMetric(again.http_port(), "ncclwatch_aggregator_pushes_unparsable_total"),
            "0");
}

// A table file of the history with flipped bytes (bit rot): the start failed at every try with
// "block checksum mismatch". Now it is repaired, and the aggregator starts on what it kept.
TEST_F(AggregatorServerTest, AStoreWithADamagedTableFileIsRepairedAtStartAndJudgesWhatItKept) {
  {
    auto store = Store::Open(dir_);
    ASSERT_THAT(store, IsOk());
    for (uint64_t seq = 1; seq <= 3; ++seq) {
      ASSERT_TRUE(*(*store)->PutBatchIfNew(Batch(seq), absl::GetCurrentTimeNanos()));
    }
    ASSERT_THAT((*store)->AppendPoints({{"ncclwatch_x", {{"job", "job"}}, 1, 1'000}}), IsOk());
    ASSERT_THAT((*store)->Compact(), IsOk());  // the series index and the dedup index in a table
  }
  const std::vector<std::string> tables = HistoryTableFiles(dir_);
  ASSERT_EQ(tables.size(), 1u);
  {
    std::fstream f(tables[0], std::ios::in | std::ios::out | std::ios::binary);
    std::string bytes(64, '\0');
    f.seekg(16);
    f.read(bytes.data(), 64);  // inside the first data block
    for (char& c : bytes) c = static_cast<char>(~c);
    f.seekp(16);
    f.write(bytes.data(), 64);
  }

  AggregatorServerOptions strict = Options();
  strict.repair_damaged_store = false;
  auto refused = StartAggregatorServer(strict);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss) << refused.status();
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("checksum"));

  auto started = StartAggregatorServer(Options());
  ASSERT_THAT(started, IsOk());
  AggregatorServer& server = **started;
  EXPECT_EQ(AggregatorMetric(server.http_port(), "ncclwatch_aggregator_store_repairs_total"), "1");
  EXPECT_FALSE(std::filesystem::is_empty(dir_ + "/lost")) << "the damaged file is kept aside";
  // The batch log was not damaged: replayed, the job is judged again.
  EXPECT_EQ(CommsOf("127.0.0.1:" + std::to_string(server.grpc_port()), "job"), 1);
}

// The table files in `dir`.
std::set<std::string> TableFiles(const std::string& dir) {
  std::set<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".sst") files.insert(e.path().filename());
  }
  return files;
}

// Hourly housekeeping compacted the whole history (CompactRange with the retention filter rewrites
// every bottom-level file), next to the synced log: a 16,384-rank store rewritten every hour. It
// now rewrites nothing; expired data leaves with RocksDB's own compactions, every file at least
// every --retention / 4.
TEST_F(AggregatorServerTest, HourlyHousekeepingRewritesNoTableFile) {
  {
    auto store = Store::Open(dir_);
    ASSERT_THAT(store, IsOk());
    std::vector<SeriesPoint> points;
    const int64_t now_ms = absl::ToUnixMillis(absl::Now());
    for (int s = 0; s < 2000; ++s) {
      for (int t = 0; t < 10; ++t) {
        points.push_back(
            {"ncclwatch_x", {{"rank", std::to_string(s)}}, 1.0 * t, now_ms - t * 1000});
      }
    }
    ASSERT_THAT((*store)->AppendPoints(points), IsOk());
    ASSERT_THAT((*store)->Compact(), IsOk());
  }
  const std::set<std::string> before = TableFiles(dir_);
  ASSERT_FALSE(before.empty());
  AggregatorServer server(Options());
  ASSERT_THAT(server.Start(), IsOk());
  server.Housekeep(/*hourly=*/true);
  const std::set<std::string> after = TableFiles(dir_);
  for (const std::string& f : before) EXPECT_TRUE(after.contains(f)) << f << " was rewritten";
}

// A listening TCP socket on 127.0.0.1 without SO_REUSEPORT: nobody else can bind its port.
class HeldPort {
 public:
  HeldPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd_, 1) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
  }
  ~HeldPort() {
    if (fd_ >= 0) close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST_F(AggregatorServerTest, APortInUseFailsStartWithAClearErrorAndNothingRunning) {
  HeldPort held;
  ASSERT_NE(held.port(), 0);
  AggregatorServerOptions grpc_clash = Options();
  grpc_clash.grpc_port = held.port();
  AggregatorServer first(std::move(grpc_clash));
  absl::Status s = first.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()),
              ::testing::StartsWith("cannot listen for gRPC on 127.0.0.1:" +
                                    std::to_string(held.port()) + ": the port is in use"));
  first.Stop();  // a no-op: it never ran

  AggregatorServerOptions http_clash = Options();
  http_clash.http_port = held.port();      // gRPC binds (port 0), then HTTP cannot
  http_clash.data_dir = dir_ + "/second";  // `first` keeps its store until it is destroyed
  AggregatorServer second(std::move(http_clash));
  s = second.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()),
              ::testing::StartsWith("cannot listen on 127.0.0.1:" + std::to_string(held.port()) +
                                    " for HTTP: the port is in use"));
  ASSERT_NE(second.grpc_port(), 0);
  grpc::ClientContext push;
  push.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  ncclwatch::v1::BatchAck ack;
  EXPECT_FALSE(ncclwatch::v1::Ingest::NewStub(ChannelTo(second))->Push(&push, Batch(1), &ack).ok())
      << "the gRPC port it had bound is closed again";
}

TEST_F(AggregatorServerTest, ASecondAggregatorOnTheSamePortsIsRefusedNotSharingThem) {
  // gRPC and httplib both set SO_REUSEPORT by default, with which a second server binds the
  // same port and the kernel splits the connections between the two.
  AggregatorServer first(Options());
  ASSERT_THAT(first.Start(), IsOk());
  AggregatorServerOptions same_grpc = Options();
  same_grpc.grpc_port = first.grpc_port();
  same_grpc.data_dir = dir_ + "/second";
  AggregatorServer second(std::move(same_grpc));
  absl::Status s = second.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("the port is in use"));

  AggregatorServerOptions same_http = Options();
  same_http.http_port = first.http_port();
  same_http.data_dir = dir_ + "/third";
  AggregatorServer third(std::move(same_http));
  s = third.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("for HTTP: the port is in use"));
}

TEST_F(AggregatorServerTest, LoopbackAgentsAreToldApartByNameAndAReplayCapsTheSameReports) {
  {
    AggregatorServer server(CappedOptions("127.0.0.1"));
    ASSERT_THAT(server.Start(), IsOk());
    const std::string address = "127.0.0.1:" + std::to_string(server.grpc_port());
    PushAs(address, "agent-1", 1, "job-a");
    PushAs(address, "agent-1", 2, "job-b");  // agent-1's second job: beyond its cap of one
    PushAs(address, "agent-2", 1, "job-c");  // on loopback too, but another agent
    EXPECT_EQ(CommsOf(address, "job-a"), 1);
    EXPECT_EQ(CommsOf(address, "job-b"), 0);
    EXPECT_EQ(CommsOf(address, "job-c"), 1);
    EXPECT_EQ(CappedByAgentJobs(server.http_port()), "1");
  }
  // The replay at start-up meets the stored sources, not the claimed one they all share.
  AggregatorServer again(CappedOptions("127.0.0.1"));
  ASSERT_THAT(again.Start(), IsOk());
  const std::string address = "127.0.0.1:" + std::to_string(again.grpc_port());
  EXPECT_EQ(CommsOf(address, "job-a"), 1);
  EXPECT_EQ(CommsOf(address, "job-b"), 0);
  EXPECT_EQ(CommsOf(address, "job-c"), 1);
  EXPECT_EQ(CappedByAgentJobs(again.http_port()), "1");
}

TEST_F(AggregatorServerTest, BeyondLoopbackTheAddressIsTheSourceWhateverTheAgentIdSays) {
  const std::string ip = ReachableIpv4Address();
  if (ip == "127.0.0.1") GTEST_SKIP() << "this machine has no address beyond loopback";
  AggregatorServer server(CappedOptions("0.0.0.0"));
  ASSERT_THAT(server.Start(), IsOk());
  const std::string address = ip + ":" + std::to_string(server.grpc_port());
  PushAs(address, "agent-1", 1, "job-a");
  // A new agent_id from the same address is the same source: still capped.
  PushAs(address, "agent-renamed", 1, "job-b");
  EXPECT_EQ(CommsOf(address, "job-a"), 1);
  EXPECT_EQ(CommsOf(address, "job-b"), 0);
  EXPECT_EQ(CappedByAgentJobs(server.http_port()), "1");
}

}  // namespace
}  // namespace ncclwatch::aggregator

// report_recorder: a stand-in node agent for plugin tests. It serves ncclwatch.v1.Agent on a
// socket, as the real agent does, and appends what each RankReport says to a text file, one line
// per report, one per OpStats and one per sampled collective, flushed before the next read:
//
//   R <comm_hash> <rank> <nranks> <final> <events_dropped> <records_dropped> <untimed_ops>
//     <channel_events_orphaned>
//   S <comm_hash> <rank> <op> <p2p> <algo_proto|-> <peer> <count> <untimed_count> <untimed_bytes>
//     <user_tag>
//   W <comm_hash> <rank> <op> <seq> <sync_wait_ns>   one per sampled collective; sync_wait_ns is
//     -1 when its column has none, -2 when the column has some but not this sample's (malformed)
//
// Text, so that the test host links no protobuf of its own, like a training process (a host that
// carried the same generated descriptors as the plugin would abort at load time).
//
// When a plugin's stream closes gracefully (its finalize drains the queue and waits for the close),
// everything it sent is already in the file: the test needs no sleep and no polling.
//
// Usage: report_recorder --listen=unix:///path --out=FILE [--ready-fd=N]
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "grpcpp/grpcpp.h"
#include "ncclwatch/v1/report.grpc.pb.h"

namespace {

class Recorder final : public ncclwatch::v1::Agent::CallbackService {
 public:
  explicit Recorder(FILE* out) : out_(out) {}

  grpc::ServerReadReactor<ncclwatch::v1::RankReport>* StreamReports(
      grpc::CallbackServerContext*, ncclwatch::v1::StreamSummary* summary) override {
    return new Stream(this, summary);
  }

 private:
  class Stream : public grpc::ServerReadReactor<ncclwatch::v1::RankReport> {
   public:
    Stream(Recorder* owner, ncclwatch::v1::StreamSummary* summary)
        : owner_(owner), summary_(summary) {
      StartRead(&report_);
    }
    void OnReadDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status::OK);
        return;
      }
      owner_->Append(report_);
      summary_->set_accepted(summary_->accepted() + 1);
      StartRead(&report_);
    }
    void OnDone() override { delete this; }

   private:
    Recorder* owner_;
    ncclwatch::v1::StreamSummary* summary_;
    ncclwatch::v1::RankReport report_;
  };

  void Append(const ncclwatch::v1::RankReport& r) {
    const auto& id = r.identity();
    const auto& d = r.drops();
    std::lock_guard<std::mutex> lock(mu_);
    std::fprintf(out_, "R %llu %d %d %d %llu %llu %llu %llu\n",
                 static_cast<unsigned long long>(id.comm_hash()), id.rank(), id.nranks(),
                 r.final() ? 1 : 0, static_cast<unsigned long long>(d.events_dropped()),
                 static_cast<unsigned long long>(d.records_dropped()),
                 static_cast<unsigned long long>(d.untimed_ops()),
                 static_cast<unsigned long long>(d.channel_events_orphaned()));
    for (const auto& s : r.stats()) {
      std::fprintf(out_, "S %llu %d %s %d %s %d %llu %llu %llu %llu\n",
                   static_cast<unsigned long long>(id.comm_hash()), id.rank(), s.op().c_str(),
                   s.p2p() ? 1 : 0, s.algo_proto().empty() ? "-" : s.algo_proto().c_str(), s.peer(),
                   static_cast<unsigned long long>(s.count()),
                   static_cast<unsigned long long>(s.untimed_count()),
                   static_cast<unsigned long long>(s.untimed_bytes()),
                   static_cast<unsigned long long>(s.user_tag()));
    }
    for (const auto& c : r.sample_columns()) {
      int64_t seq = 0;  // seq_delta: the first entry absolute, then differences
      for (int i = 0; i < c.seq_delta_size(); ++i) {
        seq += c.seq_delta(i);
        long long wait = c.sync_wait_ns_size() == 0 ? -1 : -2;
        if (i < c.sync_wait_ns_size()) wait = static_cast<long long>(c.sync_wait_ns(i));
        std::fprintf(out_, "W %llu %d %s %lld %lld\n",
                     static_cast<unsigned long long>(id.comm_hash()), id.rank(), c.op().c_str(),
                     static_cast<long long>(seq), wait);
      }
    }
    std::fflush(out_);
  }

  FILE* out_;
  std::mutex mu_;
};

}  // namespace

int main(int argc, char** argv) {
  std::string listen, out_path;
  int ready_fd = -1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: report_recorder --listen=unix:///path --out=FILE [--ready-fd=N]\n"
          "Serves ncclwatch.v1.Agent/StreamReports and appends a summary of every report\n"
          "to FILE, one text line per report and per OpStats.\n");
      return 0;
    }
    if (a.rfind("--listen=", 0) == 0) {
      listen = a.substr(9);
    } else if (a.rfind("--out=", 0) == 0) {
      out_path = a.substr(6);
    } else if (a.rfind("--ready-fd=", 0) == 0) {
      ready_fd = std::atoi(a.c_str() + 11);
    } else {
      std::fprintf(stderr, "report_recorder: unknown argument %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (listen.empty() || out_path.empty()) {
    std::fprintf(stderr, "report_recorder: --listen and --out are required (see --help)\n");
    return 2;
  }
  FILE* out = std::fopen(out_path.c_str(), "w");
  if (out == nullptr) {
    std::fprintf(stderr, "report_recorder: cannot open %s: %s\n", out_path.c_str(),
                 std::strerror(errno));
    return 1;
  }
  Recorder service(out);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    std::fprintf(stderr, "report_recorder: cannot listen on %s\n", listen.c_str());
    return 1;
  }
  if (ready_fd >= 0) {
    static const char kReady[] = "ready\n";
    if (write(ready_fd, kReady, sizeof(kReady) - 1) < 0) return 1;
    close(ready_fd);
  }
  server->Wait();  // until killed
  return 0;
}

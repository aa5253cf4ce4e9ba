// ncclwatch: the command-line client of the aggregator's Query API.
//
//   ncclwatch stragglers [--job J] [--wait-s N] [--json] [--aggregator HOST:PORT]
//
// Tables for people, --json for scripts; a readable error when the aggregator cannot be reached.
#include <cstdio>
#include <ctime>
#include <string>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "aggregator/analyzer.h"
#include "common/config.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "ncclwatch/v1/query.grpc.pb.h"

namespace ncclwatch::cli {
namespace {

using ncclwatch::v1::StragglerInfo;

struct CliConfig {
  std::string aggregator = "localhost:9470";
  bool json = false;
  std::string job;
  double wait_s = 0;
  double timeout_s = 5;
};

constexpr char kUsage[] = "<command> [flags]";
constexpr char kSummary[] =
    "Query the ncclwatch aggregator.\n\n"
    "Commands:\n"
    "  stragglers   ranks currently flagged as slow, with the node and GPU they run on";

int Fail(const std::string& message) {
  std::fprintf(stderr, "ncclwatch: %s\n", message.c_str());
  return 1;
}

std::string RpcError(const grpc::Status& status, const CliConfig& config) {
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
      status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::StrFormat(
        "cannot reach the aggregator at %s (%s). Is ncclwatch-aggregator running there? "
        "Use --aggregator HOST:PORT or NCCLWATCH_AGGREGATOR.",
        config.aggregator, status.error_message());
  }
  return absl::StrFormat("aggregator at %s answered: %s", config.aggregator,
                         status.error_message());
}

std::string Clock(uint64_t unix_ns) {
  std::time_t secs = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  std::tm tm;
  localtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%H:%M:%S", &tm);
  return buf;
}

void PrintStragglersTable(const std::vector<StragglerInfo>& list) {
  if (list.empty()) {
    std::printf("No rank is flagged as a straggler.\n");
    return;
  }
  std::printf("%-20s %-28s %5s %-16s %-8s %10s %13s %9s\n", "JOB", "COMMUNICATOR", "RANK", "NODE",
              "GPU", "LATENESS", "ARRIVED-LAST", "SINCE");
  for (const auto& s : list) {
    std::string comm = absl::StrFormat(
        "%s %s", s.comm_name().empty() ? "-" : s.comm_name(),
        aggregator::CommHashText(s.comm_hash()));
    std::printf("%-20s %-28s %5d %-16s %-8s %7.2f ms %12.0f%% %9s\n", s.job_id().c_str(),
                comm.c_str(), s.rank(), s.node().empty() ? "unknown" : s.node().c_str(),
                aggregator::GpuLabel(s.cuda_device()).c_str(), s.lateness_seconds() * 1e3,
                s.arrived_last_fraction() * 100, Clock(s.since_unix_ns()).c_str());
  }
  std::printf("\n");
  for (const auto& s : list) {
    std::printf(
        "Finding: rank %d on node %s (%s) is slowing communicator %s of job %s: it reaches the "
        "collectives %.2f ms after the first rank (median of its last %u collectives).\n",
        s.rank(), s.node().empty() ? "unknown" : s.node().c_str(),
        aggregator::GpuLabel(s.cuda_device()).c_str(),
        (s.comm_name().empty() ? aggregator::CommHashText(s.comm_hash()) : s.comm_name()).c_str(),
        s.job_id().c_str(), s.lateness_seconds() * 1e3, s.window_collectives());
  }
}

int Stragglers(ncclwatch::v1::Query::Stub& stub, const CliConfig& config) {
  auto deadline = [&] {
    return std::chrono::system_clock::now() +
           std::chrono::milliseconds(static_cast<int64_t>(config.timeout_s * 1000));
  };
  ncclwatch::v1::ListStragglersRequest request;
  request.set_job_id(config.job);
  ncclwatch::v1::ListStragglersResponse response;

  // With --wait-s, subscribe first so that a straggler flagged between the list and the watch is
  // not missed, then list; if nobody is flagged yet, wait for the first STRAGGLER event.
  grpc::ClientContext watch_context;
  std::unique_ptr<grpc::ClientReader<ncclwatch::v1::Event>> watch;
  if (config.wait_s > 0) {
    watch_context.set_deadline(std::chrono::system_clock::now() +
                               std::chrono::milliseconds(static_cast<int64_t>(config.wait_s * 1000)));
    watch = stub.Watch(&watch_context, ncclwatch::v1::WatchRequest());
    watch->WaitForInitialMetadata();
  }
  {
    grpc::ClientContext context;
    context.set_deadline(deadline());
    grpc::Status status = stub.ListStragglers(&context, request, &response);
    if (!status.ok()) return Fail(RpcError(status, config));
  }
  if (watch && response.stragglers_size() == 0) {
    ncclwatch::v1::Event event;
    bool found = false;
    while (!found && watch->Read(&event)) {
      found = event.kind() == ncclwatch::v1::Event::STRAGGLER &&
              event.phase() == ncclwatch::v1::Event::START &&
              (config.job.empty() || event.straggler().job_id() == config.job);
    }
    watch_context.TryCancel();
    grpc::ClientContext context;
    context.set_deadline(deadline());
    response.Clear();
    grpc::Status status = stub.ListStragglers(&context, request, &response);
    if (!status.ok()) return Fail(RpcError(status, config));
  } else if (watch) {
    watch_context.TryCancel();
  }
  if (watch) watch->Finish();

  if (config.json) {
    std::string json;
    google::protobuf::util::JsonPrintOptions options;
    options.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(response, &json, options);
    std::printf("%s\n", json.c_str());
    return 0;
  }
  std::vector<StragglerInfo> list(response.stragglers().begin(), response.stragglers().end());
  PrintStragglersTable(list);
  return 0;
}

int Main(int argc, char** argv) {
  CliConfig config;
  ConfigTable table("ncclwatch", kSummary);
  table.AddString("aggregator", "NCCLWATCH_AGGREGATOR", &config.aggregator,
                  "Aggregator gRPC address, host:port.");
  table.AddBool("json", "", &config.json, "Print JSON instead of a table.");
  table.AddString("job", "", &config.job, "Only this job id.");
  table.AddDouble("wait-s", "", &config.wait_s,
                  "stragglers: if none is flagged yet, wait up to this long for the first one.");
  table.AddDouble("timeout-s", "", &config.timeout_s, "Deadline of each request.");
  auto positional = table.Parse(argc, argv);
  if (!positional.ok()) return Fail(std::string(positional.status().message()));
  if (table.help_requested() || positional->empty()) {
    std::fputs(table.HelpText(kUsage).c_str(), table.help_requested() ? stdout : stderr);
    return table.help_requested() ? 0 : 2;
  }
  const std::string& command = (*positional)[0];
  auto stub = ncclwatch::v1::Query::NewStub(
      grpc::CreateChannel(config.aggregator, grpc::InsecureChannelCredentials()));
  if (command == "stragglers") return Stragglers(*stub, config);
  std::fprintf(stderr, "ncclwatch: unknown command '%s' (see ncclwatch --help)\n",
               command.c_str());
  return 2;
}

}  // namespace
}  // namespace ncclwatch::cli

int main(int argc, char** argv) { return ncclwatch::cli::Main(argc, argv); }

// ncclwatch: the command-line client of the aggregator's Query API.
//
//   ncclwatch jobs       [--json] [--aggregator HOST:PORT]
//   ncclwatch comms      [--job J] [--json] [--aggregator HOST:PORT]
//   ncclwatch stragglers [--job J] [--wait-s N] [--json] [--aggregator HOST:PORT]
//   ncclwatch hangs      [--job J] [--wait-s N] [--json] [--aggregator HOST:PORT]
//   ncclwatch degraded   [--job J] [--wait-s N] [--json] [--aggregator HOST:PORT]
//   ncclwatch query      SELECTOR [--since-s N] [--step-s N] [--json] [--aggregator HOST:PORT]
//   ncclwatch trace      --job J --comm C [--since-s N] [--output F] [--aggregator HOST:PORT]
//   ncclwatch events     [--job J] [--since-s N] [--limit N] [--follow] [--json] [--aggregator ...]
//
// Tables for people, --json for scripts; a readable error when the aggregator cannot be reached.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <ctime>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "aggregator/findings/findings.h"
#include "proto/inspector.h"
#include "common/config.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "common/rpc/token.h"
#include "common/rpc/tls.h"
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
  double since_s = 3600;
  double step_s = 0;
  std::string comm;
  std::string output;
  bool follow = false;
  int64_t limit = 1000;
  bool tls = false;
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::string server_name;
  std::string token_file;
  std::string token;  // read from token_file
};

// Every Query call carries the bearer token, when there is one.
void Authorize(const CliConfig& config, grpc::ClientContext* context) {
  if (!config.token.empty()) context->AddMetadata("authorization", "Bearer " + config.token);
}

constexpr char kUsage[] = "<command> [flags]";
constexpr char kSummary[] =
    "Query the ncclwatch aggregator.\n\n"
    "Commands:\n"
    "  jobs         jobs that have reported: communicators, ranks, nodes, current findings\n"
    "  comms        communicators (of --job) with class, size and health\n"
    "  stragglers   ranks currently flagged as slow, with the node and GPU they run on\n"
    "  hangs        collectives that stopped making progress, the ranks that never reached\n"
    "               them, and ranks that went silent\n"
    "  degraded     communicators whose bandwidth fell below the baseline of their kind, and\n"
    "               the nodes whose network is suspected (--wait-s waits for a suspect node)\n"
    "  events       the detection events stored by the aggregator (every start and end)\n"
    "  query SEL    stored points of the series matching a Prometheus selector, e.g.\n"
    "               'nccl_bus_bandwidth_gbs{job_id=\"j\",rank=\"5\"}' (--since-s, --step-s)\n"
    "  trace        a Chrome/Perfetto trace (JSON) of the sampled collectives of communicator\n"
    "               --comm of --job over the last --since-s seconds, one track per rank, GPU\n"
    "               clocks aligned on collective ends; open it in ui.perfetto.dev";

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
  std::printf("%-20s %-28s %5s %-16s %-8s %10s %10s %7s %7s %13s %9s\n", "JOB", "COMMUNICATOR",
              "RANK", "NODE", "GPU", "LATENESS", "EXCESS", "PEER-Z", "VS-OWN", "ARRIVED-LAST",
              "SINCE");
  for (const auto& s : list) {
    std::string comm = absl::StrFormat(
        "%s %s", s.comm_name().empty() ? "-" : s.comm_name(),
        CommHashText(s.comm_hash()));
    std::printf("%-20s %-28s %5d %-16s %-8s %7.2f ms %7.2f ms %7.1f %6.1fx %12.0f%% %9s\n",
                s.job_id().c_str(), comm.c_str(), s.rank(),
                s.node().empty() ? "unknown" : s.node().c_str(),
                GpuLabel(s.cuda_device()).c_str(), s.lateness_seconds() * 1e3,
                s.excess_seconds() * 1e3, s.peer_z_score(), s.history_ratio(),
                s.arrived_last_fraction() * 100, Clock(s.since_unix_ns()).c_str());
  }
  std::printf("\n");
  for (const auto& s : list) {
    std::printf(
        "Finding: rank %d on node %s (%s) is slowing communicator %s of job %s: it reaches the "
        "collectives %.2f ms after the first rank (median of its last %u collectives), %.2f ms "
        "later than its punctual peers; %s.\n",
        s.rank(), s.node().empty() ? "unknown" : s.node().c_str(),
        GpuLabel(s.cuda_device()).c_str(),
        (s.comm_name().empty() ? CommHashText(s.comm_hash()) : s.comm_name()).c_str(),
        s.job_id().c_str(), s.lateness_seconds() * 1e3, s.window_collectives(),
        s.excess_seconds() * 1e3,
        s.history_ratio() >= 2 ? "this is new: far later than its own usual"
                               : "it has been this late all along");
  }
}

// Lists with `list` (a unary call filling its response; false on error, with the error printed).
// With --wait-s and an empty answer, waits for the first event `wanted` accepts, then lists again.
// The watch is opened before the first list, so that nothing flagged in between is missed.
template <typename List, typename Empty, typename Wanted>
bool ListOrWait(ncclwatch::v1::Query::Stub& stub, const CliConfig& config, List list,
                Empty empty, Wanted wanted) {
  grpc::ClientContext watch_context;
  Authorize(config, &watch_context);
  std::unique_ptr<grpc::ClientReader<ncclwatch::v1::Event>> watch;
  if (config.wait_s > 0) {
    watch_context.set_deadline(std::chrono::system_clock::now() +
                               std::chrono::milliseconds(static_cast<int64_t>(config.wait_s * 1000)));
    watch = stub.Watch(&watch_context, ncclwatch::v1::WatchRequest());
    watch->WaitForInitialMetadata();
  }
  bool ok = list();
  if (ok && watch && empty()) {
    ncclwatch::v1::Event event;
    bool found = false;
    while (!found && watch->Read(&event)) {
      found = event.phase() == ncclwatch::v1::Event::START && wanted(event);
    }
    ok = list();
  }
  if (watch) {
    watch_context.TryCancel();
    watch->Finish();
  }
  return ok;
}

template <typename Message>
void PrintJson(const Message& m) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &json, options);
  std::printf("%s\n", json.c_str());
}

bool JobMatches(const ncclwatch::v1::Event& e, const CliConfig& config) {
  return config.job.empty() || aggregator::EventJobId(e) == config.job;
}

std::chrono::system_clock::time_point Deadline(const CliConfig& config) {
  return std::chrono::system_clock::now() +
         std::chrono::milliseconds(static_cast<int64_t>(config.timeout_s * 1000));
}

// One unary Query call with the configured deadline, into a cleared `response`; the status is kept
// in `*status` for the error message.
template <typename Request, typename Response>
bool Call(ncclwatch::v1::Query::Stub& stub, const CliConfig& config,
          grpc::Status (ncclwatch::v1::Query::Stub::*rpc)(grpc::ClientContext*, const Request&,
                                                         Response*),
          const Request& request, Response* response, grpc::Status* status) {
  grpc::ClientContext context;
  context.set_deadline(Deadline(config));
  Authorize(config, &context);
  response->Clear();
  *status = (stub.*rpc)(&context, request, response);
  return status->ok();
}

// "rank 3 (node node-a, GPU1)", plus ", pod ns/name, container c" when the agent found the rank's
// GPU in the kubelet's pod-resources answer (never outside Kubernetes).
std::string RankText(const ncclwatch::v1::RankRef& r) {
  std::string text =
      absl::StrFormat("rank %d (node %s, %s", r.rank(), r.node().empty() ? "unknown" : r.node(),
                      GpuLabel(r.cuda_device()));
  if (!r.pod().empty()) {
    absl::StrAppend(&text, ", pod ", r.pod_namespace().empty() ? "-" : r.pod_namespace(), "/",
                    r.pod());
    if (!r.container().empty()) absl::StrAppend(&text, ", container ", r.container());
  }
  return text + ")";
}

void PrintHangs(const ncclwatch::v1::ListHangsResponse& response) {
  if (response.hangs_size() == 0 && response.silent_size() == 0) {
    std::printf("No hung collective and no silent rank.\n");
    return;
  }
  if (response.hangs_size() > 0) {
    std::printf("%-20s %-28s %-14s %8s %-13s %9s %-9s %s\n", "JOB", "COMMUNICATOR", "COLLECTIVE",
                "SEQ", "KIND", "AGE", "SINCE", "MISSING RANKS");
  }
  for (const auto& h : response.hangs()) {
    std::string comm = absl::StrFormat("%s %s", h.comm_name().empty() ? "-" : h.comm_name(),
                                       CommHashText(h.comm_hash()));
    std::vector<std::string> missing;
    for (const auto& r : h.missing()) missing.push_back(absl::StrCat(r.rank()));
    const bool p2p = h.op() == aggregator::kP2pHangOp;
    const std::string seq = p2p ? "-" : absl::StrCat(h.seq());
    std::printf("%-20s %-28s %-14s %8s %-13s %7.1f s %-9s %s\n", h.job_id().c_str(),
                comm.c_str(), p2p ? "Send/Recv" : h.op().c_str(), seq.c_str(),
                h.kind() == ncclwatch::v1::HangInfo::NO_PROGRESS ? "no-progress" : "missing-ranks",
                h.age_seconds(), Clock(h.since_unix_ns()).c_str(),
                missing.empty() ? "-" : absl::StrJoin(missing, ",").c_str());
  }
  if (response.silent_size() > 0) {
    if (response.hangs_size() > 0) std::printf("\n");
    std::printf("%-20s %-28s %5s %-16s %-8s %-12s\n", "JOB", "COMMUNICATOR", "RANK", "NODE", "GPU",
                "LAST REPORT");
  }
  for (const auto& s : response.silent()) {
    std::string comm = absl::StrFormat("%s %s", s.comm_name().empty() ? "-" : s.comm_name(),
                                       CommHashText(s.comm_hash()));
    std::printf("%-20s %-28s %5d %-16s %-8s %-12s\n", s.job_id().c_str(), comm.c_str(),
                s.rank().rank(), s.rank().node().empty() ? "unknown" : s.rank().node().c_str(),
                GpuLabel(s.rank().cuda_device()).c_str(),
                Clock(s.last_report_unix_ns()).c_str());
  }
  std::printf("\n");
  for (const auto& h : response.hangs()) {
    std::string comm = h.comm_name().empty() ? CommHashText(h.comm_hash()) : h.comm_name();
    if (h.kind() == ncclwatch::v1::HangInfo::NO_PROGRESS) {
      std::printf(
          "Finding: %s of communicator %s in job %s has been stuck for %.1f s although all "
          "%u ranks reached it: suspect the network or NVLink fabric.\n",
          aggregator::HangOpText(h).c_str(), comm.c_str(),
          h.job_id().c_str(), h.age_seconds(), h.arrived());
      continue;
    }
    std::vector<std::string> missing;
    for (const auto& r : h.missing()) missing.push_back(RankText(r));
    std::printf(
        "Finding: %s of communicator %s in job %s has been stuck for %.1f s: %s never "
        "reached it.\n",
        aggregator::HangOpText(h).c_str(), comm.c_str(), h.job_id().c_str(),
        h.age_seconds(), absl::StrJoin(missing, ", ").c_str());
  }
  for (const auto& s : response.silent()) {
    std::printf("Finding: %s of communicator %s in job %s stopped reporting at %s while the "
                "other ranks carry on (process dead or stuck outside NCCL?).\n",
                RankText(s.rank()).c_str(),
                (s.comm_name().empty() ? CommHashText(s.comm_hash()) : s.comm_name())
                    .c_str(),
                s.job_id().c_str(), Clock(s.last_report_unix_ns()).c_str());
  }
}

void PrintDegraded(const ncclwatch::v1::ListDegradedResponse& response) {
  if (response.comms_size() == 0) {
    std::printf("No degraded communicator.\n");
    return;
  }
  std::printf("%-20s %-28s %-7s %-14s %-10s %9s %9s  %s\n", "JOB", "COMMUNICATOR", "CLASS",
              "COLLECTIVE", "SIZE", "BUS GB/s", "BASELINE", "NODES");
  for (const auto& d : response.comms()) {
    std::string comm = absl::StrFormat("%s %s", d.comm_name().empty() ? "-" : d.comm_name(),
                                       CommHashText(d.comm_hash()));
    std::printf("%-20s %-28s %-7s %-14s %-10s %9.1f %9.1f  %s\n", d.job_id().c_str(),
                comm.c_str(), d.comm_class().c_str(), d.op().c_str(), d.message_size().c_str(),
                d.bus_bw_gbs(), d.baseline_bus_bw_gbs(), absl::StrJoin(d.nodes(), ",").c_str());
  }
  std::printf("\n");
  for (const auto& s : response.suspects()) {
    std::printf("Finding: the network of node %s is the common factor of %u degraded hybrid "
                "communicators of job %s (its NVLink-only communicators are healthy): check its "
                "NICs, cables and switch ports.\n",
                s.node().c_str(), s.degraded_comms(), s.job_id().c_str());
  }
  if (response.suspects_size() == 0) {
    std::printf("Finding: %d communicator(s) degraded; the evidence does not single out a node "
                "yet.\n",
                response.comms_size());
  }
}

// stragglers, hangs and degraded: list what is flagged now (for --job, or every job); with
// --wait-s and nothing to show (`empty`), wait for the first START event of one of `kinds`, then
// list again; print as JSON or with `print`.
template <typename Request, typename Response, typename Empty, typename Print>
int ListCommand(ncclwatch::v1::Query::Stub& stub, const CliConfig& config,
                grpc::Status (ncclwatch::v1::Query::Stub::*rpc)(grpc::ClientContext*,
                                                               const Request&, Response*),
                std::initializer_list<ncclwatch::v1::Event::Kind> kinds, Empty empty,
                Print print) {
  Request request;
  request.set_job_id(config.job);
  Response response;
  grpc::Status status;
  auto list = [&] { return Call(stub, config, rpc, request, &response, &status); };
  auto wanted = [&](const ncclwatch::v1::Event& e) {
    return std::find(kinds.begin(), kinds.end(), e.kind()) != kinds.end() &&
           JobMatches(e, config);
  };
  if (!ListOrWait(stub, config, list, [&] { return empty(response); }, wanted)) {
    return Fail(RpcError(status, config));
  }
  if (config.json) {
    PrintJson(response);
  } else {
    print(response);
  }
  return 0;
}

int Stragglers(ncclwatch::v1::Query::Stub& stub, const CliConfig& config) {
  return ListCommand(
      stub, config, &ncclwatch::v1::Query::Stub::ListStragglers,
      {ncclwatch::v1::Event::STRAGGLER},
      [](const ncclwatch::v1::ListStragglersResponse& r) { return r.stragglers_size() == 0; },
      [](const ncclwatch::v1::ListStragglersResponse& r) {
        PrintStragglersTable({r.stragglers().begin(), r.stragglers().end()});
      });
}

int Hangs(ncclwatch::v1::Query::Stub& stub, const CliConfig& config) {
  return ListCommand(
      stub, config, &ncclwatch::v1::Query::Stub::ListHangs,
      {ncclwatch::v1::Event::HANG, ncclwatch::v1::Event::RANK_SILENT},
      [](const ncclwatch::v1::ListHangsResponse& r) {
        return r.hangs_size() == 0 && r.silent_size() == 0;
      },
      PrintHangs);
}

// --wait-s waits for the conclusion, a suspect node, not for the first degraded communicator.
int Degraded(ncclwatch::v1::Query::Stub& stub, const CliConfig& config) {
  return ListCommand(
      stub, config, &ncclwatch::v1::Query::Stub::ListDegraded,
      {ncclwatch::v1::Event::NODE_NETWORK_SUSPECT},
      [](const ncclwatch::v1::ListDegradedResponse& r) { return r.suspects_size() == 0; },
      PrintDegraded);
}

int Events(ncclwatch::v1::Query::Stub& stub, const CliConfig& config) {
  // With --follow the watch opens before the stored events are read, so nothing falls in between;
  // an event seen both ways is printed once.
  grpc::ClientContext watch_context;
  Authorize(config, &watch_context);
  std::unique_ptr<grpc::ClientReader<ncclwatch::v1::Event>> watch;
  if (config.follow) {
    if (config.wait_s > 0) {
      watch_context.set_deadline(
          std::chrono::system_clock::now() +
          std::chrono::milliseconds(static_cast<int64_t>(config.wait_s * 1000)));
    }
    watch = stub.Watch(&watch_context, ncclwatch::v1::WatchRequest());
    watch->WaitForInitialMetadata();
  }
  ncclwatch::v1::ListEventsRequest request;
  request.set_job_id(config.job);
  const int64_t now = absl::GetCurrentTimeNanos();
  request.set_since_unix_ns(
      static_cast<uint64_t>(std::max<int64_t>(0, now - static_cast<int64_t>(config.since_s * 1e9))));
  request.set_limit(static_cast<uint32_t>(std::clamp<int64_t>(config.limit, 1, 100000)));
  ncclwatch::v1::ListEventsResponse response;
  grpc::Status status;
  if (!Call(stub, config, &ncclwatch::v1::Query::Stub::ListEvents, request, &response, &status)) {
    return Fail(RpcError(status, config));
  }
  auto print = [&](const ncclwatch::v1::Event& e) {
    if (config.json) {
      PrintJson(e);
    } else {
      std::printf("%s  %s\n", Clock(e.time_unix_ns()).c_str(), e.summary().c_str());
    }
    std::fflush(stdout);
  };
  std::set<std::pair<uint64_t, std::string>> listed;
  if (config.json && !config.follow) {
    PrintJson(response);
  } else {
    for (const auto& e : response.events()) {
      print(e);
      listed.insert({e.time_unix_ns(), e.summary()});
    }
    if (response.events_size() == 0 && !config.json) {
      std::printf("No detection event in the last %.0f s.%s\n", config.since_s,
                  config.follow ? " Waiting for new ones (Ctrl-C to stop)." : "");
      std::fflush(stdout);
    }
  }
  if (!watch) return 0;
  ncclwatch::v1::Event e;
  while (watch->Read(&e)) {
    if (!JobMatches(e, config) || listed.count({e.time_unix_ns(), e.summary()})) continue;
    print(e);
  }
  grpc::Status end = watch->Finish();
  if (!end.ok() && end.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
    return Fail(RpcError(end, config));
  }
  return 0;
}

void PrintJobs(const ncclwatch::v1::ListJobsResponse& response) {
  if (response.jobs_size() == 0) {
    std::printf("No job has reported yet.\n");
    return;
  }
  std::printf("%-24s %5s %6s %6s %10s %5s %8s %6s  %s\n", "JOB", "COMMS", "RANKS", "NODES",
              "STRAGGLERS", "HUNG", "DEGRADED", "SILENT", "LAST REPORT");
  for (const auto& j : response.jobs()) {
    std::printf("%-24s %5u %6u %6d %10u %5u %8u %6u  %s\n", j.job_id().c_str(), j.communicators(),
                j.ranks(), j.nodes_size(), j.stragglers(), j.hung_communicators(),
                j.degraded_communicators(), j.silent_ranks(),
                Clock(j.last_report_unix_ns()).c_str());
  }
}

void PrintComms(const ncclwatch::v1::ListCommsResponse& response) {
  if (response.comms_size() == 0) {
    std::printf("No communicator has reported yet.\n");
    return;
  }
  std::printf("%-24s %-28s %-7s %6s %6s %-20s %s\n", "JOB", "COMMUNICATOR", "CLASS", "RANKS",
              "NODES", "HEALTH", "LAST REPORT");
  for (const auto& c : response.comms()) {
    std::string comm = absl::StrFormat("%s %s", c.comm_name().empty() ? "-" : c.comm_name(),
                                       CommHashText(c.comm_hash()));
    std::printf("%-24s %-28s %-7s %6d %6d %-20s %s\n", c.job_id().c_str(), comm.c_str(),
                c.comm_class().c_str(), c.nranks(), c.n_nodes(), c.health().c_str(),
                Clock(c.last_report_unix_ns()).c_str());
  }
}

template <typename Request, typename Response, typename Print>
int Show(ncclwatch::v1::Query::Stub& stub, const CliConfig& config,
         grpc::Status (ncclwatch::v1::Query::Stub::*rpc)(grpc::ClientContext*, const Request&,
                                                        Response*),
         const Request& request, Print print) {
  Response response;
  grpc::Status status;
  if (!Call(stub, config, rpc, request, &response, &status)) return Fail(RpcError(status, config));
  if (config.json) {
    PrintJson(response);
  } else {
    print(response);
  }
  return 0;
}

int Query(ncclwatch::v1::Query::Stub& stub, const CliConfig& config, const std::string& selector) {
  ncclwatch::v1::QueryRangeRequest request;
  request.set_selector(selector);
  const int64_t now_ms = absl::GetCurrentTimeNanos() / 1'000'000;
  request.set_start_unix_ms(
      static_cast<uint64_t>(std::max<int64_t>(0, now_ms - static_cast<int64_t>(config.since_s * 1e3))));
  request.set_end_unix_ms(static_cast<uint64_t>(now_ms));
  request.set_step_ms(static_cast<uint32_t>(std::clamp(config.step_s * 1e3, 0.0, 86400e3)));
  ncclwatch::v1::QueryRangeResponse response;
  grpc::Status status;
  if (!Call(stub, config, &ncclwatch::v1::Query::Stub::QueryRange, request, &response, &status)) {
    return Fail(RpcError(status, config));
  }
  if (config.json) {
    PrintJson(response);
    return 0;
  }
  if (response.series_size() == 0) {
    std::printf("No stored point matches %s in the last %.0f s.\n", selector.c_str(),
                config.since_s);
    return 0;
  }
  for (const auto& ts : response.series()) {
    std::vector<std::string> labels;
    for (const auto& l : ts.labels()) labels.push_back(absl::StrFormat("%s=\"%s\"", l.name(), l.value()));
    std::printf("%s{%s}  %d points\n", ts.name().c_str(), absl::StrJoin(labels, ",").c_str(),
                ts.points_size());
    for (const auto& p : ts.points()) {
      std::printf("  %s.%03lld  %g\n", Clock(static_cast<uint64_t>(p.time_ms()) * 1'000'000).c_str(),
                  static_cast<long long>(p.time_ms() % 1000), p.value());
    }
  }
  if (response.truncated()) {
    std::printf("(more series matched than were returned: narrow the selector)\n");
  }
  return 0;
}

// A JSON string literal.
std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// The Chrome trace-event JSON of a trace: one process (the communicator), one thread per rank,
// a complete ("X") event per sampled collective, times in microseconds from the earliest start.
std::string ChromeTrace(const ncclwatch::v1::GetTraceResponse& t) {
  int64_t origin = INT64_MAX;
  for (const auto& r : t.ranks()) {
    for (const auto& op : r.ops()) origin = std::min(origin, op.start_ns());
  }
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  absl::StrAppend(&out, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":",
                  JsonString(absl::StrFormat("job %s, communicator %s %s (%d ranks)", t.job_id(),
                                             t.comm_name(), CommHashText(t.comm_hash()),
                                             t.nranks())),
                  "}}");
  for (const auto& r : t.ranks()) {
    absl::StrAppend(
        &out, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":", r.rank(),
        ",\"args\":{\"name\":",
        JsonString(absl::StrFormat("rank %d  %s %s", r.rank(), r.node(),
                                   GpuLabel(r.cuda_device()))),
        "}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":", r.rank(),
        ",\"args\":{\"sort_index\":", r.rank(), "}}");
    for (const auto& op : r.ops()) {
      absl::StrAppend(&out, ",\n{\"name\":", JsonString(op.op()),
                      ",\"cat\":\"nccl\",\"ph\":\"X\",\"pid\":1,\"tid\":", r.rank(),
                      ",\"ts\":", absl::StrFormat("%.3f", (op.start_ns() - origin) / 1e3),
                      ",\"dur\":", absl::StrFormat("%.3f", op.duration_ns() / 1e3),
                      ",\"args\":{\"seq\":", op.seq(), "}}");
    }
  }
  return out + "\n]}\n";
}

int Trace(ncclwatch::v1::Query::Stub& stub, const CliConfig& config) {
  if (config.job.empty() || config.comm.empty()) {
    return Fail("trace needs --job and --comm (a communicator name such as world, or its 0x hash)");
  }
  ncclwatch::v1::GetTraceRequest request;
  request.set_job_id(config.job);
  request.set_comm(config.comm);
  const int64_t now_ms = absl::GetCurrentTimeNanos() / 1'000'000;
  request.set_start_unix_ms(
      static_cast<uint64_t>(std::max<int64_t>(0, now_ms - static_cast<int64_t>(config.since_s * 1e3))));
  request.set_end_unix_ms(static_cast<uint64_t>(now_ms));
  ncclwatch::v1::GetTraceResponse response;
  grpc::Status status;
  if (!Call(stub, config, &ncclwatch::v1::Query::Stub::GetTrace, request, &response, &status)) {
    return Fail(RpcError(status, config));
  }
  const std::string path = config.output.empty()
                               ? absl::StrFormat("trace-%s-%s.json", config.job, config.comm)
                               : config.output;
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return Fail(absl::StrFormat("cannot write %s: %s", path, std::strerror(errno)));
  const std::string json = ChromeTrace(response);
  const bool written = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  if (std::fclose(f) != 0 || !written) return Fail(absl::StrFormat("cannot write %s", path));
  size_t ops = 0;
  for (const auto& r : response.ranks()) ops += r.ops_size();
  std::printf("wrote %zu sampled collectives of %d ranks (communicator %s of job %s) to %s%s\n"
              "open it in https://ui.perfetto.dev or chrome://tracing\n",
              ops, response.ranks_size(), response.comm_name().c_str(), config.job.c_str(),
              path.c_str(), response.truncated() ? " (truncated: narrow --since-s)" : "");
  return 0;
}

int Main(int argc, char** argv) {
  CliConfig config;
  ConfigTable table("ncclwatch", kSummary);
  table.AddString("aggregator", "NCCLWATCH_AGGREGATOR", &config.aggregator,
                  "Aggregator gRPC address, host:port.");
  table.AddBool("json", "", &config.json, "Print JSON instead of a table.");
  table.AddString("job", "", &config.job, "Only this job id.");
  table.AddBool("follow", "", &config.follow,
                "events: keep printing new events as they happen (until Ctrl-C, or --wait-s).");
  table.AddString("comm", "", &config.comm, "trace: communicator name (e.g. world) or 0x hash.");
  table.AddString("output", "", &config.output,
                  "trace: output file (default trace-<job>-<comm>.json).");
  table.AddDouble("wait-s", "", &config.wait_s,
                  "If nothing is flagged yet, wait up to this long for the first finding.");
  table.AddDouble("timeout-s", "", &config.timeout_s, "Deadline of each request.");
  table.AddDouble("since-s", "", &config.since_s,
                  "events, query: how far back to look, in seconds.");
  table.AddDouble("step-s", "", &config.step_s,
                  "query: one value per step (the latest within 5 min); 0 = every stored point.");
  table.AddInt("limit", "", &config.limit, "events: at most this many, oldest first.");
  table.AddBool("tls", "NCCLWATCH_TLS", &config.tls,
                "Talk TLS to the aggregator (implied by any of the files below).");
  table.AddString("ca-file", "NCCLWATCH_CA_FILE", &config.ca_file,
                  "PEM roots that sign the aggregator's certificate; empty: the system's.");
  table.AddString("cert-file", "NCCLWATCH_CERT_FILE", &config.cert_file,
                  "PEM client certificate, for an aggregator that requires one (mutual TLS).");
  table.AddString("key-file", "NCCLWATCH_KEY_FILE", &config.key_file,
                  "PEM private key of --cert-file.");
  table.AddString("token-file", "NCCLWATCH_TOKEN_FILE", &config.token_file,
                  "File holding the bearer token of an aggregator run with --query-token-file.");
  table.AddString("server-name", "", &config.server_name,
                  "Name to verify in the aggregator's certificate; empty: the host of --aggregator.");
  auto positional = table.Parse(argc, argv);
  if (!positional.ok()) return Fail(std::string(positional.status().message()));
  if (table.help_requested() || positional->empty()) {
    std::fputs(table.HelpText(kUsage).c_str(), table.help_requested() ? stdout : stderr);
    return table.help_requested() ? 0 : 2;
  }
  const std::string& command = (*positional)[0];
  auto credentials = MakeChannelCredentials(
      ClientTls::FromFlags(config.tls, config.ca_file, config.cert_file, config.key_file));
  auto token = TokenFile::Open(config.token_file);
  if (!token.ok()) return Fail(std::string(token.status().message()));
  if (*token != nullptr) config.token = (*token)->Get();
  if (!credentials.ok()) return Fail(std::string(credentials.status().message()));
  grpc::ChannelArguments args;
  if (!config.server_name.empty()) args.SetSslTargetNameOverride(config.server_name);
  // A range query may answer with up to 5,000,000 points, well over gRPC's default 4 MiB.
  args.SetMaxReceiveMessageSize(256 << 20);
  auto stub = ncclwatch::v1::Query::NewStub(
      grpc::CreateCustomChannel(config.aggregator, *credentials, args));
  if (command == "stragglers") return Stragglers(*stub, config);
  if (command == "hangs") return Hangs(*stub, config);
  if (command == "degraded") return Degraded(*stub, config);
  if (command == "events") return Events(*stub, config);
  if (command == "trace") return Trace(*stub, config);
  if (command == "jobs") {
    return Show(*stub, config, &ncclwatch::v1::Query::Stub::ListJobs,
                ncclwatch::v1::ListJobsRequest(), PrintJobs);
  }
  if (command == "comms") {
    ncclwatch::v1::ListCommsRequest request;
    request.set_job_id(config.job);
    return Show(*stub, config, &ncclwatch::v1::Query::Stub::ListComms, request, PrintComms);
  }
  if (command == "query") {
    if (positional->size() != 2) return Fail("query needs one selector argument (see --help)");
    return Query(*stub, config, (*positional)[1]);
  }
  std::fprintf(stderr, "ncclwatch: unknown command '%s' (see ncclwatch --help)\n",
               command.c_str());
  return 2;
}

}  // namespace
}  // namespace ncclwatch::cli

int main(int argc, char** argv) { return ncclwatch::cli::Main(argc, argv); }

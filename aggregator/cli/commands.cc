#include "aggregator/cli/commands.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "aggregator/cli/chrome_trace.h"
#include "aggregator/cli/json.h"
#include "aggregator/cli/tables.h"
#include "aggregator/findings/findings.h"
#include "common/rpc/backoff.h"
#include "common/rpc/shard_metadata.h"

namespace ncclwatch::cli {
namespace {

using ncclwatch::v1::Event;

// A unary method of the Query API, e.g. &QueryStub::ListStragglers.
template <typename Request, typename Response>
using UnaryRpc = grpc::Status (QueryStub::*)(grpc::ClientContext*, const Request&, Response*);

void Write(const Console& console, const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), console.out);
}

// One JSON document per line.
void WriteJson(const Console& console, const google::protobuf::Message& message) {
  Write(console, ProtoJson(message) + "\n");
}

void Authorize(const CommandConfig& config, grpc::ClientContext* context) {
  if (!config.token.empty()) context->AddMetadata("authorization", "Bearer " + config.token);
}

std::chrono::system_clock::time_point After(double seconds) {
  return std::chrono::system_clock::now() +
         std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

bool JobMatches(const Event& e, const CommandConfig& config) {
  return config.job.empty() || aggregator::EventJobId(e) == config.job;
}

// One unary call with the configured deadline, into a cleared `response`; the status is kept in
// `*status` for the error message.
// A sharded service's answer about every job that some aggregator could not add to says so on
// stderr.
template <typename Request, typename Response>
bool Call(QueryStub& stub, const CommandConfig& config, const Console& console,
          UnaryRpc<Request, Response> rpc, const Request& request, Response* response,
          grpc::Status* status) {
  grpc::ClientContext context;
  // Waiting for a finding also waits for the aggregator to come up (started a moment ago, or
  // restarting), not failing at once on a refused connection.
  const bool wait = config.wait_s > 0;
  context.set_wait_for_ready(wait);
  context.set_deadline(After(wait ? std::max(config.timeout_s, config.wait_s) : config.timeout_s));
  Authorize(config, &context);
  response->Clear();
  *status = (stub.*rpc)(&context, request, response);
  const auto& trailers = context.GetServerTrailingMetadata();
  if (auto it = trailers.find(kUnreachableTrailer); it != trailers.end()) {
    std::fprintf(console.err,
                 "ncclwatch: warning: aggregator(s) %.*s did not answer: their jobs are missing "
                 "from this answer\n",
                 static_cast<int>(it->second.size()), it->second.data());
  }
  return status->ok();
}

// With --job: whether the aggregator knows the job (running, or ended and still listed). An
// unknown one fails (exit 1) naming the known ones; while waiting for findings (--wait-s) or
// following events, the job may simply not have started yet: a note on stderr, and on.
std::optional<int> CheckJob(QueryStub& stub, const CommandConfig& config, const Console& console,
                            bool may_start_later) {
  if (config.job.empty()) return std::nullopt;
  ncclwatch::v1::ListJobsResponse jobs;
  grpc::Status status;
  if (!Call(stub, config, console, &QueryStub::ListJobs, ncclwatch::v1::ListJobsRequest(), &jobs,
            &status)) {
    return Fail(console, RpcError(status, config.aggregator));
  }
  std::vector<std::string> known;
  for (const auto& j : jobs.jobs()) {
    if (j.job_id() == config.job) {
      if (j.state() == "ended") {
        // Its findings ended with it: say so, or an empty answer reads as "it was healthy".
        std::fprintf(console.err,
                     "ncclwatch: job '%s' ended at %s (%s); its findings ended with it: "
                     "`ncclwatch events --job %s` lists them, `ncclwatch comms --job %s` shows "
                     "its communicators as they last were\n",
                     config.job.c_str(), ClockText(j.ended_unix_ns()).c_str(),
                     j.end_reason().c_str(), config.job.c_str(), config.job.c_str());
      }
      return std::nullopt;
    }
    if (known.size() < 10) known.push_back(j.job_id());
  }
  const std::string list =
      known.empty() ? "it knows no job yet"
                    : absl::StrCat("it knows ", absl::StrJoin(known, ", "),
                                   jobs.jobs_size() > 10 ? ", ... (ncclwatch jobs)" : "");
  if (may_start_later) {
    std::fprintf(console.err, "ncclwatch: job '%s' has not reported yet (%s); waiting for it\n",
                 config.job.c_str(), list.c_str());
    return std::nullopt;
  }
  return Fail(console, absl::StrFormat("no job '%s' at the aggregator at %s: %s", config.job,
                                       config.aggregator, list));
}

// Lists with `list` (a unary call filling its response; false on error). With --wait-s and an
// empty answer, waits for the first START event `wanted` accepts, then lists again. The watch is
// opened before the first list, so that nothing flagged in between is missed.
template <typename List, typename Empty, typename Wanted>
bool ListOrWait(QueryStub& stub, const CommandConfig& config, List list, Empty empty, Wanted wanted,
                const Console& console) {
  grpc::ClientContext watch_context;
  Authorize(config, &watch_context);
  std::unique_ptr<grpc::ClientReaderInterface<Event>> watch;
  if (config.wait_s > 0) {
    watch_context.set_deadline(After(config.wait_s));
    watch_context.set_wait_for_ready(true);  // an aggregator still starting is waited for
    watch = stub.Watch(&watch_context, ncclwatch::v1::WatchRequest());
    watch->WaitForInitialMetadata();
  }
  bool ok = list();
  if (ok && watch && empty()) {
    // Progress on stderr, so that a person knows it waits and a script's stdout stays clean.
    std::fprintf(console.err,
                 "ncclwatch: nothing flagged yet; waiting up to %.0f s for a finding\n",
                 config.wait_s);
    std::fflush(console.err);
    Event event;
    bool found = false;
    while (!found && watch->Read(&event)) {
      found = event.phase() == Event::START && wanted(event);
    }
    ok = list();
  }
  if (watch) {
    watch_context.TryCancel();
    watch->Finish();
  }
  return ok;
}

// stragglers, hangs and degraded: list what is flagged now (for --job, or every job); with
// --wait-s and nothing to show (`empty`), wait for the first START event of one of `kinds`, then
// list again; write it as JSON or as `text` renders it.
template <typename Request, typename Response, typename Empty>
int ListCommand(QueryStub& stub, const CommandConfig& config, const Console& console,
                UnaryRpc<Request, Response> rpc, std::initializer_list<Event::Kind> kinds,
                Empty empty, std::string (*text)(const Response&)) {
  if (auto failed = CheckJob(stub, config, console, config.wait_s > 0)) return *failed;
  Request request;
  request.set_job_id(config.job);
  Response response;
  grpc::Status status;
  auto list = [&] { return Call(stub, config, console, rpc, request, &response, &status); };
  auto wanted = [&](const Event& e) {
    return std::find(kinds.begin(), kinds.end(), e.kind()) != kinds.end() && JobMatches(e, config);
  };
  if (!ListOrWait(
          stub, config, list, [&] { return empty(response); }, wanted, console)) {
    return Fail(console, RpcError(status, config.aggregator));
  }
  if (config.json) {
    WriteJson(console, response);
  } else {
    Write(console, text(response));
  }
  return empty(response) ? kExitNothingFound : kExitFindings;
}

// jobs and comms: one call, written as JSON or as `text` renders it.
template <typename Request, typename Response>
int Show(QueryStub& stub, const CommandConfig& config, const Console& console,
         UnaryRpc<Request, Response> rpc, const Request& request,
         std::string (*text)(const Response&)) {
  Response response;
  grpc::Status status;
  if (!Call(stub, config, console, rpc, request, &response, &status)) {
    return Fail(console, RpcError(status, config.aggregator));
  }
  if (config.json) {
    WriteJson(console, response);
  } else {
    Write(console, text(response));
  }
  return 0;
}

// [now - since_s, now] in Unix milliseconds, clamped at 0, as QueryRange and GetTrace take it.
std::pair<uint64_t, uint64_t> LastMs(double since_s) {
  const int64_t now_ms = absl::GetCurrentTimeNanos() / 1'000'000;
  return {static_cast<uint64_t>(std::max<int64_t>(0, now_ms - static_cast<int64_t>(since_s * 1e3))),
          static_cast<uint64_t>(now_ms)};
}

}  // namespace

int Fail(const Console& console, const std::string& message) {
  std::fprintf(console.err, "ncclwatch: %s\n", message.c_str());
  return 1;
}

std::string RpcError(const grpc::Status& status, const std::string& aggregator) {
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
      status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::StrFormat(
        "cannot reach the aggregator at %s (%s). Is ncclwatch-aggregator running there? "
        "Use --aggregator HOST:PORT or NCCLWATCH_AGGREGATOR.",
        aggregator, status.error_message());
  }
  return absl::StrFormat("aggregator at %s answered: %s", aggregator, status.error_message());
}

int Stragglers(QueryStub& stub, const CommandConfig& config, const Console& console) {
  return ListCommand(
      stub, config, console, &QueryStub::ListStragglers, {Event::STRAGGLER, Event::NODE_STRAGGLER},
      [](const ncclwatch::v1::ListStragglersResponse& r) {
        return r.stragglers_size() == 0 && r.root_causes_size() == 0 && r.slow_nodes_size() == 0;
      },
      &StragglersText);
}

int Hangs(QueryStub& stub, const CommandConfig& config, const Console& console) {
  return ListCommand(
      stub, config, console, &QueryStub::ListHangs, {Event::HANG, Event::RANK_SILENT},
      [](const ncclwatch::v1::ListHangsResponse& r) {
        return r.hangs_size() == 0 && r.silent_size() == 0;
      },
      &HangsText);
}

int Degraded(QueryStub& stub, const CommandConfig& config, const Console& console) {
  return ListCommand(
      stub, config, console, &QueryStub::ListDegraded,
      {Event::COMM_DEGRADED, Event::NODE_NETWORK_SUSPECT},
      // A degraded communicator is a finding by itself: a job with one hybrid communicator (plain
      // DDP or FSDP) never has a suspect node to add to it.
      [](const ncclwatch::v1::ListDegradedResponse& r) {
        return r.comms_size() == 0 && r.suspects_size() == 0;
      },
      &DegradedText);
}

int Jobs(QueryStub& stub, const CommandConfig& config, const Console& console) {
  return Show(stub, config, console, &QueryStub::ListJobs, ncclwatch::v1::ListJobsRequest(),
              &JobsText);
}

int Comms(QueryStub& stub, const CommandConfig& config, const Console& console) {
  if (auto failed = CheckJob(stub, config, console, false)) return *failed;
  ncclwatch::v1::ListCommsRequest request;
  request.set_job_id(config.job);
  return Show(stub, config, console, &QueryStub::ListComms, request, &CommsText);
}

int Events(QueryStub& stub, const CommandConfig& config, const Console& console) {
  if (auto failed = CheckJob(stub, config, console, config.follow)) return *failed;
  const bool forever = config.wait_s <= 0;
  const auto deadline = After(config.wait_s);
  // With --follow the watch opens before the stored events are read, so nothing falls in between.
  auto watch_context = std::make_unique<grpc::ClientContext>();
  std::unique_ptr<grpc::ClientReaderInterface<Event>> watch;
  const auto open_watch = [&] {
    watch_context = std::make_unique<grpc::ClientContext>();
    Authorize(config, watch_context.get());
    if (!forever) watch_context->set_deadline(deadline);
    watch = stub.Watch(watch_context.get(), ncclwatch::v1::WatchRequest());
    watch->WaitForInitialMetadata();  // returns at once when the aggregator is not there
  };
  if (config.follow) open_watch();
  // Flushed event by event: a script reading a --follow pipe sees each as it happens.
  std::set<std::pair<uint64_t, std::string>> printed;
  uint64_t newest_ns = 0;
  const auto print = [&](const Event& e) {
    if (!printed.insert({e.time_unix_ns(), e.summary()}).second) return;
    newest_ns = std::max<uint64_t>(newest_ns, e.time_unix_ns());
    Write(console, config.json ? ProtoJson(e) + "\n" : EventLine(e));
    std::fflush(console.out);
  };
  ncclwatch::v1::ListEventsRequest request;
  request.set_job_id(config.job);
  const int64_t now = absl::GetCurrentTimeNanos();
  request.set_since_unix_ns(static_cast<uint64_t>(
      std::max<int64_t>(0, now - static_cast<int64_t>(config.since_s * 1e9))));
  request.set_limit(static_cast<uint32_t>(std::clamp<int64_t>(config.limit, 1, 100000)));
  ncclwatch::v1::ListEventsResponse response;
  grpc::Status status;
  if (!Call(stub, config, console, &QueryStub::ListEvents, request, &response, &status)) {
    return Fail(console, RpcError(status, config.aggregator));
  }
  if (config.json && !config.follow) {
    WriteJson(console, response);
  } else {
    for (const auto& e : response.events()) print(e);
    if (response.events_size() == 0 && !config.json) {
      Write(console, NoEventsText(config.since_s, config.follow));
      std::fflush(console.out);
    }
  }
  if (!response.next_page_token().empty()) {
    std::fprintf(console.err,
                 "ncclwatch: showing the oldest %d events of the last %.0f s; more are stored "
                 "(raise --limit or lower --since-s)\n",
                 response.events_size(), config.since_s);
  }
  if (!watch) return 0;
  // Until --wait-s (or for ever): a stream the aggregator ends by going away (a restart) is
  // opened again, and what was stored meanwhile is listed, each event printed once.
  bool reconnecting = false;
  for (Backoff backoff(std::chrono::milliseconds(200), std::chrono::milliseconds(5000));;) {
    Event e;
    while (watch->Read(&e)) {
      if (JobMatches(e, config)) print(e);
    }
    const grpc::Status end = watch->Finish();
    const bool gone = end.error_code() == grpc::StatusCode::UNAVAILABLE ||
                      end.error_code() == grpc::StatusCode::CANCELLED;
    // gRPC's timer may end the stream a hair before the system clock reaches the deadline, so a
    // DEADLINE_EXCEEDED under --wait-s is the end of the wait whatever the clock says; a stream
    // lost once the wait is over needs no reconnecting. Any other error is said, however late.
    const bool waited = !forever && (end.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                                     (gone && std::chrono::system_clock::now() >= deadline));
    if (end.ok() || waited) return 0;
    if (!gone) return Fail(console, RpcError(end, config.aggregator));
    if (!reconnecting) {
      std::fprintf(console.err, "ncclwatch: lost the aggregator at %s (%s); reconnecting\n",
                   config.aggregator.c_str(), end.error_message().c_str());
      std::fflush(console.err);
      reconnecting = true;
    }
    std::this_thread::sleep_for(backoff.NextDelay());  // a retry's pacing
    open_watch();
    request.set_since_unix_ns(newest_ns);
    if (!Call(stub, config, console, &QueryStub::ListEvents, request, &response, &status)) continue;
    std::fprintf(console.err, "ncclwatch: reconnected to the aggregator at %s\n",
                 config.aggregator.c_str());
    std::fflush(console.err);
    reconnecting = false;
    backoff.Reset();
    for (const auto& stored : response.events()) print(stored);
  }
}

int Query(QueryStub& stub, const CommandConfig& config, const std::string& selector,
          const Console& console) {
  ncclwatch::v1::QueryRangeRequest request;
  request.set_selector(selector);
  const auto [start_ms, end_ms] = LastMs(config.since_s);
  request.set_start_unix_ms(start_ms);
  request.set_end_unix_ms(end_ms);
  request.set_step_ms(static_cast<uint32_t>(std::clamp(config.step_s * 1e3, 0.0, 86400e3)));
  ncclwatch::v1::QueryRangeResponse response;
  grpc::Status status;
  if (!Call(stub, config, console, &QueryStub::QueryRange, request, &response, &status)) {
    return Fail(console, RpcError(status, config.aggregator));
  }
  if (config.json) {
    WriteJson(console, response);
  } else {
    Write(console, QueryText(response, selector, config.since_s));
  }
  return 0;
}

int Trace(QueryStub& stub, const CommandConfig& config, const Console& console) {
  if (config.job.empty() || config.comm.empty()) {
    return Fail(console,
                "trace needs --job and --comm (a communicator name such as world, or its 0x hash)");
  }
  if (auto failed = CheckJob(stub, config, console, false)) return *failed;
  ncclwatch::v1::GetTraceRequest request;
  request.set_job_id(config.job);
  request.set_comm(config.comm);
  const auto [start_ms, end_ms] = LastMs(config.since_s);
  request.set_start_unix_ms(start_ms);
  request.set_end_unix_ms(end_ms);
  ncclwatch::v1::GetTraceResponse response;
  grpc::Status status;
  if (!Call(stub, config, console, &QueryStub::GetTrace, request, &response, &status)) {
    return Fail(console, RpcError(status, config.aggregator));
  }
  const std::string json = ChromeTrace(response);
  if (config.output == "-") {  // the trace itself on stdout, e.g. for a pipe
    Write(console, json);
    return 0;
  }
  const std::string path = config.output.empty()
                               ? absl::StrFormat("trace-%s-%s.json", config.job, config.comm)
                               : config.output;
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return Fail(console, absl::StrFormat("cannot write %s: %s", path, std::strerror(errno)));
  }
  const bool written = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  if (std::fclose(f) != 0 || !written)
    return Fail(console, absl::StrFormat("cannot write %s", path));
  Write(console, TraceWrittenText(response, config.job, path));
  return 0;
}

const std::vector<CommandSpec>& Commands() {
  using S = QueryStub;
  using C = CommandConfig;
  using A = std::string;
  static const auto* const commands = new std::vector<CommandSpec>{
      {"jobs", "", "", "jobs that have reported: communicators, ranks, nodes, current findings",
       "json", "ncclwatch jobs --aggregator aggregator.ncclwatch:9470",
       [](S& s, const C& c, const A&, const Console& o) { return Jobs(s, c, o); }},
      {"comms", "", "", "communicators (of --job) with class, size and health", "job json",
       "ncclwatch comms --job 12345",
       [](S& s, const C& c, const A&, const Console& o) { return Comms(s, c, o); }},
      {"stragglers", "", "", "ranks currently flagged as slow, with the node and GPU they run on",
       "job wait-s json",
       "ncclwatch stragglers --job 12345 --wait-s 60   # exit 3 once one is found",
       [](S& s, const C& c, const A&, const Console& o) { return Stragglers(s, c, o); }},
      {"hangs", "", "",
       "collectives that stopped making progress, the ranks that never reached\n"
       "them, and ranks that went silent",
       "job wait-s json", "ncclwatch hangs --job 12345",
       [](S& s, const C& c, const A&, const Console& o) { return Hangs(s, c, o); }},
      {"degraded", "", "",
       "communicators whose bandwidth fell below the baseline of their kind, and\n"
       "the nodes whose network is suspected (--wait-s ends on the first of either)",
       "job wait-s json", "ncclwatch degraded --job 12345 --json",
       [](S& s, const C& c, const A&, const Console& o) { return Degraded(s, c, o); }},
      {"events", "", "",
       "the detection events stored by the aggregator (every start and end); --json\n"
       "prints one JSON document, and with --follow one event per line (NDJSON)",
       "job since-s limit follow wait-s json",
       "ncclwatch events --job 12345 --since-s 600 --follow",
       [](S& s, const C& c, const A&, const Console& o) { return Events(s, c, o); }},
      {"query", "SEL", "selector",
       "stored points of the series matching a Prometheus selector, e.g.\n"
       "'nccl_bus_bandwidth_gbs{job_id=\"j\",rank=\"5\"}' (--since-s, --step-s)",
       "since-s step-s json",
       "ncclwatch query 'nccl_bus_bandwidth_gbs{job_id=\"12345\"}' --since-s 300 --step-s 30",
       [](S& s, const C& c, const A& selector, const Console& o) {
         return Query(s, c, selector, o);
       }},
      {"trace", "", "",
       "a Chrome/Perfetto trace (JSON) of the sampled collectives of communicator\n"
       "--comm of --job over the last --since-s seconds, one track per rank, GPU\n"
       "clocks aligned on collective ends; open it in ui.perfetto.dev",
       "job comm since-s output", "ncclwatch trace --job 12345 --comm world --since-s 60",
       [](S& s, const C& c, const A&, const Console& o) { return Trace(s, c, o); }},
  };
  return *commands;
}

std::string CommandsHelp() {
  constexpr size_t kColumn = 13;  // the help text starts two spaces plus this far in
  std::string out = "Commands:\n";
  for (const CommandSpec& c : Commands()) {
    std::string head(c.name);
    if (!c.argument.empty()) head.append(" ").append(c.argument);
    out.append("  ").append(head).append(kColumn > head.size() ? kColumn - head.size() : 1, ' ');
    // Each line of its help; the second and later ones under the first.
    for (size_t start = 0; start <= c.help.size();) {
      const size_t end = std::min(c.help.find('\n', start), c.help.size());
      if (start > 0) out.append(kColumn + 2, ' ');
      out.append(c.help.substr(start, end - start)).append("\n");
      start = end + 1;
    }
  }
  return out;
}

const CommandSpec* FindCommand(std::string_view name) {
  for (const CommandSpec& c : Commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

int RunCommand(QueryStub& stub, const CommandConfig& config, const std::vector<std::string>& words,
               const Console& console) {
  const std::string& name = words.empty() ? std::string() : words[0];
  const CommandSpec* c = FindCommand(name);
  if (c == nullptr) {
    Fail(console, absl::StrFormat("unknown command '%s' (see ncclwatch --help)", name));
    return kExitUsage;
  }
  const size_t want = c->argument.empty() ? 1 : 2;
  if (words.size() != want) {
    Fail(console, c->argument.empty() ? absl::StrFormat("%s takes no argument (see --help)", name)
                                      : absl::StrFormat("%s needs one %s argument (see --help)",
                                                        name, c->argument_what));
    return kExitUsage;
  }
  return c->run(stub, config, want == 2 ? words[1] : std::string(), console);
}

}  // namespace ncclwatch::cli

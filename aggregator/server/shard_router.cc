#include "aggregator/server/shard_router.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "aggregator/query/selector.h"
#include "common/log.h"
#include "common/rendezvous.h"

namespace ncclwatch::aggregator {

grpc::Status ToGrpcStatus(const absl::Status& s) {
  // absl's and gRPC's canonical codes have the same numbers (0..16).
  const int code = static_cast<int>(s.code());
  return grpc::Status(
      code >= 0 && code <= 16 ? static_cast<grpc::StatusCode>(code) : grpc::StatusCode::INTERNAL,
      std::string(s.message()));
}

ncclwatch::v1::ListJobsResponse MergeJobs(std::vector<ncclwatch::v1::ListJobsResponse> answers) {
  // A job that moved to another aggregator is known to both: the old one saw it end.
  std::map<std::string, ncclwatch::v1::JobInfo> jobs;
  for (auto& answer : answers) {
    for (auto& job : *answer.mutable_jobs()) {
      auto [it, inserted] = jobs.try_emplace(job.job_id(), job);
      if (inserted) continue;
      const bool running = job.state() == "running";
      const bool kept_running = it->second.state() == "running";
      if ((running && !kept_running) ||
          (running == kept_running &&
           job.last_report_unix_ns() > it->second.last_report_unix_ns())) {
        it->second = std::move(job);
      }
    }
  }
  ncclwatch::v1::ListJobsResponse out;
  for (auto& [id, job] : jobs) *out.add_jobs() = std::move(job);
  return out;
}

namespace {

constexpr char kCursorPrefix[] = "shards:";

// One aggregator's event cursor: "<time_ns>.<events at that time already returned>", or "" for
// the request's since_unix_ns (QueryEngine::ListEvents).
struct Cursor {
  uint64_t time = 0;
  uint64_t seen = 0;
  bool set = false;
};

std::optional<Cursor> ParseCursor(absl::string_view text) {
  if (text.empty()) return Cursor{};
  const size_t dot = text.find('.');
  Cursor c;
  c.set = true;
  if (dot == absl::string_view::npos || !absl::SimpleAtoi(text.substr(0, dot), &c.time) ||
      !absl::SimpleAtoi(text.substr(dot + 1), &c.seen)) {
    return std::nullopt;
  }
  return c;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseEventCursors(std::string_view token, size_t peers) {
  std::vector<std::string> cursors(peers);
  if (token.empty()) return cursors;
  if (token.substr(0, sizeof kCursorPrefix - 1) != kCursorPrefix) {
    return absl::InvalidArgumentError(
        "malformed page_token (not one of this sharded service's: start again without it)");
  }
  std::vector<std::string> parts =
      absl::StrSplit(absl::string_view(token.data(), token.size()).substr(sizeof kCursorPrefix - 1),
                     absl::ByChar(';'));
  if (parts.size() != peers) {
    return absl::InvalidArgumentError(absl::StrCat("page_token was made for ", parts.size(),
                                                   " aggregators, the service has ", peers,
                                                   ": start again without it"));
  }
  for (const std::string& part : parts) {
    if (!ParseCursor(part)) return absl::InvalidArgumentError("malformed page_token");
  }
  return parts;
}

ncclwatch::v1::ListEventsResponse MergeEvents(
    std::vector<ncclwatch::v1::ListEventsResponse> answers, const std::vector<std::string>& cursors,
    uint32_t limit) {
  const size_t want = limit == 0 ? 1000 : std::min<size_t>(limit, 100000);
  const size_t n = answers.size();
  std::vector<int> taken(n, 0);
  ncclwatch::v1::ListEventsResponse out;
  // k-way merge by time; equal times go to the lower peer first (any fixed order will do).
  while (static_cast<size_t>(out.events_size()) < want) {
    int best = -1;
    for (size_t i = 0; i < n; ++i) {
      if (taken[i] >= answers[i].events_size()) continue;
      if (best < 0 || answers[i].events(taken[i]).time_unix_ns() <
                          answers[best].events(taken[best]).time_unix_ns()) {
        best = static_cast<int>(i);
      }
    }
    if (best < 0) return out;  // every answer used up: the end of every log
    // Copied, not moved: the cursors below read the times of what was taken.
    *out.add_events() = answers[best].events(taken[best]++);
  }
  bool more = false;
  for (size_t i = 0; i < n; ++i) more |= taken[i] < answers[i].events_size();
  more |= std::any_of(answers.begin(), answers.end(),
                      [](const auto& a) { return !a.next_page_token().empty(); });
  if (!more) return out;
  // Each peer's cursor after the events taken from it.
  std::vector<std::string> next(n);
  for (size_t i = 0; i < n; ++i) {
    if (taken[i] == 0) {
      next[i] = cursors[i];
      continue;
    }
    const std::optional<Cursor> from = ParseCursor(cursors[i]);
    const uint64_t last = answers[i].events(taken[i] - 1).time_unix_ns();
    uint64_t seen = 0;
    for (int k = taken[i] - 1; k >= 0 && answers[i].events(k).time_unix_ns() == last; --k) ++seen;
    if (from && from->set && from->time == last) seen += from->seen;
    next[i] = absl::StrCat(last, ".", seen);
  }
  out.set_next_page_token(absl::StrCat(kCursorPrefix, absl::StrJoin(next, ";")));
  return out;
}

absl::StatusOr<SeriesPage> ParseSeriesPage(std::string_view token, size_t peers) {
  if (token.empty()) return SeriesPage{};
  const std::string_view prefix(kCursorPrefix);
  const size_t semicolon = token.find(';');
  SeriesPage page;
  if (token.substr(0, prefix.size()) != prefix || semicolon == std::string_view::npos ||
      !absl::SimpleAtoi(absl::string_view(token.data() + prefix.size(), semicolon - prefix.size()),
                        &page.peer) ||
      page.peer >= peers) {
    return absl::InvalidArgumentError(
        "malformed page_token (not one of this sharded service's: start again without it)");
  }
  page.token = std::string(token.substr(semicolon + 1));
  return page;
}

std::string SeriesPageToken(size_t peer, std::string_view token) {
  return absl::StrCat(kCursorPrefix, peer, ";", absl::string_view(token.data(), token.size()));
}

std::string SelectorJob(std::string_view selector) {
  absl::StatusOr<Selector> parsed = ParseSelector(selector);
  if (!parsed.ok()) return "";
  for (const LabelMatcher& m : parsed->matchers) {
    if (m.name == "job_id" && m.op == LabelMatcher::Op::kEq) return m.value;
  }
  return "";
}

absl::StatusOr<std::unique_ptr<ShardRouter>> ShardRouter::Create(ShardOptions options,
                                                                 MetricRegistry& metrics) {
  absl::StatusOr<std::vector<ShardMember>> members =
      ParseShardMembers(options.peers, "--shard-peers");
  if (!members.ok()) return members.status();
  std::vector<std::string> names;
  size_t self = options.peers.size();
  for (size_t i = 0; i < members->size(); ++i) {
    names.push_back((*members)[i].name);
    if (names.back() == options.self || options.peers[i] == options.self) self = i;
  }
  if (self == options.peers.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shard-self=", options.self, " is not in --shard-peers (",
        absl::StrJoin(options.peers, ","),
        "): name this aggregator exactly as the list and the agents' --aggregator do"));
  }
  auto credentials =
      options.credentials != nullptr ? options.credentials : grpc::InsecureChannelCredentials();
  constexpr const char* kHelp =
      "Query calls this aggregator forwarded to a peer of its --shard-peers, by result (ok: "
      "answered, whatever its status; unreachable: unavailable or timed out).";
  std::vector<Peer> peers;
  for (size_t i = 0; i < options.peers.size(); ++i) {
    Peer p;
    if (i != self) {
      grpc::ChannelArguments args;
      // A relay's Watch stream may stay idle for hours: ping it, so that a peer that vanished
      // (no RST) is noticed, and keep pinging without data (the peers allow every 20 s).
      args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
      args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
      // A forwarded answer about a large job is large: ListComms of a 16,384-rank job lists some
      // 85,000 ranks (3-4 MiB, above gRPC's default 4 MiB limit at about 20,000 ranks). As the
      // CLI does.
      args.SetMaxReceiveMessageSize(256 << 20);
      p.stub = ncclwatch::v1::Query::NewStub(
          grpc::CreateCustomChannel((*members)[i].address, credentials, args));
    }
    p.ok = metrics.GetCounter("ncclwatch_aggregator_shard_calls_total", kHelp,
                              {{"peer", names[i]}, {"result", "ok"}});
    p.failed = metrics.GetCounter("ncclwatch_aggregator_shard_calls_total", kHelp,
                                  {{"peer", names[i]}, {"result", "unreachable"}});
    peers.push_back(std::move(p));
  }
  return std::unique_ptr<ShardRouter>(
      new ShardRouter(std::move(options), std::move(names), self, std::move(peers)));
}

bool ShardRouter::Forwarded(const grpc::ServerContextBase& context) {
  return context.client_metadata().count(kShardHopHeader) > 0;
}

size_t ShardRouter::Owner(std::string_view job) const { return RendezvousOwner(job, names_); }

std::unique_ptr<grpc::ClientContext> ShardRouter::Forward(
    const grpc::ServerContextBase& from) const {
  auto client = std::make_unique<grpc::ClientContext>();
  const auto& metadata = from.client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    client->AddMetadata("authorization", std::string(it->second.data(), it->second.size()));
  }
  client->AddMetadata(kShardHopHeader, "1");
  // A peer that just restarted (a rolling update) is reconnected to within the deadline rather
  // than reported unreachable at once; one that stays down costs the call its timeout.
  client->set_wait_for_ready(true);
  client->set_deadline(std::min(from.deadline(), std::chrono::system_clock::now() +
                                                     absl::ToChronoNanoseconds(options_.timeout)));
  return client;
}

void ShardRouter::StartRelay(EventBus& local, TokenFile* token) {
  local_ = &local;
  local_relay_ = std::make_unique<LocalRelay>(fleet_);
  local.Add(local_relay_.get());
  {
    ncclwatch::MutexLock lock(&relay_mu_);
    streams_.assign(peers_.size(), nullptr);
  }
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (i != self_) relays_.emplace_back([this, i, token] { RelayPeer(i, token); });
  }
}

void ShardRouter::StopRelay() {
  {
    ncclwatch::MutexLock lock(&relay_mu_);
    if (stopping_) return;
    stopping_ = true;
    for (grpc::ClientContext* stream : streams_) {
      if (stream != nullptr) stream->TryCancel();
    }
  }
  for (std::thread& t : relays_) t.join();
  if (local_ != nullptr) local_->Remove(local_relay_.get());
}

void ShardRouter::RelayPeer(size_t peer, TokenFile* token) {
  bool connected_before = false;
  for (;;) {
    grpc::ClientContext context;
    context.AddMetadata(kShardHopHeader, "1");
    if (token != nullptr) context.AddMetadata("authorization", "Bearer " + token->Get());
    {
      ncclwatch::MutexLock lock(&relay_mu_);
      if (stopping_) return;
      streams_[peer] = &context;
    }
    auto reader = peers_[peer].stub->Watch(&context, ncclwatch::v1::WatchRequest());
    bool got_metadata = false;
    ncclwatch::v1::Event event;
    while (reader->Read(&event)) {
      got_metadata = true;
      fleet_.Publish(event);
    }
    const grpc::Status status = reader->Finish();
    ncclwatch::MutexLock lock(&relay_mu_);
    streams_[peer] = nullptr;
    if (stopping_) return;
    if (connected_before || got_metadata) {
      LogWarning("event relay from aggregator %s ended (%s); reconnecting", names_[peer],
                 status.error_message());
    }
    connected_before = got_metadata;
    // Retry in a second, or stop at once.
    relay_mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Seconds(1));
    if (stopping_) return;
  }
}

grpc::Status ShardRouter::Settle(size_t peer, const grpc::Status& status) const {
  // Unavailable, or not reached within the deadline (the call waits for a connection).
  const bool reached = status.error_code() != grpc::StatusCode::UNAVAILABLE &&
                       status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED;
  (reached ? peers_[peer].ok : peers_[peer].failed)->Increment();
  if (reached) return status;
  return grpc::Status(
      grpc::StatusCode::UNAVAILABLE,
      absl::StrCat("aggregator ", names_[peer], " is unreachable: ", status.error_message()));
}

}  // namespace ncclwatch::aggregator

#include "aggregator/server/remote_write.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "aggregator/store/store_keys.h"
#include "httplib.h"
#include "snappy.h"

namespace ncclwatch::aggregator {

absl::StatusOr<RemoteWriteTarget> ParseRemoteWriteUrl(const std::string& url) {
  constexpr std::string_view kHttp = "http://";
  if (url.rfind("https://", 0) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--remote-write-url=", url,
                     ": https is not supported yet; use http:// (e.g. through a "
                     "local proxy or the receiver's in-cluster service)"));
  }
  if (url.rfind(kHttp, 0) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--remote-write-url=", url, ": expected http://host[:port]/path"));
  }
  const std::string rest = url.substr(kHttp.size());
  const size_t slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  RemoteWriteTarget t;
  t.path = slash == std::string::npos ? "/" : rest.substr(slash);
  const size_t colon = authority.rfind(':');
  t.host = authority.substr(0, colon);
  t.port = 80;
  if (colon != std::string::npos &&
      (!absl::SimpleAtoi(authority.substr(colon + 1), &t.port) || t.port <= 0 || t.port > 65535)) {
    return absl::InvalidArgumentError(absl::StrCat("--remote-write-url=", url, ": bad port"));
  }
  if (t.host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--remote-write-url=", url, ": no host"));
  }
  return t;
}

std::vector<PendingSeries> NewSamples(const std::vector<SeriesPoint>& samples,
                                      const std::map<std::string, int64_t>& last_sent) {
  std::vector<PendingSeries> out;
  for (const SeriesPoint& s : samples) {
    std::string identity = SeriesIdentity(s.name, s.labels);
    auto it = last_sent.find(identity);
    if (it != last_sent.end() && it->second >= s.time_ms) continue;
    PendingSeries p;
    p.identity = std::move(identity);
    LabelPairs labels = s.labels;
    labels.emplace_back("__name__", s.name);
    std::sort(labels.begin(), labels.end());
    for (const auto& [k, v] : labels) {
      auto* l = p.series.add_labels();
      l->set_name(k);
      l->set_value(v);
    }
    auto* sample = p.series.add_samples();
    sample->set_value(s.value);
    sample->set_timestamp(s.time_ms);
    out.push_back(std::move(p));
  }
  return out;
}

RemoteWriter::RemoteWriter(RemoteWriteTarget target, MetricRegistry& m)
    : target_(std::move(target)),
      samples_(m.GetCounter("ncclwatch_aggregator_remote_write_samples_total",
                            "Samples delivered by remote-write.")),
      requests_(m.GetCounter("ncclwatch_aggregator_remote_write_requests_total",
                             "Remote-write requests that succeeded.")),
      failures_(m.GetCounter("ncclwatch_aggregator_remote_write_failures_total",
                             "Remote-write requests that failed (retried next interval).")) {}

absl::Status RemoteWriter::Post(const ncclwatch::remotewrite::WriteRequest& request) {
  std::string raw;
  if (!request.SerializeToString(&raw)) return absl::InternalError("cannot serialise");
  std::string body;
  snappy::Compress(raw.data(), raw.size(), &body);
  httplib::Client client(target_.host, target_.port);
  client.set_connection_timeout(5);
  client.set_read_timeout(10);
  httplib::Headers headers = {{"Content-Encoding", "snappy"},
                              {"X-Prometheus-Remote-Write-Version", "0.1.0"},
                              {"User-Agent", "ncclwatch-aggregator"}};
  auto res = client.Post(target_.path, headers, body, "application/x-protobuf");
  if (!res) {
    return absl::UnavailableError(absl::StrCat("remote-write to ", target_.host, ":", target_.port,
                                               target_.path, ": ",
                                               httplib::to_string(res.error())));
  }
  if (res->status / 100 != 2) {
    return absl::UnavailableError(absl::StrCat("remote-write to ", target_.host, ":", target_.port,
                                               target_.path, ": HTTP ", res->status, " ",
                                               res->body.substr(0, 200)));
  }
  return absl::OkStatus();
}

absl::Status RemoteWriter::Send(const std::vector<SeriesPoint>& samples) {
  std::vector<PendingSeries> pending = NewSamples(samples, last_sent_);
  for (size_t begin = 0; begin < pending.size(); begin += kMaxSeriesPerRequest) {
    const size_t end = std::min(pending.size(), begin + kMaxSeriesPerRequest);
    ncclwatch::remotewrite::WriteRequest request;
    for (size_t i = begin; i < end; ++i) *request.add_timeseries() = pending[i].series;
    if (absl::Status s = Post(request); !s.ok()) {
      failures_->Increment();
      return s;
    }
    requests_->Increment();
    samples_->Increment(end - begin);
    for (size_t i = begin; i < end; ++i) {
      last_sent_[pending[i].identity] = pending[i].series.samples(0).timestamp();
    }
  }
  return absl::OkStatus();
}

}  // namespace ncclwatch::aggregator

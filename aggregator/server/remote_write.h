// Prometheus remote-write of the exported series (--remote-write-url), for people who keep
// long-term data in Mimir, Thanos, VictoriaMetrics or Prometheus itself.
//
// Every interval, the series whose sample timestamp moved since they were last sent are sent once
// (labels sorted, __name__ included), at most kMaxSeriesPerRequest per request, snappy-compressed,
// over HTTP POST. A series counts as sent only once its request succeeded, so after a failure it
// goes out again at the next interval, with whatever value is newest then. Counted on /metrics as
// ncclwatch_aggregator_remote_write_{samples,requests,failures}_total.
#ifndef NCCLWATCH_AGGREGATOR_SERVER_REMOTE_WRITE_H_
#define NCCLWATCH_AGGREGATOR_SERVER_REMOTE_WRITE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "aggregator/analysis/analyzer.h"
#include "common/metrics.h"
#include "ncclwatch/v1/remote_write.pb.h"

namespace ncclwatch::aggregator {

struct RemoteWriteTarget {
  std::string host;
  int port = 0;
  std::string path;  // e.g. /api/v1/write
};

// Parses http://host[:port]/path. https is refused with a clear message (no TLS client here yet).
absl::StatusOr<RemoteWriteTarget> ParseRemoteWriteUrl(const std::string& url);

// One series to send, and its identity (for the bookkeeping of what was sent).
struct PendingSeries {
  std::string identity;
  ncclwatch::remotewrite::TimeSeries series;
};

// The samples newer than what `last_sent` records (series identity -> timestamp ms), as
// remote-write series with sorted labels. Pure; the unit tests call it directly.
std::vector<PendingSeries> NewSamples(const std::vector<SeriesPoint>& samples,
                                      const std::map<std::string, int64_t>& last_sent);

class RemoteWriter {
 public:
  static constexpr int kMaxSeriesPerRequest = 5000;

  RemoteWriter(RemoteWriteTarget target, MetricRegistry& metrics);
  // Sends what is new in `samples`; returns the first failure (the rest of the round is skipped).
  absl::Status Send(const std::vector<SeriesPoint>& samples);

 private:
  absl::Status Post(const ncclwatch::remotewrite::WriteRequest& request);

  const RemoteWriteTarget target_;
  std::map<std::string, int64_t> last_sent_;
  Counter* samples_;
  Counter* requests_;
  Counter* failures_;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_SERVER_REMOTE_WRITE_H_

#include "aggregator/cli/chrome_trace.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "aggregator/cli/json.h"
#include "proto/inspector.h"

namespace ncclwatch::cli {

std::string ChromeTrace(const ncclwatch::v1::GetTraceResponse& t) {
  int64_t origin = INT64_MAX;
  for (const auto& r : t.ranks()) {
    for (const auto& op : r.ops()) origin = std::min(origin, op.start_ns());
  }
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  absl::StrAppend(
      &out, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":",
      JsonString(absl::StrFormat("job %s, communicator %s %s (%d ranks)", t.job_id(), t.comm_name(),
                                 CommHashText(t.comm_hash()), t.nranks())),
      "}}");
  for (const auto& r : t.ranks()) {
    absl::StrAppend(&out, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":", r.rank(),
                    ",\"args\":{\"name\":",
                    JsonString(absl::StrFormat("rank %d  %s %s", r.rank(), r.node(),
                                               GpuLabel(r.cuda_device()))),
                    "}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":",
                    r.rank(), ",\"args\":{\"sort_index\":", r.rank(), "}}");
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

}  // namespace ncclwatch::cli

// Fuzz target: a /federate series selector (`match[]`), as any HTTP client may send it. Parsing
// either fails with a message or yields a selector that is then matched against a fixed set of
// samples and rendered; nothing may crash, hang or recurse without bound.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "aggregator/query/federate.h"
#include "aggregator/query/selector.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace ncclwatch::aggregator;
using ncclwatch::SeriesPoint;

const std::vector<SeriesPoint>& Samples() {
  static const std::vector<SeriesPoint> samples = {
      {"ncclwatch_straggler_score", {{"job", "llm-7b"}, {"comm", "c0"}, {"rank", "3"}}, 2.5, 1000},
      {"ncclwatch_hang_active", {{"job", "llm-7b"}, {"comm", "c0"}}, 1, 1000},
      {"nccl_bus_bandwidth_gbs", {{"job", "a\"b\\c\nd"}, {"rank", ""}}, 1e300, 1000},
      {"up", {}, 0, 0},
  };
  return samples;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<Selector> selector = ParseSelector(text);
  if (!selector.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(selector.status()));
    FUZZ_CHECK(!selector.status().message().empty());
    return 0;
  }
  FUZZ_CHECK(!selector->matchers.empty());
  const std::string out = RenderFederate(Samples(), {*selector});
  size_t matched = 0;
  for (const SeriesPoint& s : Samples()) matched += selector->Matches(s) ? 1 : 0;
  // Every matching sample is one line of the rendering; nothing else is a sample line.
  size_t lines = 0;
  for (size_t at = 0; (at = out.find('\n', at)) != std::string::npos; ++at) {
    if (at + 1 < out.size() && out[at + 1] != '#') ++lines;
  }
  if (!out.empty() && out[0] != '#') ++lines;
  FUZZ_CHECK(lines == matched);
  return 0;
}

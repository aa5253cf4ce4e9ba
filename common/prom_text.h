// Prometheus text exposition format 0.0.4: escaping, number formatting and a writer that groups
// samples under their # HELP / # TYPE lines. Used by /metrics and /federate.
#ifndef NCCLWATCH_COMMON_PROM_TEXT_H_
#define NCCLWATCH_COMMON_PROM_TEXT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ncclwatch {

using LabelPairs = std::vector<std::pair<std::string, std::string>>;

// Escapes a label value: backslash, double quote and newline.
std::string EscapeLabelValue(std::string_view value);
// Shortest text that reads back as the same double; "NaN", "+Inf", "-Inf" as Prometheus spells
// them.
std::string FormatPromValue(double value);

class PromTextWriter {
 public:
  // Starts a family; `type` is "counter", "gauge", "untyped", ... ; empty help/type omit the line.
  void Family(std::string_view name, std::string_view help, std::string_view type);
  // One sample line. timestamp_ms < 0 writes no timestamp.
  void Sample(std::string_view name, const LabelPairs& labels, double value,
              int64_t timestamp_ms = -1);
  // Sample lines rendered before (by another writer), as they are.
  void Append(std::string_view lines) { out_.append(lines); }
  const std::string& text() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_PROM_TEXT_H_

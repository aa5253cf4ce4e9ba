#include "common/prom_text.h"

#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace ncclwatch {

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string FormatPromValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, result.ptr);
}

void PromTextWriter::Family(std::string_view name, std::string_view help, std::string_view type) {
  if (!help.empty()) absl::StrAppend(&out_, "# HELP ", Av(name), " ", Av(help), "\n");
  if (!type.empty()) absl::StrAppend(&out_, "# TYPE ", Av(name), " ", Av(type), "\n");
}

void PromTextWriter::Sample(std::string_view name, const LabelPairs& labels, double value,
                            int64_t timestamp_ms) {
  out_.append(name);
  if (!labels.empty()) {
    out_ += '{';
    bool first = true;
    for (const auto& [label, label_value] : labels) {
      if (!first) out_ += ',';
      first = false;
      absl::StrAppend(&out_, label, "=\"", EscapeLabelValue(label_value), "\"");
    }
    out_ += '}';
  }
  absl::StrAppend(&out_, " ", FormatPromValue(value));
  if (timestamp_ms >= 0) absl::StrAppend(&out_, " ", timestamp_ms);
  out_ += '\n';
}

}  // namespace ncclwatch

#include "common/prom_text.h"

#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace ncclwatch {

namespace {

// EscapeLabelValue, appended to `out` (most values have nothing to escape: one append).
void AppendEscaped(std::string& out, std::string_view value) {
  for (size_t at = value.find_first_of("\\\"\n"); at != std::string_view::npos;
       at = value.find_first_of("\\\"\n")) {
    out.append(value.substr(0, at));
    out += value[at] == '\n' ? "\\n" : value[at] == '"' ? "\\\"" : "\\\\";
    value.remove_prefix(at + 1);
  }
  out.append(value);
}

// FormatPromValue, appended to `out`.
void AppendValue(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "NaN";
  } else if (std::isinf(value)) {
    out += value > 0 ? "+Inf" : "-Inf";
  } else {
    char buf[64];
    auto result = std::to_chars(buf, buf + sizeof(buf), value);
    out.append(buf, result.ptr);
  }
}

}  // namespace

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  AppendEscaped(out, value);
  return out;
}

std::string FormatPromValue(double value) {
  std::string out;
  AppendValue(out, value);
  return out;
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
      out_.append(label);
      out_ += "=\"";
      AppendEscaped(out_, label_value);
      out_ += '"';
    }
    out_ += '}';
  }
  out_ += ' ';
  AppendValue(out_, value);
  if (timestamp_ms >= 0) absl::StrAppend(&out_, " ", timestamp_ms);
  out_ += '\n';
}

}  // namespace ncclwatch

#include "common/config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/build_info.h"
#include "common/log.h"
#include "common/strings.h"

namespace ncclwatch {

bool Range::Contains(double v) const {
  return (min_open ? v > min : v >= min) && (max_open ? v < max : v <= max);
}

namespace {

// 262144 rather than 262144.0 or 2.62144e+05; a duration in its unit ("1m").
std::string BoundText(double v, bool duration) {
  if (duration) return DurationText(absl::Seconds(v));
  if (v == std::floor(v) && std::abs(v) < 1e15) return absl::StrCat(static_cast<int64_t>(v));
  return absl::StrCat(v);
}

}  // namespace

std::string Range::Text(bool duration) const {
  const bool has_min = min != -kNone;
  const bool has_max = max != kNone;
  if (has_min && has_max) {
    return absl::StrCat("in ", min_open ? "(" : "[", BoundText(min, duration), ", ",
                        BoundText(max, duration), max_open ? ")" : "]");
  }
  if (has_min) {
    if (min == 0 && min_open) return "positive";
    return absl::StrCat(min_open ? "above " : "at least ", BoundText(min, duration));
  }
  if (has_max) return absl::StrCat(max_open ? "below " : "at most ", BoundText(max, duration));
  return "any number";
}

absl::StatusOr<absl::Duration> ParseDurationText(std::string_view text) {
  const std::string copy(text);
  char* end = nullptr;
  const double v = std::strtod(copy.c_str(), &end);
  const std::string_view unit(end);
  double unit_s = 0;
  if (unit.empty() || unit == "s") {
    unit_s = 1;
  } else if (unit == "m") {
    unit_s = 60;
  } else if (unit == "h") {
    unit_s = 3600;
  } else if (unit == "d") {
    unit_s = 86400;
  }
  if (end == copy.c_str() || unit_s == 0 || !std::isfinite(v)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "'%s' is not a duration (a number with s, m, h or d, e.g. 15d, 36h, 90m)", Av(text)));
  }
  return absl::Seconds(v * unit_s);
}

std::string DurationText(absl::Duration d) {
  const std::pair<absl::Duration, const char*> units[] = {
      {absl::Hours(24), "d"}, {absl::Hours(1), "h"}, {absl::Minutes(1), "m"}};
  if (d != absl::ZeroDuration()) {
    for (const auto& [unit, suffix] : units) {
      absl::Duration rest;
      const int64_t n = absl::IDivDuration(d, unit, &rest);
      if (rest == absl::ZeroDuration()) return absl::StrCat(n, suffix);
    }
  }
  return absl::StrCat(absl::ToDoubleSeconds(d), "s");
}

ConfigTable::ConfigTable(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

ConfigTable::EnvLookup ConfigTable::DefaultEnv() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

void ConfigTable::Add(std::string_view flag, std::string_view env, Target target,
                      std::string_view help, Range range) {
  entries_.push_back(Entry{std::string(flag), std::string(env), std::string(help),
                           ValueText(target), target, range});
}

void ConfigTable::AddString(std::string_view flag, std::string_view env, std::string* target,
                            std::string_view help) {
  Add(flag, env, target, help);
}
void ConfigTable::AddInt(std::string_view flag, std::string_view env, int64_t* target,
                         std::string_view help, Range range) {
  Add(flag, env, target, help, range);
}
void ConfigTable::AddDouble(std::string_view flag, std::string_view env, double* target,
                            std::string_view help, Range range) {
  Add(flag, env, target, help, range);
}
void ConfigTable::AddDuration(std::string_view flag, std::string_view env, absl::Duration* target,
                              std::string_view help, Range range) {
  Add(flag, env, target, help, range);
}
void ConfigTable::AddBool(std::string_view flag, std::string_view env, bool* target,
                          std::string_view help) {
  Add(flag, env, target, help);
}

std::string ConfigTable::ValueText(const Target& target) {
  struct Visitor {
    std::string operator()(std::string* v) const { return *v; }
    std::string operator()(int64_t* v) const { return absl::StrCat(*v); }
    std::string operator()(double* v) const { return absl::StrCat(*v); }
    std::string operator()(bool* v) const { return *v ? "true" : "false"; }
    std::string operator()(absl::Duration* v) const { return DurationText(*v); }
  };
  return std::visit(Visitor{}, target);
}

absl::Status ConfigTable::Assign(const Entry& entry, std::string_view value,
                                 std::string_view source, std::vector<std::string>* clamped) {
  auto invalid = [&](std::string_view expected) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: '%s' is not %s", Av(source), Av(value), Av(expected)));
  };
  // A number read: within its range, or the nearest bound where the caller takes warnings (only
  // a closed bound can be taken; only ParseEnv asks, so the warning names the variable); an
  // error otherwise.
  auto in_range = [&](double v, double* used) -> absl::Status {
    *used = v;
    const Range& r = entry.range;
    if (r.Contains(v)) return absl::OkStatus();
    const bool duration = std::holds_alternative<absl::Duration*>(entry.target);
    const double bound = v < r.min ? r.min : r.max;
    if (clamped != nullptr && (v < r.min ? !r.min_open : !r.max_open)) {
      *used = bound;
      clamped->push_back(absl::StrFormat(
          "%s=%s is outside [%s, %s]%s; using %s",
          entry.env.empty() ? "--" + entry.flag : entry.env, Av(value), BoundText(r.min, duration),
          BoundText(r.max, duration), r.why, BoundText(bound, duration)));
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrFormat("%s must be %s%s, not %s", Av(source), r.Text(duration), r.why, Av(value)));
  };
  double used = 0;
  if (auto* s = std::get_if<std::string*>(&entry.target)) {
    **s = std::string(value);
  } else if (auto* i = std::get_if<int64_t*>(&entry.target)) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(Av(value), &v)) return invalid("an integer");
    if (absl::Status s = in_range(static_cast<double>(v), &used); !s.ok()) return s;
    **i = used == static_cast<double>(v) ? v : static_cast<int64_t>(used);
  } else if (auto* d = std::get_if<double*>(&entry.target)) {
    double v = 0;
    if (!absl::SimpleAtod(Av(value), &v) || !std::isfinite(v)) return invalid("a number");
    if (absl::Status s = in_range(v, &used); !s.ok()) return s;
    **d = used;
  } else if (auto* t = std::get_if<absl::Duration*>(&entry.target)) {
    absl::StatusOr<absl::Duration> v = ParseDurationText(value);
    if (!v.ok())
      return absl::InvalidArgumentError(absl::StrCat(Av(source), ": ", v.status().message()));
    if (absl::Status s = in_range(absl::ToDoubleSeconds(*v), &used); !s.ok()) return s;
    **t = used == absl::ToDoubleSeconds(*v) ? *v : absl::Seconds(used);
  } else if (auto* b = std::get_if<bool*>(&entry.target)) {
    std::string lower = absl::AsciiStrToLower(Av(value));
    if (lower == "1" || lower == "true" || lower == "yes" || lower == "on") {
      **b = true;
    } else if (lower == "0" || lower == "false" || lower == "no" || lower == "off") {
      **b = false;
    } else {
      return invalid("a boolean (true/false/1/0)");
    }
  }
  return absl::OkStatus();
}

const ConfigTable::Entry* ConfigTable::FindFlag(std::string_view name) const {
  for (const Entry& e : entries_) {
    if (!e.flag.empty() && e.flag == name) return &e;
  }
  return nullptr;
}

absl::Status ConfigTable::ParseEnv(const EnvLookup& env, std::vector<std::string>* clamped) {
  for (const Entry& e : entries_) {
    if (e.env.empty()) continue;
    const char* value = env(e.env.c_str());
    if (value == nullptr) continue;
    absl::Status status = Assign(e, value, absl::StrCat("environment variable ", e.env), clamped);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

std::string ConfigTable::NearestFlag(std::string_view name) const {
  // Edit distance (insertions, deletions, substitutions, and swapping two neighbours: "jbo" is one
  // edit from "job"), over three rows.
  auto distance = [](std::string_view a, std::string_view b) {
    std::vector<size_t> before(b.size() + 1), last(b.size() + 1), row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) last[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        row[j] =
            std::min({last[j] + 1, row[j - 1] + 1, last[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
        if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
          row[j] = std::min(row[j], before[j - 2] + 1);
        }
      }
      before.swap(last);
      last.swap(row);
    }
    return last[b.size()];
  };
  std::string best;
  size_t best_distance = std::max<size_t>(2, name.size() / 4) + 1;  // close: a typo or two
  for (const Entry& e : entries_) {
    if (e.flag.empty()) continue;
    const size_t d = distance(name, e.flag);
    if (d < best_distance) {
      best_distance = d;
      best = e.flag;
    }
  }
  return best;
}

absl::StatusOr<std::vector<std::string>> ConfigTable::Parse(int argc, const char* const* argv,
                                                            const EnvLookup& env) {
  absl::Status status = ParseEnv(env);
  if (!status.ok()) return status;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      continue;
    }
    if (arg == "--version") {
      version_requested_ = true;
      continue;
    }
    if (arg == "--") {
      for (++i; i < argc; ++i) positional.emplace_back(argv[i]);
      break;
    }
    if (!absl::ConsumePrefix(&arg, "--")) {
      // "-job": a flag with one dash, not a word (a lone "-" is a word: stdout, stdin).
      if (arg.size() > 1 && arg[0] == '-' && absl::ascii_isalpha(arg[1])) {
        const absl::string_view name = arg.substr(1, arg.find('=') - 1);
        return absl::InvalidArgumentError(
            absl::StrFormat("unknown flag %s: flags take two dashes%s (see %s --help)", arg,
                            FindFlag(std::string_view(name.data(), name.size())) != nullptr
                                ? absl::StrCat(", did you mean --", name, "?")
                                : "",
                            program_));
      }
      positional.emplace_back(arg);
      continue;
    }
    absl::string_view name = arg;
    std::optional<absl::string_view> value;
    if (size_t eq = arg.find('='); eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    const Entry* entry = FindFlag(std::string_view(name.data(), name.size()));
    bool negated = false;
    if (entry == nullptr && absl::StartsWith(name, "no-") && !value) {
      entry = FindFlag(std::string_view(name.data() + 3, name.size() - 3));
      negated = entry != nullptr && std::holds_alternative<bool*>(entry->target);
      if (!negated) entry = nullptr;
    }
    if (entry == nullptr) {
      const std::string near = NearestFlag(std::string_view(name.data(), name.size()));
      return absl::InvalidArgumentError(absl::StrFormat(
          "unknown flag --%s%s (see %s --help)", name,
          near.empty() ? "" : absl::StrCat(", did you mean --", near, "?"), program_));
    }
    if (std::holds_alternative<bool*>(entry->target) && !value) {
      *std::get<bool*>(entry->target) = !negated;
      continue;
    }
    if (!value) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(absl::StrFormat("flag --%s needs a value", name));
      }
      value = argv[++i];
    }
    status = Assign(*entry, std::string_view(value->data(), value->size()),
                    absl::StrCat("flag --", name));
    if (!status.ok()) return status;
  }
  return positional;
}

std::optional<int> ConfigTable::ParseDaemonCommandLine(int argc, const char* const* argv) {
  AddString("log-level", "NCCLWATCH_LOG_LEVEL", &log_level_,
            "Least severe log lines written to stderr: debug, info, warning or error.");
  AddString("log-format", "NCCLWATCH_LOG_FORMAT", &log_format_,
            "Log lines as text, or json: one object a line with time, level, component and "
            "message (for Loki, Elasticsearch).");
  auto positional = Parse(argc, argv);
  if (!positional.ok()) {
    std::fprintf(stderr, "%s: %s\n", program_.c_str(),
                 std::string(positional.status().message()).c_str());
    return 2;
  }
  if (help_requested_) {
    std::fputs(HelpText().c_str(), stdout);
    return 0;
  }
  if (version_requested_) {
    std::printf("%s\n", VersionText(program_).c_str());
    return 0;
  }
  if (!positional->empty()) {
    std::fprintf(stderr, "%s: unexpected argument '%s' (see %s --help)\n", program_.c_str(),
                 (*positional)[0].c_str(), program_.c_str());
    return 2;
  }
  LogSeverity severity;
  if (!ParseLogSeverity(log_level_, &severity)) {
    std::fprintf(stderr,
                 "%s: --log-level (or NCCLWATCH_LOG_LEVEL) is '%s': expected debug, info, "
                 "warning or error\n",
                 program_.c_str(), log_level_.c_str());
    return 2;
  }
  SetMinLogSeverity(severity);
  LogFormat format;
  if (!ParseLogFormat(log_format_, &format)) {
    std::fprintf(stderr,
                 "%s: --log-format (or NCCLWATCH_LOG_FORMAT) is '%s': expected text or json\n",
                 program_.c_str(), log_format_.c_str());
    return 2;
  }
  SetLogFormat(format);
  return std::nullopt;
}

std::string ConfigTable::HelpText(std::string_view usage_args) const {
  return HelpText(usage_args, summary_, {});
}

std::string ConfigTable::HelpText(std::string_view usage_args, std::string_view summary,
                                  const std::vector<std::string>& only) const {
  std::string out = absl::StrFormat("Usage: %s %s\n\n%s\n\n", program_, Av(usage_args), summary);
  size_t width = 0;
  std::vector<std::string> names;
  std::vector<const Entry*> shown;
  for (const Entry& e : entries_) {
    if (!only.empty() && std::find(only.begin(), only.end(), e.flag) == only.end()) continue;
    shown.push_back(&e);
  }
  for (const Entry* entry : shown) {
    const Entry& e = *entry;
    std::string name;
    if (!e.flag.empty()) name = absl::StrCat("--", e.flag);
    if (!e.env.empty())
      name += name.empty() ? absl::StrCat("$", e.env) : absl::StrCat("  $", e.env);
    width = std::max(width, name.size());
    names.push_back(std::move(name));
  }
  width = std::max(width, std::string("--version").size());
  for (size_t i = 0; i < shown.size(); ++i) {
    const Entry& e = *shown[i];
    absl::StrAppendFormat(&out, "  %-*s  %s", static_cast<int>(width), names[i], e.help);
    absl::StrAppendFormat(&out, " (default: %s)\n",
                          e.default_text.empty() ? "\"\"" : e.default_text);
  }
  absl::StrAppendFormat(&out, "  %-*s  %s\n", static_cast<int>(width), "--help",
                        "Print this help and exit.");
  absl::StrAppendFormat(&out, "  %-*s  %s\n", static_cast<int>(width), "--version",
                        "Print the version and git revision and exit.");
  return out;
}

std::string ConfigTable::Describe() const {
  std::vector<std::string> parts;
  for (const Entry& e : entries_) {
    parts.push_back(absl::StrCat(e.flag.empty() ? e.env : e.flag, "=", ValueText(e.target)));
  }
  return absl::StrJoin(parts, " ");
}

}  // namespace ncclwatch

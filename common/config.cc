#include "common/config.h"

#include <algorithm>
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
ConfigTable::ConfigTable(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

ConfigTable::EnvLookup ConfigTable::DefaultEnv() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

void ConfigTable::Add(std::string_view flag, std::string_view env, Target target,
                      std::string_view help) {
  entries_.push_back(
      Entry{std::string(flag), std::string(env), std::string(help), ValueText(target), target});
}

void ConfigTable::AddString(std::string_view flag, std::string_view env, std::string* target,
                            std::string_view help) {
  Add(flag, env, target, help);
}
void ConfigTable::AddInt(std::string_view flag, std::string_view env, int64_t* target,
                         std::string_view help) {
  Add(flag, env, target, help);
}
void ConfigTable::AddDouble(std::string_view flag, std::string_view env, double* target,
                            std::string_view help) {
  Add(flag, env, target, help);
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
  };
  return std::visit(Visitor{}, target);
}

absl::Status ConfigTable::Assign(const Entry& entry, std::string_view value,
                                 std::string_view source) {
  auto invalid = [&](std::string_view expected) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: '%s' is not %s", Av(source), Av(value), Av(expected)));
  };
  if (auto* s = std::get_if<std::string*>(&entry.target)) {
    **s = std::string(value);
  } else if (auto* i = std::get_if<int64_t*>(&entry.target)) {
    if (!absl::SimpleAtoi(Av(value), *i)) return invalid("an integer");
  } else if (auto* d = std::get_if<double*>(&entry.target)) {
    if (!absl::SimpleAtod(Av(value), *d)) return invalid("a number");
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

absl::Status ConfigTable::ParseEnv(const EnvLookup& env) {
  for (const Entry& e : entries_) {
    if (e.env.empty()) continue;
    const char* value = env(e.env.c_str());
    if (value == nullptr) continue;
    absl::Status status = Assign(e, value, absl::StrCat("environment variable ", e.env));
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
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
      return absl::InvalidArgumentError(
          absl::StrFormat("unknown flag --%s (see %s --help)", name, program_));
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
  return std::nullopt;
}

std::string ConfigTable::HelpText(std::string_view usage_args) const {
  std::string out = absl::StrFormat("Usage: %s %s\n\n%s\n\n", program_, Av(usage_args), summary_);
  size_t width = 0;
  std::vector<std::string> names;
  for (const Entry& e : entries_) {
    std::string name;
    if (!e.flag.empty()) name = absl::StrCat("--", e.flag);
    if (!e.env.empty())
      name += name.empty() ? absl::StrCat("$", e.env) : absl::StrCat("  $", e.env);
    width = std::max(width, name.size());
    names.push_back(std::move(name));
  }
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
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

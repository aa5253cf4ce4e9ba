// One configuration table per binary: every flag and environment variable with its default and
// meaning, parsed once, printed by --help and logged at start-up.
//
//   ConfigTable table("ncclwatch-agent", "Node agent: ...");
//   table.AddString("listen", "NCCLWATCH_AGENT_LISTEN", &config.listen, "Where plugins connect.");
//   auto parsed = table.Parse(argc, argv);   // environment first, then flags (flags win)
//
// A flag is written --name=value or --name value; a bool flag also as --name / --no-name.
// An entry may have a flag, an environment variable, or both. Not thread-safe; use at start-up.
#ifndef NCCLWATCH_COMMON_CONFIG_H_
#define NCCLWATCH_COMMON_CONFIG_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ncclwatch {

// The values a number (or a duration, in seconds) may take. A value outside is refused with an
// error naming the flag and the range, or, where the caller asks for it (the plugin, which must
// never stop a job), replaced by the nearest bound with a warning.
struct Range {
  static constexpr double kNone = std::numeric_limits<double>::infinity();
  double min = -kNone;
  double max = kNone;
  bool min_open = false;  // `min` itself is outside
  bool max_open = false;
  const char* why = "";  // appended to the message, e.g. " (112 bytes per entry)"

  static Range AtLeast(double v) { return {v}; }
  static Range Positive() { return {0, kNone, true}; }
  static Range Between(double lo, double hi, const char* why = "") {
    return {lo, hi, false, false, why};
  }
  static Range Open(double lo, double hi) { return {lo, hi, true, true}; }

  bool Contains(double v) const;
  // "in [64, 262144]", "in (0, 1)", "at least 1", "positive", "at most 10"; with `duration`, the
  // bounds (seconds) as durations: "in [1m, 3650d]".
  std::string Text(bool duration = false) const;
};

// "15d", "36h", "90m", "30s" or a bare number of seconds; InvalidArgument otherwise.
absl::StatusOr<absl::Duration> ParseDurationText(std::string_view text);
// The shortest of those that says `d` exactly ("15d", "90m", "1.5s").
std::string DurationText(absl::Duration d);

class ConfigTable {
 public:
  // Looks up an environment variable; returns nullptr when unset.
  using EnvLookup = std::function<const char*(const char*)>;

  ConfigTable(std::string program, std::string summary);

  // Each Add* registers an entry whose current target value is its default. `flag` (without "--")
  // or `env` may be empty, not both. The target must outlive the table.
  // Numbers and durations may carry the Range they accept.
  void AddString(std::string_view flag, std::string_view env, std::string* target,
                 std::string_view help);
  void AddInt(std::string_view flag, std::string_view env, int64_t* target, std::string_view help,
              Range range = {});
  void AddDouble(std::string_view flag, std::string_view env, double* target, std::string_view help,
                 Range range = {});
  void AddBool(std::string_view flag, std::string_view env, bool* target, std::string_view help);
  // A duration written as ParseDurationText reads it; `range` in seconds.
  void AddDuration(std::string_view flag, std::string_view env, absl::Duration* target,
                   std::string_view help, Range range = {});

  // Applies environment variables, then command-line flags. Returns the positional arguments.
  // InvalidArgument names the offending flag or variable and says what was expected.
  absl::StatusOr<std::vector<std::string>> Parse(int argc, const char* const* argv,
                                                 const EnvLookup& env = DefaultEnv());
  // Only the environment (for the plugin, which has no command line). With `clamped`, a number
  // outside its range is not an error: the nearest bound is used and a warning added there.
  absl::Status ParseEnv(const EnvLookup& env = DefaultEnv(),
                        std::vector<std::string>* clamped = nullptr);

  // True when Parse saw --help or -h; the caller prints HelpText() and exits 0.
  bool help_requested() const { return help_requested_; }
  // True when Parse saw --version; the caller prints VersionText (common/build_info.h), exits 0.
  bool version_requested() const { return version_requested_; }
  // Usage line, summary and a table of every entry: flag, environment variable, default, meaning.
  std::string HelpText(std::string_view usage_args = "[flags]") const;
  // The same with another summary and, when `only` is not empty, only the flags it names (a
  // subcommand's help).
  std::string HelpText(std::string_view usage_args, std::string_view summary,
                       const std::vector<std::string>& only) const;
  // "name=value" pairs of the effective configuration, for the start-up log line.
  std::string Describe() const;

  static EnvLookup DefaultEnv();

  // The command-line handling of a daemon that takes no positional arguments: adds --log-level
  // (NCCLWATCH_LOG_LEVEL) and --log-format (NCCLWATCH_LOG_FORMAT), validated, then applied;
  // parses, prints --help or --version to stdout or an error to stderr. Returns std::nullopt to
  // carry on, else the exit code main() should return (0 after --help, 2 for a bad command
  // line).
  std::optional<int> ParseDaemonCommandLine(int argc, const char* const* argv);

 private:
  using Target = std::variant<std::string*, int64_t*, double*, bool*, absl::Duration*>;
  struct Entry {
    std::string flag;
    std::string env;
    std::string help;
    std::string default_text;
    Target target;
    Range range;
  };
  void Add(std::string_view flag, std::string_view env, Target target, std::string_view help,
           Range range = {});
  // Sets the entry from `value`, read from `source` ("flag --x", "environment variable X"). With
  // `clamped`, a number out of range takes the nearest bound and a warning is added there.
  absl::Status Assign(const Entry& entry, std::string_view value, std::string_view source,
                      std::vector<std::string>* clamped = nullptr);
  const Entry* FindFlag(std::string_view name) const;
  // The flag closest to a mistyped `name` (a few edits away), or "" when none is close.
  std::string NearestFlag(std::string_view name) const;
  static std::string ValueText(const Target& target);

  std::string program_;
  std::string summary_;
  std::vector<Entry> entries_;
  bool help_requested_ = false;
  bool version_requested_ = false;
  std::string log_level_ = "info";   // ParseDaemonCommandLine's --log-level
  std::string log_format_ = "text";  // and --log-format
};

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_CONFIG_H_

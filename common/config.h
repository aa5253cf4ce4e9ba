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
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ncclwatch {

class ConfigTable {
 public:
  // Looks up an environment variable; returns nullptr when unset.
  using EnvLookup = std::function<const char*(const char*)>;

  ConfigTable(std::string program, std::string summary);

  // Each Add* registers an entry whose current target value is its default. `flag` (without "--")
  // or `env` may be empty, not both. The target must outlive the table.
  void AddString(std::string_view flag, std::string_view env, std::string* target,
                 std::string_view help);
  void AddInt(std::string_view flag, std::string_view env, int64_t* target, std::string_view help);
  void AddDouble(std::string_view flag, std::string_view env, double* target,
                 std::string_view help);
  void AddBool(std::string_view flag, std::string_view env, bool* target, std::string_view help);

  // Applies environment variables, then command-line flags. Returns the positional arguments.
  // InvalidArgument names the offending flag or variable and says what was expected.
  absl::StatusOr<std::vector<std::string>> Parse(int argc, const char* const* argv,
                                                 const EnvLookup& env = DefaultEnv());
  // Only the environment (for the plugin, which has no command line).
  absl::Status ParseEnv(const EnvLookup& env = DefaultEnv());

  // True when Parse saw --help or -h; the caller prints HelpText() and exits 0.
  bool help_requested() const { return help_requested_; }
  // True when Parse saw --version; the caller prints VersionText (common/build_info.h), exits 0.
  bool version_requested() const { return version_requested_; }
  // Usage line, summary and a table of every entry: flag, environment variable, default, meaning.
  std::string HelpText(std::string_view usage_args = "[flags]") const;
  // "name=value" pairs of the effective configuration, for the start-up log line.
  std::string Describe() const;

  static EnvLookup DefaultEnv();

  // The command-line handling of a daemon that takes no positional arguments: adds --log-level
  // (NCCLWATCH_LOG_LEVEL, validated, then applied), parses, prints --help or --version to stdout
  // or an error to stderr. Returns std::nullopt to carry on, else the exit code
  // main() should return (0 after --help, 2 for a bad command line).
  std::optional<int> ParseDaemonCommandLine(int argc, const char* const* argv);

 private:
  using Target = std::variant<std::string*, int64_t*, double*, bool*>;
  struct Entry {
    std::string flag;
    std::string env;
    std::string help;
    std::string default_text;
    Target target;
  };
  void Add(std::string_view flag, std::string_view env, Target target, std::string_view help);
  absl::Status Assign(const Entry& entry, std::string_view value, std::string_view source);
  const Entry* FindFlag(std::string_view name) const;
  static std::string ValueText(const Target& target);

  std::string program_;
  std::string summary_;
  std::vector<Entry> entries_;
  bool help_requested_ = false;
  bool version_requested_ = false;
  std::string log_level_ = "info";  // ParseDaemonCommandLine's --log-level
};

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_CONFIG_H_

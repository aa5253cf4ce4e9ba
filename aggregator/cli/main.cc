// ncclwatch: the command-line client of the aggregator's Query API.
//
//   ncclwatch jobs       [--json] [--aggregator HOST:PORT]
//   ncclwatch comms      [--job J] [--json] [--aggregator HOST:PORT]
//   ncclwatch stragglers [--job J] [--wait-s N] [--json] [--aggregator HOST:PORT]
//   ncclwatch hangs      [--job J] [--wait-s N] [--json] [--aggregator HOST:PORT]
//   ncclwatch degraded   [--job J] [--wait-s N] [--json] [--aggregator HOST:PORT]
//   ncclwatch query      SELECTOR [--since-s N] [--step-s N] [--json] [--aggregator HOST:PORT]
//   ncclwatch trace      --job J --comm C [--since-s N] [--output F] [--aggregator HOST:PORT]
//   ncclwatch events     [--job J] [--since-s N] [--limit N] [--follow] [--json] [--aggregator ...]
//
// Tables for people, --json for scripts; a readable error when the aggregator cannot be reached.
// This file holds the configuration table and the channel (TLS, token); the commands, their table
// (names, --help lines, dispatch) are in commands.h, their text in tables.h. Exit codes: 0 ok
// (nothing flagged), 1 failed, 2 bad command line, 3 findings shown (stragglers, hangs, degraded).
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "aggregator/cli/commands.h"
#include "common/build_info.h"
#include "common/config.h"
#include "common/rpc/tls.h"
#include "common/rpc/token.h"
#include "grpcpp/grpcpp.h"
#include "ncclwatch/v1/query.grpc.pb.h"

namespace ncclwatch::cli {
namespace {

struct CliConfig {
  CommandConfig command;
  bool tls = false;
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::string server_name;
  std::string token_file;  // read into command.token
  bool utc = false;
};

constexpr char kUsage[] = "<command> [flags]";
// --help: this, the command table's lines (commands.h), then the exit codes.
constexpr char kSummaryHead[] = "Query the ncclwatch aggregator.\n\n";
constexpr char kSummaryTail[] =
    "\nExit codes: 0 done (stragglers/hangs/degraded: nothing flagged), 1 failed (aggregator\n"
    "unreachable or refusing, unknown --job, unwritable file), 2 bad command line,\n"
    "3 stragglers/hangs/degraded found something. Notes (waiting, reconnecting) go to stderr.\n"
    "Environment: NCCLWATCH_LOG_LEVEL is not used by this client.";

// `ncclwatch NAME --help`: what the command does, its own flags and the connection ones, an
// example.
std::string CommandHelpText(const ConfigTable& table, const CommandSpec& command) {
  std::vector<std::string> flags =
      absl::StrSplit(std::string(command.flags), ' ', absl::SkipEmpty());
  for (const char* common : {"aggregator", "token-file", "timeout-s", "utc"}) {
    flags.emplace_back(common);
  }
  std::string usage(command.name);
  if (!command.argument.empty()) absl::StrAppend(&usage, " ", std::string(command.argument));
  absl::StrAppend(&usage, " [flags]");
  std::string what(command.help);
  absl::StrReplaceAll({{"\n", " "}}, &what);
  std::string out = table.HelpText(
      usage, absl::StrCat(what, ".\n\nExample:\n  ", std::string(command.example)), flags);
  absl::StrAppend(&out,
                  "\nTLS: --tls, --ca-file, --cert-file, --key-file, --server-name (ncclwatch "
                  "--help).\n",
                  kSummaryTail, "\n");
  return out;
}

int Main(int argc, char** argv) {
  CliConfig config;
  CommandConfig& c = config.command;
  const Console console;
  ConfigTable table("ncclwatch", kSummaryHead + CommandsHelp() + kSummaryTail);
  table.AddString("aggregator", "NCCLWATCH_AGGREGATOR", &c.aggregator,
                  "Aggregator gRPC address, host:port.");
  table.AddBool("json", "", &c.json,
                "Print JSON instead of a table (every field; times also as RFC 3339 UTC).");
  table.AddBool("utc", "", &config.utc,
                "Print the tables' times in UTC instead of the local time zone (TZ).");
  table.AddString("job", "", &c.job, "Only this job id.");
  table.AddBool("follow", "", &c.follow,
                "events: keep printing new events as they happen (until Ctrl-C, or --wait-s).");
  table.AddString("comm", "", &c.comm, "trace: communicator name (e.g. world) or 0x hash.");
  table.AddString("output", "", &c.output,
                  "trace: output file (default trace-<job>-<comm>.json); - writes to stdout.");
  table.AddDouble("wait-s", "", &c.wait_s,
                  "If nothing is flagged yet, wait up to this long for the first finding (and "
                  "for the aggregator, if it is not up yet).",
                  Range::AtLeast(0));
  table.AddDouble("timeout-s", "", &c.timeout_s, "Deadline of each request.", Range::Positive());
  table.AddDouble("since-s", "", &c.since_s, "events, query: how far back to look, in seconds.",
                  Range::Positive());
  table.AddDouble("step-s", "", &c.step_s,
                  "query: one value per step (the latest within 5 min); 0 = every stored point.",
                  Range::AtLeast(0));
  table.AddInt("limit", "", &c.limit, "events: at most this many, oldest first.",
               Range::AtLeast(1));
  table.AddBool("tls", "NCCLWATCH_TLS", &config.tls,
                "Talk TLS to the aggregator (implied by any of the files below).");
  table.AddString("ca-file", "NCCLWATCH_CA_FILE", &config.ca_file,
                  "PEM roots that sign the aggregator's certificate; empty: the system's.");
  table.AddString("cert-file", "NCCLWATCH_CERT_FILE", &config.cert_file,
                  "PEM client certificate, for an aggregator that requires one (mutual TLS).");
  table.AddString("key-file", "NCCLWATCH_KEY_FILE", &config.key_file,
                  "PEM private key of --cert-file.");
  table.AddString("token-file", "NCCLWATCH_TOKEN_FILE", &config.token_file,
                  "File holding the bearer token of an aggregator run with --query-token-file.");
  table.AddString(
      "server-name", "", &config.server_name,
      "Name to verify in the aggregator's certificate; empty: the host of --aggregator.");
  auto positional = table.Parse(argc, argv);
  if (!positional.ok()) {
    Fail(console, std::string(positional.status().message()));
    return kExitUsage;  // a bad command line: an unknown flag, a malformed or out-of-range value
  }
  if (table.version_requested() && !table.help_requested()) {
    std::printf("%s\n", VersionText("ncclwatch").c_str());
    return 0;
  }
  if (table.help_requested() && !positional->empty()) {
    if (const CommandSpec* command = FindCommand((*positional)[0])) {
      std::fputs(CommandHelpText(table, *command).c_str(), stdout);
      return 0;
    }
  }
  if (table.help_requested() || positional->empty()) {
    std::fputs(table.HelpText(kUsage).c_str(), table.help_requested() ? stdout : stderr);
    return table.help_requested() ? 0 : 2;
  }
  if (config.utc) {  // the tables format local time (tables.h): make local time UTC
    setenv("TZ", "UTC", 1);
    tzset();
  }
  auto credentials = MakeChannelCredentials(
      ClientTls::FromFlags(config.tls, config.ca_file, config.cert_file, config.key_file));
  auto token = TokenFile::Open(config.token_file);
  if (!token.ok()) return Fail(console, std::string(token.status().message()));
  if (*token != nullptr) c.token = (*token)->Get();
  if (!credentials.ok()) return Fail(console, std::string(credentials.status().message()));
  grpc::ChannelArguments args;
  if (!config.server_name.empty()) args.SetSslTargetNameOverride(config.server_name);
  // A range query may answer with up to 5,000,000 points, well over gRPC's default 4 MiB.
  args.SetMaxReceiveMessageSize(256 << 20);
  auto stub =
      ncclwatch::v1::Query::NewStub(grpc::CreateCustomChannel(c.aggregator, *credentials, args));
  return RunCommand(*stub, c, *positional, console);
}

}  // namespace
}  // namespace ncclwatch::cli

int main(int argc, char** argv) { return ncclwatch::cli::Main(argc, argv); }

// The commands of `ncclwatch`, one function each, over the aggregator's Query API.
//
// Each command makes its calls on `stub` (every call carries the bearer token, when there is one,
// and the --timeout-s deadline; a Watch stream lasts --wait-s), writes its answer to `console.out`
// (a table for people, or JSON with --json) and returns the process's exit code (below): 0 on
// success (3 for a finding command that shows findings), 1 after writing one "ncclwatch:
// <message>" line to `console.err` (the aggregator cannot be reached or refused the call, a bad
// argument, a --job the aggregator does not know, a file that cannot be written). Progress notes
// (waiting, reconnecting, what a limit left out) go to `console.err` too.
//
// A command blocks until its calls end: at most --timeout-s per unary call plus --wait-s for a
// watch (events --follow without --wait-s: until the stream ends). Commands share no state; the
// stub must be usable from the calling thread.
#ifndef NCCLWATCH_AGGREGATOR_CLI_COMMANDS_H_
#define NCCLWATCH_AGGREGATOR_CLI_COMMANDS_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "ncclwatch/v1/query.grpc.pb.h"

namespace ncclwatch::cli {

using QueryStub = ncclwatch::v1::Query::StubInterface;

// What the commands read of the configuration (main.cc's table documents each flag).
struct CommandConfig {
  std::string aggregator = "localhost:9470";  // only named in error messages: the stub dials
  std::string token;                          // sent as "authorization: Bearer <token>"; "": none
  bool json = false;
  std::string job;       // "": every job
  double wait_s = 0;     // stragglers, hangs, degraded: wait this long for a first finding
  double timeout_s = 5;  // deadline of each unary call
  double since_s = 3600;
  double step_s = 0;
  std::string comm;
  std::string output;
  bool follow = false;
  int64_t limit = 1000;
};

// Where a command writes: its answer to `out`, its error line to `err`. Not owned.
struct Console {
  std::FILE* out = stdout;
  std::FILE* err = stderr;
};

// Exit codes, for cron and CI: a finding command (stragglers, hangs, degraded) exits 3 when it
// shows something flagged and 0 when nothing is; every command exits 1 when it failed (the
// aggregator unreachable or refusing, an unknown --job, a file it cannot write) and main 2 for
// a bad command line.
inline constexpr int kExitNothingFound = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitFindings = 3;
inline constexpr int kExitUsage = 2;

// Writes "ncclwatch: <message>\n" to `console.err`; returns 1, the exit code of a failed command.
int Fail(const Console& console, const std::string& message);

// The error message of a failed call to the aggregator at `aggregator`: "cannot reach the
// aggregator at ..." with a hint for UNAVAILABLE and DEADLINE_EXCEEDED, else "aggregator at ...
// answered: <its message>".
std::string RpcError(const grpc::Status& status, const std::string& aggregator);

// stragglers, hangs, degraded: what is flagged now, for --job or every job. With --wait-s and
// nothing to show, they wait for the first START event of their kind (stragglers: STRAGGLER;
// hangs: HANG or RANK_SILENT; degraded: COMM_DEGRADED or NODE_NETWORK_SUSPECT) of that job on
// Watch, or the end of --wait-s, then list again. The watch opens before the first list, so that
// nothing flagged in between is missed. A degraded communicator is a finding (exit 3) with or
// without a suspect node.
int Stragglers(QueryStub& stub, const CommandConfig& config, const Console& console);
int Hangs(QueryStub& stub, const CommandConfig& config, const Console& console);
int Degraded(QueryStub& stub, const CommandConfig& config, const Console& console);

// jobs, comms (of --job, or every job).
int Jobs(QueryStub& stub, const CommandConfig& config, const Console& console);
int Comms(QueryStub& stub, const CommandConfig& config, const Console& console);

// events: the stored detection events of the last --since-s seconds (at most --limit, oldest
// first), one line each (with --json: the ListEventsResponse, or one Event per line with
// --follow). With --follow, then every new event of --job from Watch, flushed line by line, until
// the stream ends or --wait-s passes (the end of --wait-s is not an error); the watch opens before
// the stored events are read and an event seen both ways is printed once.
int Events(QueryStub& stub, const CommandConfig& config, const Console& console);

// query SELECTOR: the stored points of the matching series over the last --since-s seconds, one
// per --step-s (0: every point).
int Query(QueryStub& stub, const CommandConfig& config, const std::string& selector,
          const Console& console);

// trace: writes the Chrome trace (chrome_trace.h) of communicator --comm of --job over the last
// --since-s seconds to --output (default trace-<job>-<comm>.json), then says so on `console.out`;
// with --output - the trace itself goes to `console.out`.
// Fails without calling when --job or --comm is missing.
int Trace(QueryStub& stub, const CommandConfig& config, const Console& console);

// The command table: every command once, with what --help says of it and what runs it. Adding a
// command is a row here (commands.cc) and its function above.
struct CommandSpec {
  std::string_view name;
  std::string_view argument;       // its one positional argument in --help ("SEL"), or ""
  std::string_view argument_what;  // what that argument is, for the error when it is missing
  std::string_view help;           // what --help says; '\n' starts an indented line
  std::string_view flags;          // its own flags, space-separated (`ncclwatch NAME --help`)
  std::string_view example;        // one example command line
  int (*run)(QueryStub& stub, const CommandConfig& config, const std::string& argument,
             const Console& console);
};
const std::vector<CommandSpec>& Commands();
// The "Commands:" block of --help: a line per command, its help in a column beside it.
std::string CommandsHelp();
// The command named `name`, or nullptr.
const CommandSpec* FindCommand(std::string_view name);
// Runs `words[0]` with its argument (`words[1]`, for a command that takes one). An unknown
// command, or a missing or extra argument, writes one "ncclwatch: ..." line and returns
// kExitUsage.
int RunCommand(QueryStub& stub, const CommandConfig& config, const std::vector<std::string>& words,
               const Console& console);

}  // namespace ncclwatch::cli

#endif  // NCCLWATCH_AGGREGATOR_CLI_COMMANDS_H_

#include "common/rpc/grpc_log.h"

#include <grpc/support/log.h>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace ncclwatch {
namespace {

void ToLog(gpr_log_func_args* args) {
  const LogSeverity severity = args->severity == GPR_LOG_SEVERITY_ERROR  ? LogSeverity::kError
                               : args->severity == GPR_LOG_SEVERITY_INFO ? LogSeverity::kInfo
                                                                         : LogSeverity::kDebug;
  LogLine(severity, absl::StrCat("grpc: ", args->message, " (", args->file, ":", args->line, ")"));
}

}  // namespace

void RouteGrpcLogs() { gpr_set_log_function(&ToLog); }

}  // namespace ncclwatch

// Early-return helpers for absl::Status / absl::StatusOr (abseil 20220623 ships none).
#ifndef NCCLWATCH_COMMON_STATUS_MACROS_H_
#define NCCLWATCH_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define NCCLWATCH_CONCAT_INNER_(a, b) a##b
#define NCCLWATCH_CONCAT_(a, b) NCCLWATCH_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status); returns it from the enclosing function if it is not OK.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status _nw_status = (expr);                \
    if (!_nw_status.ok()) return _nw_status;           \
  } while (0)

// `lhs` = value of `rexpr` (an absl::StatusOr<T>), or returns its status from the enclosing function.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  ASSIGN_OR_RETURN_IMPL_(NCCLWATCH_CONCAT_(_nw_statusor_, __LINE__), lhs, rexpr)

#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                           \
  if (!statusor.ok()) return statusor.status();      \
  lhs = std::move(statusor).value()

#endif  // NCCLWATCH_COMMON_STATUS_MACROS_H_

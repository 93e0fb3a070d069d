// Early-return helpers for absl::Status / absl::StatusOr.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define MOE_CONCAT_INNER(a, b) a##b
#define MOE_CONCAT(a, b) MOE_CONCAT_INNER(a, b)

// Returns from the enclosing function when `expr` is not OK.
#define MOE_RETURN_IF_ERROR(expr)              \
  do {                                         \
    const absl::Status _moe_status = (expr);   \
    if (!_moe_status.ok()) return _moe_status; \
  } while (0)

// `lhs = value of expr`, or returns its error.
#define MOE_ASSIGN_OR_RETURN(lhs, expr) \
  MOE_ASSIGN_OR_RETURN_IMPL(MOE_CONCAT(_moe_statusor_, __LINE__), lhs, expr)

#define MOE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

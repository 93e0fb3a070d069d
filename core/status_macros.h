// Early-return helpers for absl::Status / absl::StatusOr, and the one way
// to say where an error came from.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace moe {

// `s` with `prefix` before its message ("--flag: ", "loading the model: ");
// OK stays OK.
inline absl::Status Prefixed(absl::string_view prefix, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

}  // namespace moe

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

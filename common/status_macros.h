// Status propagation macros. Abseil 20220623 (Debian 12) ships absl::Status but no
// macros to propagate it, so coil defines them once, here, in a leaf every module may
// include. A Status is never dropped silently (TotW #76): these return it to the caller.
#ifndef COIL_COMMON_STATUS_MACROS_H_
#define COIL_COMMON_STATUS_MACROS_H_

#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

#define COIL_STATUS_CONCAT_INNER_(a, b) a##b
#define COIL_STATUS_CONCAT_(a, b) COIL_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) once and returns it from the enclosing function if
// it is not OK.
#define COIL_RETURN_IF_ERROR(expr)                                \
  do {                                                            \
    ::absl::Status coil_status_ = (expr);                         \
    if (!coil_status_.ok()) return coil_status_;                  \
  } while (false)

// `COIL_ASSIGN_OR_RETURN(lhs, expr)`: evaluates `expr` (an absl::StatusOr<T>) once; on
// error returns its status, otherwise moves the value into `lhs`, which may be a
// declaration (`auto x`, `const Foo& y` is not allowed: the value is moved).
#define COIL_ASSIGN_OR_RETURN(lhs, expr) \
  COIL_ASSIGN_OR_RETURN_IMPL_(COIL_STATUS_CONCAT_(coil_statusor_, __LINE__), lhs, expr)

#define COIL_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

// Adds context to an error while keeping its code: "layer 3: <message>".
namespace coil {
inline absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}
}  // namespace coil

#define COIL_RETURN_IF_ERROR_CONTEXT(expr, context)                       \
  do {                                                                    \
    ::absl::Status coil_status_ = (expr);                                 \
    if (!coil_status_.ok()) return ::coil::Annotate(coil_status_, context); \
  } while (false)

#endif  // COIL_COMMON_STATUS_MACROS_H_

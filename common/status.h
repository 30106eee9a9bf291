// Status and Result<T>: errors as values for control-side code.
//
// Control and config code never lets an exception escape a module; it returns
// a [[nodiscard]] Status (or Result<T> carrying a value) instead. The hot path
// does not use these types at all: it counts a drop reason and moves on.
//
//   Result<Config> LoadConfig(const std::string& path);
//   ASSIGN_OR_RETURN(Config cfg, LoadConfig(path));
//   RETURN_IF_ERROR(cfg.Validate());
//
// Thread safety: value types, no shared state; any thread.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace aggswitch::common {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kResourceExhausted,
  kFailedPrecondition,
  kUnavailable,
  kInternal,
  kOutOfRange,  // a result that does not fit its type (an int32 sum that overflowed)
  kIncomplete,  // a result that lacks members' data (the switch or the TAN gave up on them)
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status Incomplete(std::string m) { return {StatusCode::kIncomplete, std::move(m)}; }

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    assert(!status_.ok() && "Result built from an OK status carries no value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace aggswitch::common

#define AGG_STATUS_CONCAT_INNER(a, b) a##b
#define AGG_STATUS_CONCAT(a, b) AGG_STATUS_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                                   \
  do {                                                          \
    ::aggswitch::common::Status agg_status_ = (expr);           \
    if (!agg_status_.ok()) return agg_status_;                  \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(AGG_STATUS_CONCAT(agg_result_, __LINE__), lhs, expr)

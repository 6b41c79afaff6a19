// Status and Result<T>: expected failures (bad config, I/O, damaged checkpoint, bad data) travel
// as values whose message says what went wrong and what to do. Bugs use TENAX_CHECK instead.
// Non-goal: error codes as an exception hierarchy; libtorch's c10::Error is converted at the
// adapter layer (core/torch_errors.h) and nowhere else.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace tenax {

// Categories map onto the process exit codes documented in docs/exit_codes.md; the launcher uses
// them to tell a crash (restart) from a bad configuration (stop).
enum class StatusCode {
  kOk = 0,
  kInvalidArgument = 2,  // bad flag or config value: fix the input, do not restart
  kNotFound = 3,         // a file or checkpoint that should exist does not
  kDataError = 4,        // corrupt or incompatible data or checkpoint
  kIoError = 5,          // the filesystem failed us
  kInternal = 6,         // a failure inside a library (libtorch) we did not expect
  kNumerical = 7,        // NaN/Inf in loss or gradients
  kUnavailable = 8,      // a peer or service is gone
  kPeerLost = 10,        // a collective lost its partner: another rank died first (secondary)
  kBusy = 12,            // another process owns the resource (a run folder): do not restart
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;
  // Prepends context ("loading checkpoint X: ") to the message, keeping the code.
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

Status InvalidArgument(std::string message);
Status NotFound(std::string message);
Status DataError(std::string message);
Status IoError(std::string message);
Status Internal(std::string message);
Status Numerical(std::string message);
Status Unavailable(std::string message);
Status PeerLost(std::string message);
Status Busy(std::string message);

// Holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Internal("Result constructed from an OK status without a value");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace tenax

#define TENAX_CONCAT_INNER(a, b) a##b
#define TENAX_CONCAT(a, b) TENAX_CONCAT_INNER(a, b)

// Returns early from the enclosing function if `expr` (a Status) is not OK.
#define TENAX_RETURN_IF_ERROR(expr) \
  do {                              \
    ::tenax::Status _st = (expr);   \
    if (!_st.ok()) return _st;      \
  } while (0)

// `TENAX_ASSIGN_OR_RETURN(auto x, MakeX());` unwraps a Result or returns its Status.
#define TENAX_ASSIGN_OR_RETURN(lhs, expr) \
  TENAX_ASSIGN_OR_RETURN_IMPL(TENAX_CONCAT(_result_, __LINE__), lhs, expr)
#define TENAX_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

#ifndef TILEC_FORMATS_STATUS_H_
#define TILEC_FORMATS_STATUS_H_

#include <optional>
#include <string>
#include <utility>

namespace tilec {

// Exit codes shared by every tool (docs/architecture.md, "Conventions of every tool").
enum class StatusCode {
  kOk = 0,
  kInternal = 1,    // a bug: should never happen
  kBadInput = 2,    // bad input or usage
  kInfeasible = 3,  // valid input that cannot be compiled
};

// An error value instead of exceptions across library boundaries. The
// message is one line that names the input and what is wrong with it.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status BadInput(std::string message) {
    return Status(StatusCode::kBadInput, std::move(message));
  }
  static Status Infeasible(std::string message) {
    return Status(StatusCode::kInfeasible, std::move(message));
  }
  static Status Internal(std::string message) {
    return Status(StatusCode::kInternal, std::move(message));
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  int exit_code() const { return static_cast<int>(code_); }
  const std::string& message() const { return message_; }

  // Prefixes the message with context, e.g. the file name.
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit on purpose
  // An ok Status carries no value, so it becomes an internal error rather
  // than a StatusOr that is neither a value nor an error.
  StatusOr(Status status)  // NOLINT: implicit on purpose
      : status_(status.ok() ? Status::Internal("StatusOr built from an ok Status")
                            : std::move(status)) {}
  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T& operator*() const& { return *value_; }
  T& operator*() & { return *value_; }
  const T* operator->() const { return &*value_; }
  T* operator->() { return &*value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

#define TILEC_RETURN_IF_ERROR(expr)          \
  do {                                       \
    ::tilec::Status tilec_status_ = (expr);  \
    if (!tilec_status_.ok()) return tilec_status_; \
  } while (0)

}  // namespace tilec

#endif  // TILEC_FORMATS_STATUS_H_

//===- Status.h - Errors as values in the runtime ---------------*- C++ -*-===//
//
// The runtime reports every failure as a Status carrying a message that says
// what was expected and what was found. Exceptions from libraries (JSON,
// Gloo) are caught at the boundary and turned into a Status.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_STATUS_H
#define TRELLIS_RUNTIME_STATUS_H

#include <optional>
#include <string>
#include <utility>

namespace trellis::runtime {

class [[nodiscard]] Status {
public:
  static Status success() { return Status(); }
  static Status error(std::string message) {
    return Status(std::move(message));
  }

  bool ok() const { return !message_.has_value(); }
  const std::string &message() const { return *message_; }

  /// Prefixes the message with context: "plan: " + message.
  Status withContext(const std::string &context) const {
    return ok() ? *this : error(context + ": " + *message_);
  }

private:
  Status() = default;
  explicit Status(std::string message) : message_(std::move(message)) {}

  std::optional<std::string> message_;
};

/// A value or the Status explaining why there is none.
template <typename T> class [[nodiscard]] StatusOr {
public:
  StatusOr(T value) : value_(std::move(value)), status_(Status::success()) {}
  StatusOr(Status status) : status_(std::move(status)) {}

  bool ok() const { return status_.ok(); }
  const Status &status() const { return status_; }
  T &operator*() { return *value_; }
  const T &operator*() const { return *value_; }
  T *operator->() { return &*value_; }
  const T *operator->() const { return &*value_; }

private:
  std::optional<T> value_;
  Status status_;
};

#define TRELLIS_RETURN_IF_ERROR(expr)                                          \
  do {                                                                         \
    ::trellis::runtime::Status trellisStatus = (expr);                         \
    if (!trellisStatus.ok())                                                   \
      return trellisStatus;                                                    \
  } while (false)

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_STATUS_H

#pragma once
/// Exceptions thrown by dblock. Every class is nothrow-copyable (std::runtime_error keeps its
/// message in a shared immutable buffer) and the message names the input at fault and the fix.
/// Expected outcomes are values, not exceptions: a busy lock is an empty optional.

#include <array>
#include <stdexcept>
#include <string>
#include <string_view>

#include <dblock/export.hpp>

namespace dblock {

enum class ErrorCategory {
  invalid_argument,  ///< bad name, TTL, duration, DSN or option; nothing was sent
  connection,        ///< the database cannot be reached, refused the login, or the link broke
  timeout,           ///< acquire(name, timeout) gave up
  deadlock,          ///< a fair-queue waiter closed a cycle of owners waiting for each other's names
  not_held,          ///< released a lock this owner does not hold
  lock_lost,         ///< the lease ended or was taken over while the lock was held
  schema,            ///< dblock's tables are missing, older or newer than this build
  permission,        ///< the database role lacks a right the call needs (nothing was changed by it)
  database,          ///< any other error reported by the database
};

class DBLOCK_EXPORT Error : public std::runtime_error {
 public:
  Error(ErrorCategory category, const std::string& message, std::string_view sqlstate = {});

  [[nodiscard]] ErrorCategory category() const noexcept { return category_; }
  /// The five-character SQLSTATE when the database reported one, else "".
  [[nodiscard]] const char* sqlstate() const noexcept { return sqlstate_.data(); }

 private:
  ErrorCategory category_;
  std::array<char, 6> sqlstate_{};
};

class DBLOCK_EXPORT InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& message) : Error(ErrorCategory::invalid_argument, message) {}
};

class DBLOCK_EXPORT ConnectionError : public Error {
 public:
  explicit ConnectionError(const std::string& message, std::string_view sqlstate = {})
      : Error(ErrorCategory::connection, message, sqlstate) {}
};

class DBLOCK_EXPORT Timeout : public Error {
 public:
  explicit Timeout(const std::string& message) : Error(ErrorCategory::timeout, message) {}
};

/// Thrown by acquire(name, timeout) (and try_acquire with a timeout) of a manager with
/// ManagerOptions::fair_queue when its waiter would close a cycle of owners that wait for each
/// other's names (doc/fair-queue.md, "Deadlocks"): of the cycle's waiters, the one that queued last
/// is told, the others go on waiting. The message names the cycle. The waiter has left the queue;
/// the locks its owner holds are still held (release one of them to let the cycle go on).
class DBLOCK_EXPORT Deadlock : public Error {
 public:
  explicit Deadlock(const std::string& message) : Error(ErrorCategory::deadlock, message) {}
};

class DBLOCK_EXPORT NotHeld : public Error {
 public:
  explicit NotHeld(const std::string& message) : Error(ErrorCategory::not_held, message) {}
};

class DBLOCK_EXPORT LockLost : public Error {
 public:
  explicit LockLost(const std::string& message) : Error(ErrorCategory::lock_lost, message) {}
};

/// dblock's tables are missing, or their version differs from what this build understands.
class DBLOCK_EXPORT SchemaError : public Error {
 public:
  enum class Reason { missing, outdated, newer };
  SchemaError(Reason reason, const std::string& message) : Error(ErrorCategory::schema, message), reason_(reason) {}
  [[nodiscard]] Reason reason() const noexcept { return reason_; }

 private:
  Reason reason_;
};

/// The role dblock connects as lacks a right: the message names it. At run time the role lacks one
/// of the grants `dblock migrate grants` prints; from `migrate up`, a right to create dblock's
/// objects (checked before anything is created).
class DBLOCK_EXPORT PermissionDenied : public Error {
 public:
  explicit PermissionDenied(const std::string& message) : Error(ErrorCategory::permission, message, "42501") {}
};

class DBLOCK_EXPORT DatabaseError : public Error {
 public:
  explicit DatabaseError(const std::string& message, std::string_view sqlstate = {})
      : Error(ErrorCategory::database, message, sqlstate) {}
};

}  // namespace dblock

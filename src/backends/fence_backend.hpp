#pragma once
// The fence role of a backend: a transaction on one of the backend's own sessions whose first
// statement is the fence (migration 0009), so that every write it commits was made while the
// given token held the lock. One domain operation per call; no retries or waiting inside.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <dblock/errors.hpp>

#include "base/terminal_text.hpp"

namespace dblock::detail {

/// Rows of a result as text, NULL as an empty optional.
using FenceRows = std::vector<std::vector<std::optional<std::string>>>;

/// An open, fenced transaction on one leased session. Rolled back when it goes uncommitted.
class FencedSession {
 public:
  virtual ~FencedSession() = default;
  /// The lease left when the fence ran, by the database's clock (rounded up).
  [[nodiscard]] virtual std::int64_t lease_left_ms() const noexcept = 0;
  /// One statement with text parameters ($1.. on PostgreSQL, ? elsewhere): its rows.
  virtual FenceRows query(std::string_view sql, std::span<const std::string> params) = 0;
  /// One statement with text parameters: the rows it changed.
  virtual std::int64_t execute(std::string_view sql, std::span<const std::string> params) = 0;
  virtual void commit() = 0;
  virtual void rollback() noexcept = 0;
};

/// Runs one statement of a fenced transaction, and after any failure refuses the rest, as PostgreSQL
/// does itself (25P02): MySQL ends the whole transaction on a deadlock (and SQLite on a full disk),
/// after which the next statements would commit one by one, unfenced.
class FailedStatementStop {
 public:
  template <class Statement>
  auto run(Statement&& statement) {
    if (failed_) throw failed();
    try {
      return statement();
    } catch (...) {
      failed_ = true;
      throw;
    }
  }
  /// True when a statement failed: commit() must roll back and throw failed() instead.
  [[nodiscard]] bool stopped() const noexcept { return failed_; }
  static DatabaseError failed() {
    return DatabaseError(
        "the fenced transaction was rolled back (a statement in it had failed), nothing of it committed", "25P02");
  }

 private:
  bool failed_ = false;
};

/// One grant to fence: a lock's name and fencing token; for a group's member (fence_member,
/// migration 0010) also its owner and kind ("permit" or "shared"; empty for a plain lock).
struct FenceRef {
  std::string_view name;
  std::int64_t token = 0;
  std::string_view owner;
  std::string_view kind;
  [[nodiscard]] bool member() const noexcept { return !kind.empty(); }
};

class FenceBackend {
 public:
  virtual ~FenceBackend() = default;
  /// Begins a transaction on one of the backend's sessions and runs the fence for each target in
  /// it, in the order given (the caller sorts them by name, so two fenced transactions on
  /// overlapping sets cannot deadlock); the transaction's bound is the smallest lease left.
  /// @throws LockLost (nothing stays open), naming the first refused lock, when a token is not
  ///         the live holder of its name.
  virtual std::unique_ptr<FencedSession> begin_fenced(std::span<const FenceRef> targets) = 0;
};

/// The message of a refused fence, the name escaped for a terminal.
[[nodiscard]] inline std::string fence_refused_message(const FenceRef& target, std::string_view where) {
  if (target.member())
    return fmt::format(
        "fence refused on {}: token {} is not a live {} of lock '{}' (its lease ended, or its group's "
        "did, or it was released); nothing of the transaction was committed",
        where, target.token, target.kind == "permit" ? "permit" : "reader", terminal_safe(target.name));
  return fmt::format(
      "fence refused on {}: token {} is not the live holder of lock '{}' (its lease ended, or it was "
      "taken over, revoked or released); nothing of the transaction was committed",
      where, target.token, terminal_safe(target.name));
}

}  // namespace dblock::detail

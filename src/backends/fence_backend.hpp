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

class FenceBackend {
 public:
  virtual ~FenceBackend() = default;
  /// Begins a transaction on one of the backend's sessions and runs the fence for (name, token) in
  /// it. @throws LockLost (nothing stays open) when `token` is not the live holder of `name`.
  virtual std::unique_ptr<FencedSession> begin_fenced(std::string_view name, std::int64_t token) = 0;
};

/// The message of a refused fence, the name escaped for a terminal.
[[nodiscard]] inline std::string fence_refused_message(std::string_view name, std::int64_t token, std::string_view where) {
  return fmt::format("fence refused on {}: token {} is not the live holder of lock '{}' (its lease ended, or it was "
                     "taken over, revoked or released); nothing of the transaction was committed",
                     where, token, terminal_safe(name));
}

}  // namespace dblock::detail

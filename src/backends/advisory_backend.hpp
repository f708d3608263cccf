#pragma once
// The advisory role of a backend: server-side locks tied to a pinned session (PostgreSQL's advisory
// locks, MySQL's GET_LOCK). PostgreSQL's transaction-scoped locks are a role of their own
// (postgres/pg_xact_lock.hpp).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <dblock/advisory_key.hpp>
#include <dblock/errors.hpp>

#include "base/dialect.hpp"

namespace dblock::detail {

using std::chrono::milliseconds;

/// A server advisory lock as the pinned session takes it: PostgreSQL locks the key, MySQL's
/// GET_LOCK the name.
struct AdvisoryTarget {
  AdvisoryKey key;
  std::string_view name;  // the lock's name (a view: of the caller's, or of the held record's); empty for a key
  bool shared = false;
};

/// A session taken out of the pool for as long as its owner holds advisory locks: the server
/// ties the locks to it. Used by one thread at a time.
class AdvisorySession {
 public:
  virtual ~AdvisorySession() = default;
  /// One round trip: takes the lock. `wait` zero: try once; else the server's own blocking wait,
  /// bounded by `wait` (at most longest_server_wait(); the server may end it a little early).
  /// Empty when not granted; else the fencing token when the statement drew one, 0 when it is
  /// left to draw_token() (drawn when first asked for).
  /// @throws ConnectionError when the session broke (every lock on it is gone with it).
  virtual std::optional<std::int64_t> lock(const AdvisoryTarget& target, milliseconds wait) = 0;
  /// One round trip: draws a fencing token on this session. Drawn while the session holds a lock,
  /// it exceeds every token of the lock's earlier holders, and a reply proves the session (so its
  /// locks) alive. @throws ConnectionError when the session broke.
  virtual std::int64_t draw_token() = 0;
  /// False when the session did not hold the lock.
  virtual bool unlock(const AdvisoryTarget& target) = 0;
  /// One round trip. @throws ConnectionError when the session broke.
  virtual void check_alive() = 0;
};

/// The reason a database has no advisory locks at all (Backend::advisory() absent).
[[nodiscard]] inline std::string no_advisory_locks_message(Dialect dialect) {
  return std::string(to_string(dialect)) +
         " has no advisory locks: use LockMode::table (advisory mode needs PostgreSQL, or MySQL/MariaDB's GET_LOCK)";
}

class AdvisoryBackend {
 public:
  virtual ~AdvisoryBackend() = default;
  /// @throws InvalidArgument when this database's advisory locks cannot take `target` (e.g. a
  /// shared lock or an integer key on MySQL), before anything is sent.
  virtual void check_advisory_target(const AdvisoryTarget& target) const { (void)target; }
  /// The longest one server-side wait of AdvisorySession::lock() may last; the core serves a
  /// longer wait in turns. PostgreSQL's lock_timeout takes at most 2^31-1 ms; MySQL's wait must end
  /// before the client's read timeout gives up on the session.
  [[nodiscard]] virtual milliseconds longest_server_wait() const { return std::chrono::hours(24); }
  /// Pins a pooled session for advisory locks. `silence`: how long the pinning owner, while live,
  /// may leave the session without a statement (the core decides it: its watchdog checks the
  /// session every check interval, and a lock on it is reported lost locally a TTL after its last
  /// sign of life). A server that cannot notice a cut connection by itself (MariaDB's keepalives
  /// are global) is told to end the session once silent that long, which bounds how long a cut-off
  /// owner's locks outlive it; the pool gets the session back with the server's own setting.
  /// @throws InvalidArgument when the database turned out to have none after the role was handed
  /// out (PostgreSQL behind a transaction pooler).
  virtual std::unique_ptr<AdvisorySession> pin_advisory_session(milliseconds silence) = 0;
  /// Registers `give_back`, which the pool calls when it runs dry, before a caller waits: it hands
  /// back the sessions its owner keeps out of the pool while idle. Held weakly: it is forgotten
  /// when the caller lets go of it.
  virtual void on_pool_dry(std::weak_ptr<const std::function<void()>> give_back) { (void)give_back; }
};

}  // namespace dblock::detail

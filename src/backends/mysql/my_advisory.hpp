#pragma once
// GET_LOCK mode on MySQL/MariaDB: named user locks on a pinned session, the analogue of
// PostgreSQL's session advisory locks.

#include <memory>
#include <string>
#include <string_view>

#include "backends/backend.hpp"
#include "backends/mysql/my_connection.hpp"
#include "backends/session_pool.hpp"

namespace dblock::detail {

/// The SQL for the server-side name of a lock: four parameters, each the full name. The
/// migration lock's statements use it; GET_LOCK mode applies the same rule on the client
/// (MyNamedLockSql::hashed), so a lock costs one parameter.
inline constexpr std::string_view kServerLockName = "IF(CHAR_LENGTH(?) > 64 OR LENGTH(?) > 192, SHA2(?, 256), ?)";

/// The statements of one installation. Server-side names are `<database>.<prefix>:<name>`, or
/// SHA2 of that text (64 hex characters) when it is longer than 64 characters (MySQL 8's limit)
/// or 192 bytes (MariaDB's: 64 four-byte characters are 256): one rule, so a name maps alike on
/// both servers.
class MyNamedLockSql {
 public:
  MyNamedLockSql(std::string_view database, std::string_view prefix);
  /// The text a name is locked under before the length rule (what the SHA2 is taken of).
  [[nodiscard]] std::string full_name(std::string_view name) const { return namespace_ + std::string(name); }
  /// Whether kServerLockName's rule hashes `full_name` (more than 64 characters or 192 bytes; lock
  /// names are valid UTF-8, and the connection's character set is utf8mb4, so characters are
  /// code points).
  [[nodiscard]] static bool hashed(std::string_view full_name) noexcept;
  /// GET_LOCK(full name, seconds): 0 when granted (the token is drawn when asked for: draw), or
  /// NULL. `lock_hashed` takes the SHA2 of the full name, for the names hashed() says.
  const MyStatement lock, lock_hashed;
  /// RELEASE_LOCK(full name), or of its SHA2: 1 released, 0 held by another session, NULL not held.
  const MyStatement unlock, unlock_hashed;
  const MyStatement ping;
  /// NEXTVAL of the token sequence.
  const MyStatement draw;

 private:
  std::string namespace_;
};

/// The longest one GET_LOCK wait may last on sessions with this statement timeout: it must end
/// before the client's read timeout gives up on the session.
[[nodiscard]] milliseconds longest_named_lock_wait(milliseconds statement_timeout);

/// Pins `lease` for GET_LOCK locks until destroyed; it then releases whatever is left on it
/// before the session goes back to the pool.
[[nodiscard]] std::unique_ptr<AdvisorySession> make_my_named_lock_session(SessionPool<MyConnection>::Lease lease,
                                                                          const MyNamedLockSql& sql);

/// The InvalidArgument for what GET_LOCK cannot express.
void check_named_lock_target(const AdvisoryTarget& target);

}  // namespace dblock::detail

#pragma once
// GET_LOCK mode on MySQL/MariaDB: named user locks on a pinned session, the analogue of
// PostgreSQL's session advisory locks.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "backends/advisory_backend.hpp"
#include "backends/mysql/my_connection.hpp"

namespace dblock::detail {

/// The statements of one installation. Server-side names are `<database>.<prefix>:<name>`, or
/// SHA2 of that text (64 hex characters) when it is longer than 64 characters (MySQL 8's limit)
/// or 192 bytes (MariaDB's: 64 four-byte characters are 256): one rule, so a name maps alike on
/// both servers.
class MyNamedLockSql {
 public:
  /// The statements' ids come from the store's `ids`.
  MyNamedLockSql(StatementIds& ids, std::string_view database, std::string_view prefix);
  /// The text a name is locked under before the length rule (what the SHA2 is taken of).
  [[nodiscard]] std::string full_name(std::string_view name) const { return namespace_ + std::string(name); }
  /// GET_LOCK(?, seconds) of a full name (GET_LOCK mode's, or the migration lock's): 0 when
  /// granted (the token is drawn when asked for: draw), or NULL.
  [[nodiscard]] const MyStatement& lock_for(std::string_view full_name) const noexcept {
    return hashed(full_name) ? lock_hashed_ : lock_;
  }
  /// RELEASE_LOCK(?) of a full name: 1 released, 0 held by another session, NULL not held.
  [[nodiscard]] const MyStatement& unlock_for(std::string_view full_name) const noexcept {
    return hashed(full_name) ? unlock_hashed_ : unlock_;
  }
  const MyStatement ping;
  /// NEXTVAL of the token sequence, written to a row (made durable by the write's commit).
  const MyStatement draw;

 private:
  /// The one rule for server-side names: the SHA2 of a full name longer than 64 characters or 192
  /// bytes (lock names are valid UTF-8 and the connection's character set is utf8mb4, so
  /// characters are code points); the statements ending in _hashed take the SHA2 on the server.
  [[nodiscard]] static bool hashed(std::string_view full_name) noexcept;

  const MyStatement lock_, lock_hashed_, unlock_, unlock_hashed_;
  std::string namespace_;
};

struct MyDatabase;

/// The wait_timeout (seconds) of a session pinned for GET_LOCK locks whose owner, while live, leaves
/// it silent for at most `silence`: rounded up, at least 1, at most the server's largest.
[[nodiscard]] std::int64_t named_lock_wait_timeout(std::chrono::milliseconds silence);

/// GET_LOCK mode on `database`'s sessions (which it must outlive). Not on a Galera node, where
/// GET_LOCK is node-local (my_backend leaves the role absent there).
[[nodiscard]] std::unique_ptr<AdvisoryBackend> make_my_advisory(MyDatabase& database);

}  // namespace dblock::detail

#pragma once
// Advisory mode on PostgreSQL: the statements, the pinned session that holds session locks, and
// transaction-scoped locks on a connection the application owns.

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/advisory_backend.hpp"
#include "backends/postgres/pg_connection.hpp"
#include "backends/postgres/pg_xact_lock.hpp"
#include "backends/session_pool.hpp"

namespace dblock::detail {

struct PgDatabase;

/// The longest one server-side wait for a session lock lasts; a longer wait is served in slices
/// (AdvisoryBackend::longest_server_wait). A statement holds a snapshot while it runs, so a waiter
/// in one long `pg_advisory_lock` would hold back VACUUM's horizon for the whole database; between
/// slices the session holds none. Short enough that VACUUM sees a horizon at most this old, long
/// enough that the round trip between slices is noise (doc/advisory.md).
inline constexpr std::chrono::milliseconds kPgAdvisoryWaitSlice{500};

/// The advisory statements of one installation: its token sequence and wait function; their ids
/// from the store's `ids`.
class PgAdvisorySql {
 public:
  PgAdvisorySql(StatementIds& ids, std::string_view schema, std::string_view prefix);

  /// One round trip, no wait, then the server pid. Session locks: 0 when granted (the token is
  /// drawn when asked for: draw()), NULL when not; transaction locks: the token or NULL.
  /// A session lock's statement takes one more parameter after the key (PgKeyParams::with_pid):
  /// the server process it must run on, 0 for any; on another one it takes nothing.
  [[nodiscard]] const PgStatement& try_lock(const AdvisoryTarget& target, bool xact) const;
  /// A fencing token from the sequence, then the server pid.
  [[nodiscard]] const PgStatement& draw() const { return draw_; }
  /// pg_advisory_unlock(_shared): granted-before flag, then the server pid.
  [[nodiscard]] const PgStatement& unlock(const AdvisoryTarget& target) const;
  /// The server-side wait bounded by lock_timeout (migration 0002): the token or NULL, then the pid.
  /// `xact` false: a session lock's, with the server process it must run on as its last parameter
  /// (wait_params), as try_lock's.
  [[nodiscard]] const PgStatement& wait(bool xact) const { return xact ? wait_ : wait_session_; }
  [[nodiscard]] const PgStatement& pid() const { return pid_; }

  /// `pid`: for a session lock (`xact` false), the server process the wait must run on, 0 for any.
  [[nodiscard]] static std::vector<std::string> wait_params(const AdvisoryTarget& target, bool xact,
                                                            std::chrono::milliseconds wait, std::int64_t pid = 0);

 private:
  static std::size_t variant(const AdvisoryTarget& target) {
    return (target.key.two_part() ? 2 : 0) + (target.shared ? 1 : 0);
  }
  std::vector<PgStatement> try_session_, try_xact_, unlock_;
  PgStatement wait_, wait_session_, pid_, draw_;
};

/// A key's one or two integers as text parameters, formatted on the stack: the hot path of a
/// lock cycle allocates nothing for them. Not copyable (the values point into the object).
class PgKeyParams {
 public:
  explicit PgKeyParams(const AdvisoryKey& key) noexcept;
  PgKeyParams(const PgKeyParams&) = delete;
  PgKeyParams& operator=(const PgKeyParams&) = delete;
  [[nodiscard]] std::span<const char* const> values() const noexcept { return std::span(values_).first(count_); }
  /// Appends the server process a session lock's try must run on (PgAdvisorySql::try_lock).
  PgKeyParams& with_pid(std::int64_t pid) noexcept {
    put(pid);
    return *this;
  }

 private:
  void put(std::int64_t value) noexcept;
  std::array<std::array<char, 24>, 3> text_{};
  std::array<const char*, 3> values_{};
  std::size_t count_ = 0;
};

/// Pins `lease` for advisory locks until destroyed; it then releases whatever is left on it
/// before the session goes back to the pool.
/// A lock statement runs only on the server process the connection logged in to (libpq's
/// PQbackendPID), or on the first one it reported when `session_pooler` (the URI's
/// pool_mode=session: a pooler's login reports a pid of its own). On another one it takes nothing
/// and the session is refused, and `mode` is told: a pooler sits in between.
[[nodiscard]] std::unique_ptr<AdvisorySession> make_pg_advisory_session(SessionPool<PgConnection>::Lease lease,
                                                                        const PgAdvisorySql& sql, PgStatementMode& mode,
                                                                        bool session_pooler);

/// pg_advisory_xact_lock(_shared) on the application's connection inside its open transaction,
/// with the token: one round trip, no prepared statement left behind, a timeout does not abort
/// the transaction. @throws InvalidArgument when `conn` has no open, healthy transaction.
[[nodiscard]] std::optional<std::int64_t> pg_xact_lock(PGconn* conn, const PgAdvisorySql& sql,
                                                       const AdvisoryTarget& target, std::chrono::milliseconds wait);

/// Why advisory mode is refused on `database`, if it is: an engine whose advisory functions do not
/// lock, or a transaction pooler in between (found out at the first statements, so asked anew).
[[nodiscard]] std::optional<std::string> pg_advisory_refusal(const PgDatabase& database);

/// The advisory role: sessions pinned from `database`'s pool, which must outlive it.
[[nodiscard]] std::unique_ptr<AdvisoryBackend> make_pg_advisory(PgDatabase& database);

/// Transaction-scoped locks with `database`'s advisory statements.
[[nodiscard]] std::unique_ptr<PgXactLocks> make_pg_xact_locks(const PgDatabase& database);

}  // namespace dblock::detail

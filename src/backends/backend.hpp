#pragma once
// The one internal interface every database implements. It speaks locks, not SQL: each call is
// one domain operation. Implementations hold no threads and no policy (no retries, no waiting);
// they translate driver errors into dblock exceptions, marking transient ones and those whose
// outcome is unknown so that the core can decide.

#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <dblock/advisory_key.hpp>
#include <dblock/errors.hpp>
#include <dblock/store.hpp>

#include "backends/schema_objects.hpp"

namespace dblock::detail {

using std::chrono::milliseconds;

/// A deadlock, serialization failure or busy database: safe to run the statement again.
class TransientError : public DatabaseError {
 public:
  using DatabaseError::DatabaseError;
};

/// The connection broke after the statement may have been sent: it may or may not have run.
class OutcomeUnknown : public ConnectionError {
 public:
  using ConnectionError::ConnectionError;
};

struct Grant {
  std::int64_t count = 0;  // re-entrancy depth after this acquisition
  std::int64_t token = 0;
};

/// A lock to renew: the row must still carry this owner and token and a live lease.
struct HeldRef {
  std::string_view name;
  std::string_view owner;
  std::int64_t token = 0;
  milliseconds ttl{0};
};

/// Wakes waiters when a name is released. Used by one thread at a time, except interrupt().
class ReleaseListener {
 public:
  virtual ~ReleaseListener() = default;
  /// From now on releases of `name` are reported (and releasers know someone waits).
  virtual void watch(std::string_view name) = 0;
  virtual void unwatch(std::string_view name) = 0;
  /// Blocks up to `timeout` (or until interrupt()) and returns the names released meanwhile.
  /// @throws ConnectionError when the listening session broke: notifications may have been missed.
  virtual std::vector<std::string> wait(milliseconds timeout) = 0;
  /// Thread-safe: makes a concurrent or the next wait() return at once.
  virtual void interrupt() noexcept = 0;
};

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
  /// One round trip: takes the lock and draws its fencing token. `wait` zero: try once; else the
  /// server's own blocking wait, bounded by `wait`. Empty when not granted.
  /// @throws ConnectionError when the session broke (every lock on it is gone with it).
  virtual std::optional<std::int64_t> lock(const AdvisoryTarget& target, milliseconds wait) = 0;
  /// False when the session did not hold the lock.
  virtual bool unlock(const AdvisoryTarget& target) = 0;
  /// One round trip. @throws ConnectionError when the session broke.
  virtual void check_alive() = 0;
};

/// One embedded migration, placeholders not yet filled.
struct MigrationFile {
  int version = 0;
  std::string_view name;
  std::string_view checksum;  // SHA-256 of the file as shipped, hex
  std::string_view sql;
};

struct AppliedMigration {
  int version = 0;
  std::string name;
  std::string checksum;
  bool success = false;
};

/// Holds the database-level migration lock on a dedicated session for as long as it lives.
class MigrationSession {
 public:
  virtual ~MigrationSession() = default;
  /// Creates the schema and the history table when missing, then reads the history.
  virtual std::vector<AppliedMigration> history() = 0;
  /// Runs one migration and records it in the history, in one transaction where the dialect allows.
  virtual void apply(const MigrationFile& migration, std::string_view applied_by) = 0;
  /// Deletes the history record of `version` (repair of a failed record).
  virtual void forget(int version) = 0;
  /// Makes the run durable where the dialect holds the whole run in one transaction (SQLite);
  /// without it, the destructor rolls back. Called once, after the last apply().
  virtual void finish() = 0;
};

/// The performance floor for `dblock bench`: this backend's own acquire and release statements run
/// with the bare driver on one dedicated session, prepared once — no pool, no validation, no
/// bookkeeping. Single-threaded.
class RawLockClient {
 public:
  virtual ~RawLockClient() = default;
  /// The token when granted.
  virtual std::optional<std::int64_t> acquire(const std::string& name, const std::string& owner,
                                              std::int64_t ttl_ms) = 0;
  virtual bool release(const std::string& name, const std::string& owner, std::int64_t token) = 0;
  /// The server's own blocking lock (PostgreSQL: pg_advisory_lock), the floor for hand-offs;
  /// false when the dialect has none.
  virtual bool blocking_lock(std::int64_t key) = 0;
  virtual void blocking_unlock(std::int64_t key) = 0;
  /// The server functions blocking_lock/unlock call, for the benchmark's labels.
  [[nodiscard]] virtual std::string_view blocking_lock_functions() const noexcept { return "none"; }
};

class Backend {
 public:
  virtual ~Backend() = default;

  [[nodiscard]] virtual std::string_view dialect() const noexcept = 0;

  /// Insert, re-enter (same owner, live, token `held_token`: count+1, same token, the later of the
  /// two expiries) or take over (count 1, new token) an expired row or a live one of `owner` with
  /// another token (a leftover the caller no longer counts), in one round trip, with one clock
  /// reading; empty when another owner holds a live lease. `held_token`: the token of the grant
  /// the caller holds on `name`, 0 for none.
  virtual std::optional<Grant> try_acquire(std::string_view name, std::string_view owner, milliseconds ttl,
                                           std::int64_t held_token) = 0;
  /// Decrements the count and deletes the row at zero. Returns the count left, or empty when the
  /// row does not carry this owner and token (nothing is changed then).
  virtual std::optional<std::int64_t> release(std::string_view name, std::string_view owner, std::int64_t token) = 0;
  /// Renews every given lock in one statement, never shortening a lease, and returns the positions
  /// in `held` of those renewed (the row still carried that name, owner and token and a live
  /// lease). Waits for the reply until `reply_by` at most where the driver allows (PostgreSQL;
  /// MySQL and SQLite are bounded by their statement timeout), then abandons the session and
  /// throws OutcomeUnknown.
  virtual std::vector<std::size_t> renew(std::span<const HeldRef> held,
                                         std::chrono::steady_clock::time_point reply_by) = 0;
  /// Read-only: the lease left on `name`, empty when there is no row.
  virtual std::optional<milliseconds> lease_left(std::string_view name) = 0;
  /// Read-only: the row for `name`, if any.
  std::optional<LockInfo> read(std::string_view name) {
    auto rows = list_rows(name);
    if (rows.empty()) return std::nullopt;
    return std::move(rows.front());
  }
  /// Read-only: every row, ordered by name.
  std::vector<LockInfo> list() { return list_rows({}); }
  virtual bool force_release(std::string_view name) = 0;
  /// Deletes at most `batch` rows whose lease has ended at the moment of deletion, skipping rows
  /// another reaper or an acquirer is working on. Returns how many it deleted.
  virtual std::size_t reap(std::size_t batch) = 0;
  virtual LockCensus census() = 0;

  /// A listener for release notifications, or nullptr when the database has none (waiters poll).
  virtual std::unique_ptr<ReleaseListener> listen() { return nullptr; }

  /// Whether pin_advisory_session() works here (advisory mode).
  [[nodiscard]] virtual bool has_advisory_locks() const noexcept { return false; }
  /// The message for advisory calls on a database that has none.
  [[nodiscard]] virtual std::string no_advisory_message() const {
    return std::string(dialect()) +
           " has no advisory locks: use LockMode::table (advisory mode needs PostgreSQL, or MySQL/MariaDB's GET_LOCK)";
  }
  /// @throws InvalidArgument when this database's advisory locks cannot take `target` (e.g. a
  /// shared lock or an integer key on MySQL), before anything is sent.
  virtual void check_advisory_target(const AdvisoryTarget& target) const { (void)target; }
  /// Pins a pooled session for advisory locks. @throws InvalidArgument when the database has none.
  virtual std::unique_ptr<AdvisorySession> pin_advisory_session() {
    throw InvalidArgument(no_advisory_message());
  }
  /// Registers `give_back`, which the pool calls when it runs dry, before a caller waits: it hands
  /// back the sessions its owner keeps out of the pool while idle. Held weakly: it is forgotten
  /// when the caller lets go of it.
  virtual void on_pool_dry(std::weak_ptr<const std::function<void()>> give_back) { (void)give_back; }

  /// The applied schema version. @throws SchemaError(missing) when dblock's tables do not exist.
  virtual int schema_version() = 0;
  /// Read-only, takes no lock: the history, or empty when there is no history table yet.
  virtual std::optional<std::vector<AppliedMigration>> read_history() = 0;
  /// For `dblock bench`: a bare-driver client running the same statements (see RawLockClient).
  virtual std::unique_ptr<RawLockClient> raw_client() = 0;
  /// For `dblock bench`: inserts `count` rows named `<stem><i>` whose lease has already ended.
  virtual void seed_expired(std::string_view stem, std::size_t count) = 0;

  /// Takes the migration lock, polling until `lock_timeout`. @throws Timeout.
  virtual std::unique_ptr<MigrationSession> begin_migration(milliseconds lock_timeout) = 0;
  /// Read-only: what the catalog holds under any of `names` in dblock's schema (PostgreSQL), database
  /// (MySQL) or file (SQLite): tables with their columns, sequences, indexes (MySQL: those of the
  /// tables named), functions and procedures with their bodies, triggers, views; any other relation
  /// as kind "other".
  virtual std::vector<CatalogObject> catalog(std::span<const std::string> names) = 0;
  /// Read-only, before `up` creates anything: the rights the connected role lacks to create
  /// `to_create`, to re-define `to_redefine` (objects that exist and the migrations define again)
  /// and to write the history table (which is in one of the two), each named as a DBA would grant
  /// it. Empty when nothing is missing, when the dialect has no roles, or when the database does
  /// not show every right the session has (nothing is refused on a guess).
  virtual std::vector<std::string> missing_migration_rights(std::span<const CatalogObject> to_create,
                                                            std::span<const CatalogObject> to_redefine) {
    (void)to_create;
    (void)to_redefine;
    return {};
  }
  /// Whether a migration recorded as failed may be completed by running it again: DDL is not
  /// transactional here (a failed record may mean "broken off part-way") and every statement of
  /// the shipped migrations is safe to run again.
  [[nodiscard]] virtual bool migrations_resume() const noexcept { return false; }
  /// A migration's SQL with this store's schema and prefix filled in, as `up` runs it.
  [[nodiscard]] virtual std::string filled(std::string_view migration_sql) const = 0;
  /// The history table's DDL, as the migration session runs it.
  [[nodiscard]] virtual std::string history_ddl() const = 0;

 protected:
  /// Rows ordered by name: all of them when `only_name` is empty (lock names never are).
  virtual std::vector<LockInfo> list_rows(std::string_view only_name) = 0;
};

}  // namespace dblock::detail

#pragma once
// The factory's product: one database, which hands out its roles, each an object with its own
// header and its own clients: locks (the core's managers, Store, the reaper), groups of holders,
// advisory sessions, release notifications, migrations (the migrator), the bench floor (`dblock
// bench`), fenced transactions, occurrence records and PostgreSQL's transaction-scoped locks. The
// root carries no role itself; a role a database lacks is absent with the reason the caller is told.
// Clients pick their roles once, when they are built, never per operation.
// A role speaks locks, not SQL: each call is one domain operation. It holds no threads and no
// policy (no retries, no waiting); it translates driver errors into dblock exceptions, marking
// transient ones and those whose outcome is unknown (backend_errors.hpp) so that the core decides.

#include <string>

#include "backends/dialect_bound.hpp"
#include "backends/role.hpp"
// The role headers, for the dialect files that still reach their roles' types through this one
// (postgres/, mysql/); a client names the role header it uses.
#include "backends/advisory_backend.hpp"
#include "backends/bench_backend.hpp"
#include "backends/fence_backend.hpp"
#include "backends/group_backend.hpp"
#include "backends/lock_backend.hpp"
#include "backends/migration_backend.hpp"
#include "backends/notification_backend.hpp"
#include "backends/occurrence_backend.hpp"
#include "backends/queue_backend.hpp"
#include "backends/test_control_backend.hpp"

namespace dblock::detail {

class PgXactLocks;  // postgres/pg_xact_lock.hpp

class Backend : public virtual DialectBound {
 public:
  /// Every database has locks.
  virtual LockBackend& locks() = 0;
  virtual Role<GroupBackend> groups() = 0;
  /// Absent where a database has no advisory locks usable by dblock (SQLite, a Galera node,
  /// CockroachDB/YugabyteDB, PostgreSQL behind a transaction pooler). Asked anew on each call:
  /// PostgreSQL finds a transaction pooler out at its first statements.
  virtual Role<AdvisoryBackend> advisory() = 0;
  /// Absent where waiters poll (MySQL, SQLite).
  virtual Role<NotificationBackend> notifications() = 0;
  virtual Role<MigrationBackend> migrations() = 0;
  virtual Role<BenchBackend> bench() = 0;
  virtual Role<FenceBackend> fences() = 0;
  virtual Role<OccurrenceBackend> occurrences() = 0;
  /// Waiters as rows, served in arrival order (doc/fair-queue.md); absent where not built yet.
  virtual Role<QueueBackend> queue() {
    return Role<QueueBackend>::absent("fair queue: not built yet for " + std::string(to_string(dialect())) +
                                      " (doc/fair-queue.md)");
  }
  /// dblock::testing only: an SQLite store opened with a test clock.
  virtual Role<TestControlBackend> test_control() {
    return Role<TestControlBackend>::absent("test control: only a dblock::testing store (SQLite, a test clock) has it");
  }
  /// PostgreSQL only.
  virtual Role<PgXactLocks> xact_locks() {
    return Role<PgXactLocks>::absent("xact lock: the store is " + std::string(to_string(dialect())) +
                                     "; transaction-scoped locks need a PostgreSQL store");
  }
};

}  // namespace dblock::detail

#include "backends/postgres/pg_backend.hpp"

#include <utility>

#include <fmt/format.h>

#include "backends/postgres/pg_advisory.hpp"
#include "backends/postgres/pg_bench.hpp"
#include "backends/postgres/pg_database.hpp"
#include "backends/postgres/pg_fence.hpp"
#include "backends/postgres/pg_groups.hpp"
#include "backends/postgres/pg_listener.hpp"
#include "backends/postgres/pg_locks.hpp"
#include "backends/postgres/pg_migration.hpp"
#include "backends/postgres/pg_occurrences.hpp"
#include "backends/postgres/pg_queue.hpp"

namespace dblock::detail {

namespace {

/// The root of one PostgreSQL store: it owns what the roles share and one object per role, and
/// carries no role itself.
class PgBackend final : public Backend {
 public:
  PgBackend(const StoreUri& uri, const BackendSettings& settings)
      : database_(uri, settings),
        locks_(make_pg_locks(database_)),
        groups_(make_pg_groups(database_)),
        queue_(make_pg_queue(database_)),
        advisory_(make_pg_advisory(database_)),
        notifications_(make_pg_notifications(database_)),
        migrations_(make_pg_migrations(database_, uri)),
        bench_(make_pg_bench(database_)),
        xact_locks_(make_pg_xact_locks(database_)),
        occurrences_(make_pg_occurrences(database_.pool, database_.ids, uri.schema, uri.prefix)),
        fences_(make_pg_fences(database_.pool, database_.ids, uri.schema, uri.prefix, uri.redacted)) {}

  Dialect dialect() const noexcept override { return Dialect::postgresql; }

  LockBackend& locks() override { return *locks_; }
  Role<GroupBackend> groups() override { return Role<GroupBackend>::of(*groups_); }
  Role<QueueBackend> queue() override { return Role<QueueBackend>::of(*queue_); }
  // Asked on every call: a transaction pooler is found out at the first statements.
  Role<AdvisoryBackend> advisory() override {
    if (auto why = pg_advisory_refusal(database_)) return Role<AdvisoryBackend>::absent(std::move(*why));
    return Role<AdvisoryBackend>::of(*advisory_);
  }
  Role<NotificationBackend> notifications() override { return Role<NotificationBackend>::of(*notifications_); }
  Role<MigrationBackend> migrations() override { return Role<MigrationBackend>::of(*migrations_); }
  Role<BenchBackend> bench() override { return Role<BenchBackend>::of(*bench_); }
  Role<FenceBackend> fences() override { return Role<FenceBackend>::of(*fences_); }
  Role<OccurrenceBackend> occurrences() override { return Role<OccurrenceBackend>::of(*occurrences_); }
  Role<PgXactLocks> xact_locks() override { return Role<PgXactLocks>::of(*xact_locks_); }

 private:
  PgDatabase database_;  // first: every role below runs on its sessions and is destroyed before it
  std::unique_ptr<LockBackend> locks_;
  std::unique_ptr<GroupBackend> groups_;
  std::unique_ptr<QueueBackend> queue_;
  std::unique_ptr<AdvisoryBackend> advisory_;
  std::unique_ptr<NotificationBackend> notifications_;
  std::unique_ptr<MigrationBackend> migrations_;
  std::unique_ptr<BenchBackend> bench_;
  std::unique_ptr<PgXactLocks> xact_locks_;
  std::unique_ptr<OccurrenceBackend> occurrences_;
  std::unique_ptr<FenceBackend> fences_;
};

}  // namespace

std::string postgres_driver_version() {
  int version = PQlibVersion();  // e.g. 150018
  return fmt::format("libpq {}.{}", version / 10000, version % 10000);
}

std::unique_ptr<Backend> make_postgres_backend(const StoreUri& uri, const BackendSettings& settings) {
  return std::make_unique<PgBackend>(uri, settings);
}

}  // namespace dblock::detail

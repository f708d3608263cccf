// SOCI's sqlite3 header wraps <sqlite3.h> in namespace sqlite_api: include it first, and never
// <sqlite3.h> directly (doc/database-facts.md §4).
#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>
#include <soci/version.h>

#include "backends/sqlite/sqlite_backend.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "backends/advisory_backend.hpp"
#include "backends/session_pool.hpp"
#include "backends/sqlite/sqlite_bench.hpp"
#include "backends/sqlite/sqlite_fence.hpp"
#include "backends/sqlite/sqlite_groups.hpp"
#include "backends/sqlite/sqlite_locks.hpp"
#include "backends/sqlite/sqlite_migration.hpp"
#include "backends/sqlite/sqlite_occurrences.hpp"
#include "backends/sqlite/sqlite_queue.hpp"
#include "backends/sqlite/sqlite_session.hpp"
#include "backends/sqlite/sqlite_test_control.hpp"

namespace dblock::detail {

namespace {

/// The root: the file's session pool and one object per role on it.
class SqliteBackend final : public Backend {
 public:
  SqliteBackend(const StoreUri& uri, std::chrono::milliseconds busy_timeout, const BackendSettings& settings)
      : path_(uri.driver_uri),
        clock_(settings.clock),
        hook_(settings.hook),
        sql_(uri.prefix, clock_ ? kTestNow : kNow),
        logger_(settings.logger),
        writers_(busy_timeout, uri.queued_writers),
        pool_(
            [this, busy_timeout] {
              return std::make_unique<SqliteSession>(path_, busy_timeout, sql_, writers_, clock_.get(), hook_.get());
            },
            uri.redacted, uri.pool_size, busy_timeout) {
    auto first = pool_.lease();  // opens (and creates) the file now, so a bad path fails at open
    locks_ = make_sqlite_locks(pool_, writers_.queued());
    groups_ = make_sqlite_groups(pool_);
    migrations_ = make_sqlite_migrations(pool_, sql_, uri.prefix);
    bench_ = make_sqlite_bench(pool_, path_, busy_timeout, sql_, uri.prefix);
    occurrences_ = make_sqlite_occurrences(pool_, uri.prefix, sql_.now);
    queue_ = make_sqlite_queue(pool_, uri.prefix, sql_.now);
    fences_ = make_sqlite_fences(pool_, uri.prefix, path_);
    if (clock_) test_control_ = make_sqlite_test_control(pool_, uri.prefix, sql_.now);
  }

  Dialect dialect() const noexcept override { return Dialect::sqlite; }

  LockBackend& locks() override { return *locks_; }
  Role<GroupBackend> groups() override { return Role<GroupBackend>::of(*groups_); }
  Role<AdvisoryBackend> advisory() override {
    return Role<AdvisoryBackend>::absent(no_advisory_locks_message(Dialect::sqlite));
  }
  Role<NotificationBackend> notifications() override {
    return Role<NotificationBackend>::absent("SQLite sends no release notifications: waiters poll");
  }
  Role<MigrationBackend> migrations() override { return Role<MigrationBackend>::of(*migrations_); }
  Role<BenchBackend> bench() override { return Role<BenchBackend>::of(*bench_); }
  Role<FenceBackend> fences() override { return Role<FenceBackend>::of(*fences_); }
  Role<OccurrenceBackend> occurrences() override { return Role<OccurrenceBackend>::of(*occurrences_); }
  Role<QueueBackend> queue() override { return Role<QueueBackend>::of(*queue_); }
  Role<TestControlBackend> test_control() override {
    if (!test_control_) return Backend::test_control();
    return Role<TestControlBackend>::of(*test_control_);
  }

 private:
  std::string path_;
  std::shared_ptr<const DatabaseClock> clock_;  // dblock::testing's seams, null in production; before pool_
  std::shared_ptr<StatementHook> hook_;
  SqliteSql sql_;
  std::shared_ptr<spdlog::logger> logger_;
  SqliteWriters writers_;  // before pool_: its sessions share it
  SessionPool<SqliteSession> pool_;
  // After pool_: they use its sessions.
  std::unique_ptr<LockBackend> locks_;
  std::unique_ptr<GroupBackend> groups_;
  std::unique_ptr<MigrationBackend> migrations_;
  std::unique_ptr<BenchBackend> bench_;
  std::unique_ptr<OccurrenceBackend> occurrences_;
  std::unique_ptr<QueueBackend> queue_;
  std::unique_ptr<FenceBackend> fences_;
  std::unique_ptr<TestControlBackend> test_control_;  // dblock::testing stores only
};

}  // namespace

std::string sqlite_driver_version() {
  return fmt::format("SOCI {}.{}.{}, SQLite {}", SOCI_VERSION / 100000, SOCI_VERSION / 100 % 1000, SOCI_VERSION % 100,
                     sqlite_api::sqlite3_libversion());
}

std::unique_ptr<Backend> make_sqlite_backend(const StoreUri& uri, const BackendSettings& settings) {
  return std::make_unique<SqliteBackend>(uri, settings.connect_timeout, settings);
}

}  // namespace dblock::detail

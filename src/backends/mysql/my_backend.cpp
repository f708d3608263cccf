#include "backends/mysql/my_backend.hpp"

#include <mysql_driver.h>

#include <fmt/format.h>

#include "backends/mysql/my_advisory.hpp"
#include "backends/mysql/my_bench.hpp"
#include "backends/mysql/my_database.hpp"
#include "backends/mysql/my_fence.hpp"
#include "backends/mysql/my_groups.hpp"
#include "backends/mysql/my_locks.hpp"
#include "backends/mysql/my_migration.hpp"
#include "backends/mysql/my_occurrences.hpp"
#include "backends/mysql/my_queue.hpp"

namespace dblock::detail {

namespace {

/// The root: the shared database and one object per role, which its accessors hand out.
class MyBackend final : public Backend {
 public:
  MyBackend(const StoreUri& uri, const BackendSettings& settings)
      : db_(uri, settings),
        locks_(make_my_locks(db_)),
        groups_(make_my_groups(db_)),
        advisory_(db_.galera ? nullptr : make_my_advisory(db_)),
        migrations_(make_my_migrations(db_)),
        bench_(make_my_bench(db_)),
        occurrences_(make_my_occurrences(db_.pool, db_.ids, db_.prefix)),
        fences_(make_my_fences(db_.pool, db_.ids, db_.prefix, db_.redacted)),
        queue_(make_my_queue(db_.pool, db_.ids, db_.prefix)) {}

  Dialect dialect() const noexcept override { return Dialect::mysql; }

  LockBackend& locks() override { return *locks_; }
  Role<GroupBackend> groups() override { return Role<GroupBackend>::of(*groups_); }
  Role<AdvisoryBackend> advisory() override {
    if (!advisory_)
      return Role<AdvisoryBackend>::absent(fmt::format(
          "{} is a node of a MariaDB Galera cluster, where GET_LOCK is node-local: two nodes would grant one name at "
          "once. Use LockMode::table, which the cluster certifies",
          db_.redacted));
    return Role<AdvisoryBackend>::of(*advisory_);
  }
  Role<NotificationBackend> notifications() override {
    return Role<NotificationBackend>::absent("MySQL/MariaDB sends no release notifications: waiters poll");
  }
  Role<MigrationBackend> migrations() override { return Role<MigrationBackend>::of(*migrations_); }
  Role<BenchBackend> bench() override { return Role<BenchBackend>::of(*bench_); }
  Role<FenceBackend> fences() override { return Role<FenceBackend>::of(*fences_); }
  Role<OccurrenceBackend> occurrences() override { return Role<OccurrenceBackend>::of(*occurrences_); }
  Role<QueueBackend> queue() override { return Role<QueueBackend>::of(*queue_); }

 private:
  MyDatabase db_;  // first: every role uses its pool and statements (and is destroyed before it)
  std::unique_ptr<LockBackend> locks_;
  std::unique_ptr<GroupBackend> groups_;
  std::unique_ptr<AdvisoryBackend> advisory_;  // none on a Galera node
  std::unique_ptr<MigrationBackend> migrations_;
  std::unique_ptr<BenchBackend> bench_;
  std::unique_ptr<OccurrenceBackend> occurrences_;
  std::unique_ptr<FenceBackend> fences_;
  std::unique_ptr<QueueBackend> queue_;
};

}  // namespace

std::string mysql_database_of(const StoreUri& uri) { return parse_mysql_uri(uri.driver_uri, uri.redacted).database; }

std::string mysql_driver_version() {
  auto* driver = sql::mysql::get_mysql_driver_instance();
  return fmt::format("MySQL Connector/C++ {}.{}.{}", driver->getMajorVersion(), driver->getMinorVersion(),
                     driver->getPatchVersion());
}

std::unique_ptr<Backend> make_mysql_backend(const StoreUri& uri, const BackendSettings& settings) {
  return std::make_unique<MyBackend>(uri, settings);
}

}  // namespace dblock::detail

// SOCI's sqlite3 header wraps <sqlite3.h> in namespace sqlite_api: include it first, and never
// <sqlite3.h> directly (doc/database-facts.md §4).
#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>
#include <soci/version.h>

#include "backends/sqlite/sqlite_backend.hpp"


#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "backends/session_pool.hpp"
#include "backends/sqlite/sqlite_bench.hpp"
#include "backends/sqlite/sqlite_migration.hpp"
#include "backends/sqlite/sqlite_fence.hpp"
#include "backends/sqlite/sqlite_occurrences.hpp"
#include "backends/sqlite/sqlite_session.hpp"
#include "base/json.hpp"

namespace dblock::detail {

namespace {

class SqliteBackend final : public Backend {
 public:
  SqliteBackend(const StoreUri& uri, std::chrono::milliseconds busy_timeout, std::shared_ptr<spdlog::logger> logger)
      : path_(uri.driver_uri),
        prefix_(uri.prefix),
        busy_timeout_(busy_timeout),
        sql_(uri.prefix),
        migration_dialect_(uri.prefix),
        logger_(std::move(logger)),
        pool_([this] { return std::make_unique<SqliteSession>(path_, busy_timeout_, sql_); }, uri.redacted,
              uri.pool_size, busy_timeout) {
    auto first = pool_.lease();  // opens (and creates) the file now, so a bad path fails at open
    occurrences_ = make_sqlite_occurrences(pool_, uri.prefix);
    fences_ = make_sqlite_fences(pool_, uri.prefix, path_);
  }

  OccurrenceBackend* occurrences() override { return occurrences_.get(); }
  FenceBackend* fences() override { return fences_.get(); }

  Dialect dialect() const noexcept override { return Dialect::sqlite; }

  std::optional<Grant> try_acquire(std::string_view name, std::string_view owner, milliseconds ttl,
                                   std::int64_t held_token, milliseconds lock_delay) override {
    auto session = pool_.lease();
    return session->guarded("acquire", [&] { return session->try_acquire(name, owner, ttl, held_token, lock_delay); });
  }

  std::optional<std::int64_t> release(std::string_view name, std::string_view owner, std::int64_t token) override {
    auto session = pool_.lease();
    return session->guarded("release", [&] { return session->release(name, owner, token); });
  }

  std::optional<std::int64_t> release_last(std::string_view name, std::string_view owner, std::int64_t token) override {
    auto session = pool_.lease();
    return session->guarded("release", [&] { return session->release_last(name, owner, token); });
  }

  std::vector<std::size_t> renew(std::span<const HeldRef> held, std::chrono::steady_clock::time_point) override {
    std::string json = "[";
    for (std::size_t i = 0; i < held.size(); ++i)
      json += fmt::format("{}[{},{},{},{}]", i == 0 ? "" : ",", json_string(held[i].name), json_string(held[i].owner),
                          held[i].token, held[i].ttl.count());
    json += "]";
    auto session = pool_.lease();
    return session->guarded("renew", [&] { return session->renew(held, json); });
  }

  std::optional<milliseconds> lease_left(std::string_view name) override {
    auto session = pool_.lease();
    return session->guarded("reading a lease", [&] { return session->lease_left(name); });
  }

  bool force_release(std::string_view name) override {
    auto session = pool_.lease();
    return session->guarded("force release", [&] { return session->force_release(name); });
  }

  bool revoke(std::string_view name) override {
    auto session = pool_.lease();
    return session->guarded("revoke", [&] { return session->revoke(name); });
  }

  bool acknowledge_revoked(std::string_view name, std::string_view owner, std::int64_t token) override {
    auto session = pool_.lease();
    return session->guarded("release", [&] { return session->acknowledge_revoked(name, owner, token); });
  }

  bool release_keeping(std::string_view name, std::string_view owner, std::int64_t token,
                       milliseconds min_hold) override {
    auto session = pool_.lease();
    return session->guarded("release", [&] { return session->release_keeping(name, owner, token, min_hold); });
  }

  std::size_t reap(std::size_t batch) override {
    auto session = pool_.lease();
    return session->guarded("reaping", [&] { return session->reap(batch); });
  }

  LockCensus census() override {
    auto session = pool_.lease();
    return session->guarded("counting locks", [&] { return session->census(); });
  }

  bool has_groups() const noexcept override { return true; }

  std::optional<Grant> try_acquire_member(std::string_view name, std::string_view owner, HolderKind kind,
                                          std::int64_t capacity, milliseconds ttl, std::int64_t held_token) override {
    auto session = pool_.lease();
    return session->guarded("acquire",
                            [&] { return session->acquire_member(name, owner, kind, capacity, ttl, held_token); });
  }

  std::optional<std::int64_t> release_member(std::string_view name, std::string_view owner, HolderKind kind,
                                             std::int64_t token) override {
    auto session = pool_.lease();
    return session->guarded("release", [&] { return session->release_member(name, owner, kind, token); });
  }

  std::vector<std::size_t> renew_members(std::span<const HeldRef> held, std::chrono::steady_clock::time_point) override {
    auto session = pool_.lease();
    return session->guarded("renew", [&] { return session->renew_members(held); });
  }

  std::optional<milliseconds> lease_left_marking_writer(std::string_view name, std::string_view owner,
                                                        milliseconds mark_for, bool& marked) override {
    auto session = pool_.lease();
    return session->guarded("reading a lease",
                            [&] { return session->lease_left_marking_writer(name, owner, mark_for, marked); });
  }

  std::optional<milliseconds> first_lease_end(std::string_view name) override {
    auto session = pool_.lease();
    return session->guarded("reading a lease", [&] { return session->first_lease_end(name); });
  }

  void unmark_writer(std::string_view name, std::string_view owner) override {
    auto session = pool_.lease();
    session->guarded("unmarking a writer", [&] { session->unmark_writer(name, owner); });
  }

  std::unique_ptr<RawLockClient> raw_client() override {
    return make_sqlite_raw_client(path_, busy_timeout_, sql_);
  }
  std::unique_ptr<RawWriteClient> raw_write_client() override {
    return make_sqlite_raw_write_client(path_, busy_timeout_, prefix_);
  }

  void seed_expired(std::string_view stem, std::size_t count) override {
    auto session = pool_.lease();
    session->guarded("seeding expired rows", [&] {
      std::string stem_text(stem);
      auto rows = static_cast<std::int64_t>(count);
      session->session() << sql_.seed_expired, soci::use(rows, "count"), soci::use(stem_text, "stem");
    });
  }

  int schema_version() override {
    auto session = pool_.lease();
    return session->guarded("reading the schema version", [&] {
      int version = 0;
      session->session() << sql_.schema_version, soci::into(version);
      return version;
    });
  }

  std::optional<std::vector<AppliedMigration>> read_history() override {
    auto session = pool_.lease();
    try {
      return session->guarded("reading the migration history",
                              [&] { return read_history_rows(session->session(), sql_); });
    } catch (const SchemaError&) {
      return std::nullopt;  // no history table yet
    }
  }

  std::vector<CatalogObject> catalog(std::span<const std::string> names) override {
    std::string joined;
    for (auto& name : names) joined += (joined.empty() ? "" : ",") + name;
    auto session = pool_.lease();
    return session->guarded("reading the catalog", [&] {
      std::vector<CatalogObject> objects;
      soci::rowset<soci::row> rows = (session->session().prepare << R"(
SELECT m.name, m.type, m.tbl_name, coalesce(m.sql, ''),
       CASE m.type WHEN 'table' THEN (SELECT group_concat(c.name, ',') FROM pragma_table_info(m.name) c)
                   WHEN 'index' THEN (SELECT group_concat(i.name, ',') FROM pragma_index_info(m.name) i) ELSE '' END,
       CASE WHEN m.type = 'table' THEN (SELECT group_concat(lower(c.type) || CASE WHEN c."notnull" THEN ' not null' ELSE '' END, ',')
                                        FROM pragma_table_info(m.name) c) ELSE '' END
FROM sqlite_master m WHERE instr(',' || :names || ',', ',' || m.name || ',') > 0 ORDER BY m.type, m.name)",
                                      soci::use(joined, "names"));
      for (auto& row : rows) {
        CatalogObject object{row.get<std::string>(1), row.get<std::string>(0), row.get<std::string>(2),
                             split_list(row.get<std::string>(4, "")), row.get<std::string>(3), false,
                             split_list(row.get<std::string>(5, ""))};
        if (object.kind != "trigger") object.definition.clear();  // tables and indexes are compared by shape
        if (object.kind != "index" && object.kind != "trigger") object.table.clear();
        objects.push_back(std::move(object));
      }
      return objects;
    });
  }
  const MigrationDialect& migration_dialect() const override { return migration_dialect_; }

  std::unique_ptr<MigrationSession> open_migration() override {
    return make_sqlite_migration_session(pool_.connect_dedicated(), sql_);
  }

 private:
  std::vector<LockInfo> list_rows(std::string_view only_name, std::size_t limit) override {
    auto session = pool_.lease();
    return session->guarded("listing locks", [&] { return session->list(only_name, limit); });
  }

  std::string path_;
  std::string prefix_;
  std::chrono::milliseconds busy_timeout_;
  SqliteSql sql_;
  SqliteMigrationDialect migration_dialect_;
  std::shared_ptr<spdlog::logger> logger_;
  SessionPool<SqliteSession> pool_;
  std::unique_ptr<OccurrenceBackend> occurrences_;  // after pool_: it uses its sessions
  std::unique_ptr<FenceBackend> fences_;            // likewise
};

}  // namespace

std::string sqlite_driver_version() {
  return fmt::format("SOCI {}.{}.{}, SQLite {}", SOCI_VERSION / 100000, SOCI_VERSION / 100 % 1000, SOCI_VERSION % 100,
                     sqlite_api::sqlite3_libversion());
}

std::unique_ptr<Backend> make_sqlite_backend(const StoreUri& uri, const BackendSettings& settings) {
  return std::make_unique<SqliteBackend>(uri, settings.connect_timeout, settings.logger);
}

}  // namespace dblock::detail

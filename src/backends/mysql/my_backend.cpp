#include "backends/mysql/my_backend.hpp"

#include <mysql_driver.h>

#include <array>
#include <ranges>

#include <fmt/format.h>

#include "backends/mysql/my_bench.hpp"
#include "backends/mysql/my_connection.hpp"
#include "backends/mysql/my_migration.hpp"
#include "backends/mysql/my_fence.hpp"
#include "backends/mysql/my_occurrences.hpp"
#include "backends/mysql/my_advisory.hpp"
#include "backends/mysql/my_rights.hpp"
#include "base/holder_kind.hpp"
#include "backends/mysql/my_sql.hpp"
#include "backends/session_pool.hpp"
#include "base/json.hpp"

namespace dblock::detail {

namespace {

/// Whether the server is a node of a Galera cluster (wsrep_on; MySQL 8 has no such variable).
/// @throws InvalidArgument when the URI says engine=galera and it is not.
bool is_galera_node(MyConnection& connection, const StoreUri& uri, StatementIds& ids) {
  MyStatement engine{ids, "engine check", "SHOW VARIABLES LIKE 'wsrep_on'"};
  auto rows = connection.query(engine, {});
  bool galera = !rows.empty() && rows.front().str(1) == "ON";
  if (uri.galera && !galera)
    throw InvalidArgument(fmt::format("DSN '{}' says engine=galera, but the server is not a Galera node (wsrep_on is "
                                      "OFF)",
                                      uri.redacted));
  return galera;
}

/// [[name, owner, token, ttl_us], ...], or with `kinds` [[name, owner, kind, token, ttl_us], ...].
std::string held_json(std::span<const HeldRef> held, bool kinds = false) {
  std::string json = "[";
  for (std::size_t i = 0; i < held.size(); ++i)
    json += fmt::format("{}[{},{},{}{},{}]", i == 0 ? "" : ",", json_string(held[i].name), json_string(held[i].owner),
                        kinds ? fmt::format("\"{}\",", kind_text(held[i].kind)) : "", held[i].token,
                        micros(held[i].ttl));
  return json + "]";
}

/// acquire_many's parameter: [[name, owner, ttl_us, held_token, delay_ms], ...] (migration 0011).
std::string requests_json(std::span<const AcquireRequest> requests) {
  std::string json = "[";
  for (std::size_t i = 0; i < requests.size(); ++i)
    json += fmt::format("{}[{},{},{},{},{}]", i == 0 ? "" : ",", json_string(requests[i].name),
                        json_string(requests[i].owner), micros(requests[i].ttl), requests[i].held_token,
                        requests[i].lock_delay.count());
  return json + "]";
}

/// release_last_many's parameter: [[name, owner, token], ...].
std::string releases_json(std::span<const ReleaseRequest> releases) {
  std::string json = "[";
  for (std::size_t i = 0; i < releases.size(); ++i)
    json += fmt::format("{}[{},{},{}]", i == 0 ? "" : ",", json_string(releases[i].name),
                        json_string(releases[i].owner), releases[i].token);
  return json + "]";
}

// Still one class carrying every role but fences and occurrences: its accessors return itself.
class MyBackend final : public Backend, LockBackend, GroupBackend, AdvisoryBackend, MigrationBackend, BenchBackend {
 public:
  MyBackend(const StoreUri& uri, const BackendSettings& settings)
      : MyBackend(uri, settings, parse_mysql_uri(uri.driver_uri, uri.redacted)) {}

  Dialect dialect() const noexcept override { return Dialect::mysql; }


  std::optional<Grant> try_acquire(std::string_view name, std::string_view owner, milliseconds ttl,
                                   std::int64_t held_token, milliseconds lock_delay) override {
    std::array<MyParam, 5> params{name, owner, micros(ttl), held_token, static_cast<std::int64_t>(lock_delay.count())};
    auto session = pool_.lease();
    return parse_grant(session->query(sql_.acquire, params));
  }

  std::optional<std::int64_t> release(std::string_view name, std::string_view owner, std::int64_t token) override {
    std::array<MyParam, 3> params{name, owner, token};
    auto session = pool_.lease();
    return first_int64(session->query(sql_.release, params));
  }

  std::optional<std::int64_t> release_last(std::string_view name, std::string_view owner, std::int64_t token) override {
    std::array<MyParam, 3> params{name, owner, token};
    if (pool_.lease()->update(sql_.release_last, params) == 0) return std::nullopt;
    return 0;
  }

  /// A batch is one function call that loops over its names on the server. Galera certifies a
  /// batch's write set as a whole: a smaller one meets fewer conflicts.
  std::size_t max_batch() const noexcept override { return galera_ ? kGaleraBatch : kBatch; }

  std::vector<std::optional<Grant>> try_acquire_many(std::span<const AcquireRequest> requests) override {
    auto json = requests_json(requests);
    std::array<MyParam, 1> params{json};
    return parse_positions_with_grants(combined_call(sql_.acquire_many, params), requests.size());
  }

  std::vector<bool> release_last_many(std::span<const ReleaseRequest> releases) override {
    auto json = releases_json(releases);
    std::array<MyParam, 1> params{json};
    return parse_positions(combined_call(sql_.release_last_many, params), releases.size());
  }

  /// The answer of a combined function ('' when nothing was granted or deleted). In autocommit the
  /// call is one transaction, rolled back whole on any error: a deadlock (1213), a lock-wait
  /// timeout (1205) or the order check's SIGNAL after some names were written (checked on 10.11).
  /// On Galera it goes through group_call's transaction, as the group functions do: autocommit
  /// calls of acquire_many aborted by replicated writes left a client without a reply in 2 runs of
  /// 2 (nine clients on three nodes, 400 batches each), the transaction form in none of 3.
  std::string combined_call(const MyStatement& statement, std::span<const MyParam> params) {
    auto rows = galera_ ? group_call(statement, params) : pool_.lease()->query(statement, params);
    return rows.empty() ? std::string() : rows.front().str(0);
  }

  std::vector<std::size_t> renew(std::span<const HeldRef> held, std::chrono::steady_clock::time_point) override {
    auto json = held_json(held);
    std::array<MyParam, 1> params{json};
    auto renewed = pool_.lease()->update(sql_.renew, params);
    std::vector<std::size_t> positions;
    if (renewed == held.size()) {
      for (std::size_t i = 0; i < held.size(); ++i) positions.push_back(i);
      return positions;
    }
    for (auto& row : pool_.lease()->query(sql_.renewed_of, params))
      positions.push_back(static_cast<std::size_t>(row.num(0)));
    return positions;
  }

  std::optional<milliseconds> lease_left(std::string_view name) override {
    std::array<MyParam, 1> params{name};
    auto rows = pool_.lease()->query(sql_.lease_left, params);
    if (rows.empty()) return std::nullopt;
    return milliseconds(rows.front().num(0));
  }

  bool force_release(std::string_view name) override {
    std::array<MyParam, 1> params{name};
    return pool_.lease()->update(sql_.force_release, params) > 0;
  }

  bool revoke(std::string_view name) override {
    std::array<MyParam, 1> params{name};
    return pool_.lease()->update(sql_.revoke, params) > 0;
  }

  bool acknowledge_revoked(std::string_view name, std::string_view owner, std::int64_t token) override {
    std::array<MyParam, 3> params{name, owner, token};
    return pool_.lease()->update(sql_.acknowledge_revoked, params) > 0;
  }

  bool release_keeping(std::string_view name, std::string_view owner, std::int64_t token,
                       milliseconds min_hold) override {
    std::array<MyParam, 5> params{micros(min_hold), name, owner, token, micros(min_hold)};
    return pool_.lease()->update(sql_.release_keeping, params) > 0;
  }

  std::size_t reap(std::size_t batch) override {
    std::array<MyParam, 1> params{static_cast<std::int64_t>(batch)};
    auto session = pool_.lease();
    auto rows = session->update(sql_.reap, params);
    return static_cast<std::size_t>(rows + session->update(sql_.reap_members, params));
  }

  /// One call of a group function. On Galera it runs in a transaction of the client's own: a
  /// replicated write that aborts it (brute force) then reaches us as error 1213, a TransientError
  /// core retries. An aborted autocommit call of these functions could leave the client without
  /// any reply until the statement timeout (doc/clusters.md).
  MyRows group_call(const MyStatement& statement, std::span<const MyParam> params) {
    auto session = pool_.lease();
    if (!galera_) return session->query(statement, params);
    session->execute("START TRANSACTION");
    try {
      auto rows = session->query(statement, params);
      session->execute("COMMIT");
      return rows;
    } catch (...) {
      if (session->usable()) {
        try {
          session->execute("ROLLBACK");  // after 1213 the server has rolled back already; anything else
        } catch (...) {
          session->abandon();
        }
      }
      throw;
    }
  }

  std::optional<Grant> try_acquire_member(std::string_view name, std::string_view owner, HolderKind kind,
                                          std::int64_t capacity, milliseconds ttl, std::int64_t held_token) override {
    std::array<MyParam, 6> params{name, owner, kind_text(kind), capacity, micros(ttl), held_token};
    return parse_grant(group_call(sql_.acquire_member, params));
  }

  std::optional<std::int64_t> release_member(std::string_view name, std::string_view owner, HolderKind kind,
                                             std::int64_t token) override {
    std::array<MyParam, 4> params{name, owner, kind_text(kind), token};
    auto left_and_freed = parse_grant(group_call(sql_.release_member, params));  // "left freed"
    if (!left_and_freed) return std::nullopt;
    return left_and_freed->count;
  }

  std::vector<std::size_t> renew_members(std::span<const HeldRef> held, std::chrono::steady_clock::time_point) override {
    auto json = held_json(held, true);
    std::array<MyParam, 1> params{json};
    auto rows = group_call(sql_.renew_members, params);
    std::vector<std::size_t> positions;
    if (rows.empty() || !rows.front().text(0)) return positions;
    for (auto part : std::views::split(std::string_view(*rows.front().text(0)), ','))
      if (!part.empty()) positions.push_back(std::stoul(std::string(part.begin(), part.end())));
    return positions;
  }

  std::optional<milliseconds> lease_left_marking_writer(std::string_view name, std::string_view owner,
                                                        milliseconds mark_for, bool& marked) override {
    marked = false;
    std::array<MyParam, 1> params{name};
    auto session = pool_.lease();
    auto rows = session->query(sql_.lease_left_of_readers, params);
    if (rows.empty()) return std::nullopt;
    milliseconds left(rows.front().num(0));
    if (rows.front().num(1) != 0 && left.count() > 0) {
      std::array<MyParam, 3> mark{name, owner, micros(mark_for)};
      session->update(sql_.mark_writer, mark);
      marked = true;
    }
    return left;
  }

  std::optional<milliseconds> first_lease_end(std::string_view name) override {
    std::array<MyParam, 1> params{name};
    auto rows = pool_.lease()->query(sql_.first_lease_end, params);
    if (rows.empty()) return std::nullopt;
    return milliseconds(rows.front().num(0));
  }

  void unmark_writer(std::string_view name, std::string_view owner) override {
    std::array<MyParam, 2> params{name, owner};
    pool_.lease()->update(sql_.unmark_writer, params);
  }

  LockCensus census() override {
    auto row = pool_.lease()->query(sql_.census, {}).at(0);
    return LockCensus{row.num(0), row.num(1), milliseconds(row.num(2))};
  }

  std::string galera_advisory_refusal() const {
    return fmt::format("{} is a node of a MariaDB Galera cluster, where GET_LOCK is node-local: two nodes would grant "
                       "one name at once. Use LockMode::table, which the cluster certifies",
                       redacted_);
  }
  void check_advisory_target(const AdvisoryTarget& target) const override { check_named_lock_target(target); }
  milliseconds longest_server_wait() const override { return longest_named_lock_wait(settings_.statement_timeout); }
  std::unique_ptr<AdvisorySession> pin_advisory_session() override {
    if (galera_) throw InvalidArgument(galera_advisory_refusal());
    return make_my_named_lock_session(pool_.lease(), named_lock_sql_);
  }
  void on_pool_dry(std::weak_ptr<const std::function<void()>> give_back) override {
    pool_.add_reclaimer(std::move(give_back));
  }

  std::unique_ptr<RawLockClient> raw_client() override { return make_my_raw_client(connect(), sql_, ids_); }
  std::unique_ptr<RawWriteClient> raw_write_client() override { return make_my_raw_write_client(connect(), prefix_); }

  void seed_expired(std::string_view stem, std::size_t count) override {
    // Chunks stay below the servers' default recursion limit of a CTE (1,000).
    constexpr std::size_t kChunk = 1000;
    auto session = pool_.lease();
    for (std::size_t done = 0; done < count; done += kChunk) {
      std::array<MyParam, 3> params{static_cast<std::int64_t>(std::min(kChunk, count - done)), stem,
                                    static_cast<std::int64_t>(done)};
      session->update(sql_.seed_expired, params);
    }
  }

  int schema_version() override {
    auto rows = pool_.lease()->query(sql_.schema_version, {});
    return static_cast<int>(first_int64(rows).value_or(0));
  }

  std::optional<std::vector<AppliedMigration>> read_history() override {
    try {
      return parse_history(pool_.lease()->query(sql_.history, {}));
    } catch (const SchemaError&) {
      return std::nullopt;  // no history table yet
    }
  }

  std::vector<CatalogObject> catalog(std::span<const std::string> names) override {
    std::string joined;
    for (auto& name : names) joined += (joined.empty() ? "" : ",") + name;
    std::array<MyParam, 4> params{joined, joined, joined, joined};
    auto rows = pool_.lease()->query(sql_.catalog, params);
    std::vector<CatalogObject> objects;
    for (auto& row : rows)
      objects.push_back({row.str(1), row.str(0), row.str(2), split_list(row.str(3)), row.str(4), row.num(5) != 0,
                         split_list(row.str(6))});
    return objects;
  }
  std::vector<std::string> missing_migration_rights(std::span<const CatalogObject> to_create,
                                                    std::span<const CatalogObject> to_redefine) override {
    MyMigrationNeeds needs{.history = prefix_ + "schema_history"};
    auto routine = [](const CatalogObject& object) { return object.kind == "function" || object.kind == "procedure"; };
    for (auto& object : to_create) {
      if (object.kind == "table" || object.kind == "sequence") needs.create_tables.push_back(object.name);
      if (routine(object)) needs.create_routines.push_back(object.name);
    }
    // Tables and sequences are created IF NOT EXISTS (a resumed migration): nothing to re-define,
    // but a column added by ALTER TABLE needs ALTER, whether the table exists yet or not.
    // Routines are created with CREATE OR REPLACE, which MariaDB lets run only with ALTER ROUTINE,
    // even for a routine that does not exist yet.
    for (auto& objects : {to_create, to_redefine})
      for (auto& object : objects) {
        if (routine(object)) needs.replace_routines.push_back(object.name);
        if (object.kind == "table" && object.adds_columns) needs.alter_tables.push_back(object.name);
      }
    std::vector<std::string> rows;
    for (auto& row : pool_.lease()->query(sql_.grants, {}))
      rows.push_back(row.str(0));
    return missing_mysql_migration_rights(rows, endpoint_.database, needs);
  }
  const MigrationDialect& migration_dialect() const override { return migration_dialect_; }

  std::unique_ptr<MigrationSession> open_migration() override {
    return make_my_migration_session(connect(), sql_, named_lock_sql_, migration_lock_name_);
  }

 private:
  MyBackend(const StoreUri& uri, const BackendSettings& settings, const MyEndpoint& endpoint)
      : MyBackend(uri, settings, endpoint,
                  std::make_unique<MyConnection>(endpoint, uri.redacted, settings.connect_timeout,
                                                 settings.statement_timeout)) {}
  /// `first` proves the server and the credentials now, not at first use, and tells the engine.
  MyBackend(const StoreUri& uri, const BackendSettings& settings, const MyEndpoint& endpoint,
            std::unique_ptr<MyConnection> first)
      : endpoint_(endpoint),
        redacted_(uri.redacted),
        settings_(settings),
        galera_(is_galera_node(*first, uri, ids_)),
        migration_lock_name_(migration_lock_name(uri, endpoint_.database)),
        prefix_(uri.prefix),
        sql_(ids_, uri.prefix, galera_),
        named_lock_sql_(ids_, endpoint_.database, uri.prefix),
        migration_dialect_(endpoint_.database, uri.prefix, galera_),
        pool_([this] { return connect(); }, uri.redacted, uri.pool_size, settings.connect_timeout) {
    if (galera_) read_causally(*first);
    pool_.adopt(std::move(first));
    occurrences_ = make_my_occurrences(pool_, ids_, prefix_);
    fences_ = make_my_fences(pool_, ids_, prefix_, redacted_);
  }

  LockBackend& locks() override { return *this; }
  Role<GroupBackend> groups() override { return Role<GroupBackend>::of(*this); }
  Role<AdvisoryBackend> advisory() override {
    if (galera_) return Role<AdvisoryBackend>::absent(galera_advisory_refusal());
    return Role<AdvisoryBackend>::of(*this);
  }
  Role<NotificationBackend> notifications() override {
    return Role<NotificationBackend>::absent("MySQL/MariaDB sends no release notifications: waiters poll");
  }
  Role<MigrationBackend> migrations() override { return Role<MigrationBackend>::of(*this); }
  Role<BenchBackend> bench() override { return Role<BenchBackend>::of(*this); }
  Role<FenceBackend> fences() override { return Role<FenceBackend>::of(*fences_); }
  Role<OccurrenceBackend> occurrences() override { return Role<OccurrenceBackend>::of(*occurrences_); }

  std::unique_ptr<MyConnection> connect() const {
    auto connection =
        std::make_unique<MyConnection>(endpoint_, redacted_, settings_.connect_timeout, settings_.statement_timeout);
    if (galera_) read_causally(*connection);
    return connection;
  }

  /// A Galera node applies other nodes' commits a little after they return, so a plain read there
  /// can miss a migration or a grant just made elsewhere. Reads (function calls included) first
  /// wait until the node has applied everything committed before they started. Writes need no
  /// wait: certification refuses one based on a stale read.
  static void read_causally(MyConnection& connection) { connection.execute("SET SESSION wsrep_sync_wait = 1"); }

  std::vector<LockInfo> list_rows(std::string_view only_name, std::size_t limit) override {
    std::array<MyParam, 5> params{only_name, only_name, only_name, only_name, static_cast<std::int64_t>(limit)};
    std::vector<LockInfo> locks;
    for (auto& row : pool_.lease()->query(sql_.list, params))
      locks.push_back(LockInfo{row.str(0), row.str(1), row.num(2), row.num(3), milliseconds(row.num(4)),
                               kind_from_text(row.str(5)), LockState::held, milliseconds(row.num(6)),
                               milliseconds(row.num(7))});
    return locks;
  }

  static constexpr std::size_t kBatch = 32;
  static constexpr std::size_t kGaleraBatch = 8;

  MyEndpoint endpoint_;
  std::string redacted_;
  BackendSettings settings_;
  StatementIds ids_;  // before every statement set (the engine check's first): all of them share its ids
  bool galera_;
  std::string migration_lock_name_;
  std::string prefix_;
  MySql sql_;
  MyNamedLockSql named_lock_sql_;
  MyMigrationDialect migration_dialect_;
  SessionPool<MyConnection> pool_;
  std::unique_ptr<OccurrenceBackend> occurrences_;  // after pool_: it uses its sessions
  std::unique_ptr<FenceBackend> fences_;            // likewise
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

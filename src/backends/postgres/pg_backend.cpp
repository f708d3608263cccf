#include "backends/postgres/pg_backend.hpp"

#include <algorithm>
#include <array>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "backends/postgres/pg_advisory.hpp"
#include "backends/postgres/pg_bench.hpp"
#include "backends/postgres/pg_connection.hpp"
#include "backends/postgres/pg_listener.hpp"
#include "backends/postgres/pg_migration.hpp"
#include "backends/postgres/pg_fence.hpp"
#include "backends/postgres/pg_occurrences.hpp"
#include "backends/postgres/pg_sql.hpp"
#include "backends/session_pool.hpp"

namespace dblock::detail {

namespace {

// Still one class carrying every role but fences and occurrences: its accessors return itself.
class PgBackend final : public Backend,
                        LockBackend,
                        GroupBackend,
                        AdvisoryBackend,
                        NotificationBackend,
                        MigrationBackend,
                        BenchBackend,
                        PgXactLocks {
 public:
  PgBackend(const StoreUri& uri, const BackendSettings& settings)
      : schema_(uri.schema),
        prefix_(uri.prefix),
        driver_uri_(uri.driver_uri),
        key_(installation_key(uri.schema, uri.prefix)),
        channel_(fmt::format("dblock_release_{:08x}", static_cast<std::uint32_t>(key_))),
        sql_(ids_, uri.schema, uri.prefix, key_, channel_),
        advisory_sql_(ids_, uri.schema, uri.prefix),
        migration_dialect_(uri),
        mode_(std::make_shared<PgStatementMode>(uri.transaction_pooler)),
        session_pooler_(uri.session_pooler),
        pool_(
            [driver_uri = uri.driver_uri, redacted = uri.redacted, settings, mode = mode_] {
              return std::make_unique<PgConnection>(driver_uri, redacted, settings.connect_timeout,
                                                    settings.statement_timeout, settings.logger, mode);
            },
            uri.redacted, uri.pool_size, settings.connect_timeout) {
    auto first = pool_.lease();  // proves the server and the credentials now, not at first use
    engine_ = pg_engine_of(first->reported("server_version"), first->reported("crdb_version"));
    occurrences_ = make_pg_occurrences(pool_, ids_, uri.schema, uri.prefix);
    fences_ = make_pg_fences(pool_, ids_, uri.schema, uri.prefix, uri.redacted);
  }

  LockBackend& locks() override { return *this; }
  Role<GroupBackend> groups() override { return Role<GroupBackend>::of(*this); }
  // Asked on every call: a transaction pooler is found out at the first statements.
  Role<AdvisoryBackend> advisory() override {
    if (auto why = advisory_refusal()) return Role<AdvisoryBackend>::absent(std::move(*why));
    return Role<AdvisoryBackend>::of(*this);
  }
  Role<NotificationBackend> notifications() override { return Role<NotificationBackend>::of(*this); }
  Role<MigrationBackend> migrations() override { return Role<MigrationBackend>::of(*this); }
  Role<BenchBackend> bench() override { return Role<BenchBackend>::of(*this); }
  Role<FenceBackend> fences() override { return Role<FenceBackend>::of(*fences_); }
  Role<OccurrenceBackend> occurrences() override { return Role<OccurrenceBackend>::of(*occurrences_); }
  Role<PgXactLocks> xact_locks() override { return Role<PgXactLocks>::of(*this); }

  Dialect dialect() const noexcept override { return Dialect::postgresql; }

  std::optional<Grant> try_acquire(std::string_view name, std::string_view owner, milliseconds ttl,
                                   std::int64_t held_token, milliseconds lock_delay) override {
    std::array<std::string, 5> params{std::string(name), std::string(owner), std::to_string(ttl.count()),
                                      std::to_string(held_token), std::to_string(lock_delay.count())};
    auto session = pool_.lease();
    auto result = run(*session, sql_.acquire, params);
    if (PQntuples(result.get()) == 0) return std::nullopt;
    return Grant{to_int64(result.get(), 0, 0), to_int64(result.get(), 0, 1)};
  }

  std::optional<std::int64_t> release(std::string_view name, std::string_view owner, std::int64_t token) override {
    std::array<std::string, 3> params{std::string(name), std::string(owner), std::to_string(token)};
    auto session = pool_.lease();
    auto result = run(*session, sql_.release, params);
    if (PQntuples(result.get()) == 0) return std::nullopt;
    return to_int64(result.get(), 0, 0);
  }

  std::optional<std::int64_t> release_last(std::string_view name, std::string_view owner, std::int64_t token) override {
    std::array<std::string, 3> params{std::string(name), std::string(owner), std::to_string(token)};
    if (PQntuples(run(*pool_.lease(), sql_.release_last, params).get()) == 0) return std::nullopt;
    return 0;
  }

  // One advisory key per request, held to commit: 32 fits max_locks_per_transaction (64 by
  // default) with room for the release's notify keys.
  std::size_t max_batch() const noexcept override { return 32; }

  std::vector<std::optional<Grant>> try_acquire_many(std::span<const AcquireRequest> requests) override {
    if (requests.empty()) return {};
    std::vector<std::string_view> names, owners;
    std::string ttls = "{", held = "{", delays = "{";
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const char* comma = i == 0 ? "" : ",";
      names.push_back(requests[i].name);
      owners.push_back(requests[i].owner);
      ttls += fmt::format("{}{}", comma, requests[i].ttl.count());
      held += fmt::format("{}{}", comma, requests[i].held_token);
      delays += fmt::format("{}{}", comma, requests[i].lock_delay.count());
    }
    std::array<std::string, 5> params{pg_text_array(names), pg_text_array(owners), ttls + "}", held + "}",
                                      delays + "}"};
    auto result = run(*pool_.lease(), sql_.acquire_many, params);
    std::vector<std::optional<Grant>> granted(requests.size());
    Positions positions(names);
    for (int row = 0; row < PQntuples(result.get()); ++row)
      granted[positions.of(text_of(result.get(), row, 0))] =
          Grant{to_int64(result.get(), row, 1), to_int64(result.get(), row, 2)};
    return granted;
  }

  std::vector<bool> release_last_many(std::span<const ReleaseRequest> requests) override {
    if (requests.empty()) return {};
    std::vector<std::string_view> names, owners;
    std::string tokens = "{";
    for (std::size_t i = 0; i < requests.size(); ++i) {
      names.push_back(requests[i].name);
      owners.push_back(requests[i].owner);
      tokens += fmt::format("{}{}", i == 0 ? "" : ",", requests[i].token);
    }
    std::array<std::string, 3> params{pg_text_array(names), pg_text_array(owners), tokens + "}"};
    auto result = run(*pool_.lease(), sql_.release_last_many, params);
    std::vector<bool> released(requests.size(), false);
    Positions positions(names);
    for (int row = 0; row < PQntuples(result.get()); ++row)
      released[positions.of(text_of(result.get(), row, 0))] = true;
    return released;
  }

  std::vector<std::size_t> renew(std::span<const HeldRef> held, std::chrono::steady_clock::time_point reply_by) override {
    return run_renewal(sql_.renew, renewal_arrays(held, false), reply_by);
  }

  std::optional<milliseconds> lease_left(std::string_view name) override {
    std::array<std::string, 1> params{std::string(name)};
    auto result = run(*pool_.lease(), sql_.lease_left, params);
    if (PQntuples(result.get()) == 0) return std::nullopt;
    return milliseconds(to_int64(result.get(), 0, 0));
  }

  bool force_release(std::string_view name) override {
    std::array<std::string, 1> params{std::string(name)};
    auto session = pool_.lease();
    auto result = run(*session, sql_.force_release, params);
    return PQntuples(result.get()) > 0;
  }

  bool revoke(std::string_view name) override {
    std::array<std::string, 1> params{std::string(name)};
    return PQntuples(run(*pool_.lease(), sql_.revoke, params).get()) > 0;
  }

  bool acknowledge_revoked(std::string_view name, std::string_view owner, std::int64_t token) override {
    std::array<std::string, 3> params{std::string(name), std::string(owner), std::to_string(token)};
    return PQntuples(run(*pool_.lease(), sql_.acknowledge_revoked, params).get()) > 0;
  }

  bool release_keeping(std::string_view name, std::string_view owner, std::int64_t token,
                       milliseconds min_hold) override {
    std::array<std::string, 4> params{std::string(name), std::string(owner), std::to_string(token),
                                      std::to_string(min_hold.count())};
    return PQntuples(run(*pool_.lease(), sql_.release_keeping, params).get()) > 0;
  }

  /// Why advisory mode is refused here, if it is.
  std::optional<std::string> advisory_refusal() const {
    if (engine_ != PgEngine::postgresql)
      return fmt::format("{} speaks PostgreSQL's protocol, but its advisory lock functions were no-ops or not "
                         "cluster-wide in released versions: advisory mode is refused there. Use LockMode::table",
                         engine_ == PgEngine::cockroachdb ? "CockroachDB" : "YugabyteDB");
    if (!mode_->behind_transaction_pooler()) return std::nullopt;
    return "advisory mode cannot work behind a pooler in transaction mode (pool_mode=transaction): session advisory "
           "locks belong to one server connection, and the pooler runs each statement on whichever is free. Connect "
           "advisory mode to PostgreSQL directly or through a session-mode pool (with pool_mode=session in the URI), "
           "or use LockMode::table";
  }

  std::unique_ptr<AdvisorySession> pin_advisory_session() override {
    if (auto why = advisory_refusal()) throw InvalidArgument(*why);
    return make_pg_advisory_session(pool_.lease(), advisory_sql_, *mode_, session_pooler_);
  }
  milliseconds longest_server_wait() const override { return kPgAdvisoryWaitSlice; }
  void on_pool_dry(std::weak_ptr<const std::function<void()>> give_back) override {
    pool_.add_reclaimer(std::move(give_back));
  }

  std::unique_ptr<ReleaseListener> listen() override {
    // LISTEN and the watch locks are session state: behind a transaction pooler waiters poll.
    if (mode_->behind_transaction_pooler()) return nullptr;
    return make_pg_listener(pool_.connect_dedicated(), key_, channel_);
  }

  std::size_t reap(std::size_t batch) override {
    std::array<std::string, 1> params{std::to_string(batch)};
    auto session = pool_.lease();
    auto result = run(*session, sql_.reap, params);
    return static_cast<std::size_t>(to_int64(result.get(), 0, 0));
  }

  LockCensus census() override {
    auto result = run(*pool_.lease(), sql_.census, std::span<const std::string>());
    return LockCensus{to_int64(result.get(), 0, 0), to_int64(result.get(), 0, 1),
                      milliseconds(to_int64(result.get(), 0, 2))};
  }

  std::unique_ptr<RawLockClient> raw_client() override {
    return make_pg_raw_client(driver_uri_, sql_, mode_->behind_transaction_pooler(), RawStatements::dblock);
  }
  std::unique_ptr<RawLockClient> hand_written_client(HandWritten how) override {
    return make_pg_raw_client(driver_uri_, sql_, mode_->behind_transaction_pooler(),
                              how == HandWritten::synchronous ? RawStatements::hand_written
                                                              : RawStatements::hand_written_async_delete);
  }

  std::unique_ptr<RawWriteClient> raw_write_client() override {
    return make_pg_raw_write_client(driver_uri_, schema_, prefix_, mode_->behind_transaction_pooler());
  }

  void seed_expired(std::string_view stem, std::size_t count) override {
    std::array<std::string, 2> params{std::string(stem), std::to_string(count)};
    pool_.lease()->exec_params(sql_.seed_expired, params);
  }

  int schema_version() override {
    auto result = pool_.lease()->exec(sql_.schema_version);
    return static_cast<int>(to_int64(result.get(), 0, 0));
  }

  std::optional<std::vector<AppliedMigration>> read_history() override {
    try {
      auto result = pool_.lease()->exec(sql_.history);
      return parse_history(result.get());
    } catch (const SchemaError&) {
      return std::nullopt;  // no history table (or schema) yet
    }
  }

  std::vector<CatalogObject> catalog(std::span<const std::string> names) override {
    std::vector<std::string_view> views(names.begin(), names.end());
    std::array<std::string, 2> params{schema_, pg_text_array(views)};
    auto result = pool_.lease()->exec_params(sql_.catalog, params);
    std::vector<CatalogObject> objects;
    for (int row = 0; row < PQntuples(result.get()); ++row)
      objects.push_back({text_of(result.get(), row, 1), text_of(result.get(), row, 0), text_of(result.get(), row, 2),
                         split_list(text_of(result.get(), row, 3)), text_of(result.get(), row, 4), false,
                         split_list(text_of(result.get(), row, 5))});
    return objects;
  }
  std::vector<std::string> missing_migration_rights(std::span<const CatalogObject> to_create,
                                                    std::span<const CatalogObject> to_redefine) override {
    (void)to_create;  // whatever is created needs CREATE on the schema, which is always asked
    std::vector<std::string_view> redefined;
    for (auto& object : to_redefine) redefined.push_back(object.name);
    std::array<std::string, 2> params{schema_, pg_text_array(redefined)};
    auto result = pool_.lease()->exec_params(sql_.migration_rights, params);
    std::vector<std::string> missing;
    for (int row = 0; row < PQntuples(result.get()); ++row) missing.push_back(text_of(result.get(), row, 0));
    return missing;
  }
  std::optional<std::int64_t> xact_lock(pg_conn* conn, const AdvisoryTarget& target, milliseconds wait) override {
    return pg_xact_lock(conn, advisory_sql_, target, wait);
  }
  const MigrationDialect& migration_dialect() const override { return migration_dialect_; }

  std::unique_ptr<MigrationSession> open_migration() override {
    return make_pg_migration_session(pool_.connect_dedicated(), sql_, schema_,
                                                mode_->behind_transaction_pooler());
  }

 private:
  /// One statement of table mode. When it meets a transaction pooler it did not run, and goes
  /// out again unnamed (the mode has switched): a fallback of the protocol, not a retry.
  template <class Params>
  static PgResult run(PgConnection& session, const PgStatement& statement, const Params& params) {
    try {
      return session.exec_prepared(statement, params);
    } catch (const PoolerDetected&) {
      return session.exec_prepared(statement, params);
    }
  }

  std::vector<LockInfo> list_rows(std::string_view only_name, std::size_t limit) override {
    std::array<std::string, 2> params{std::string(only_name), std::to_string(limit)};
    auto result = run(*pool_.lease(), sql_.list, params);
    std::vector<LockInfo> rows;
    for (int row = 0; row < PQntuples(result.get()); ++row)
      rows.push_back(
          LockInfo{text_of(result.get(), row, 0), text_of(result.get(), row, 1), to_int64(result.get(), row, 2),
                   to_int64(result.get(), row, 3), milliseconds(to_int64(result.get(), row, 4)),
                   kind_from_text(text_of(result.get(), row, 5)), LockState::held,
                   milliseconds(to_int64(result.get(), row, 6)), milliseconds(to_int64(result.get(), row, 7))});
    return rows;
  }

  /// Where each name of a combined statement's result stands among its requests (distinct names).
  class Positions {
   public:
    explicit Positions(std::span<const std::string_view> names) {
      for (std::size_t i = 0; i < names.size(); ++i) by_name_.emplace_back(names[i], i);
      std::ranges::sort(by_name_);
    }
    [[nodiscard]] std::size_t of(std::string_view name) const {
      auto found = std::ranges::lower_bound(by_name_, std::pair{name, std::size_t{0}});
      if (found == by_name_.end() || found->first != name)
        throw DatabaseError("a combined statement returned a name it was not sent");
      return found->second;
    }

   private:
    std::vector<std::pair<std::string_view, std::size_t>> by_name_;
  };

  /// The arrays of a renewal: names, owners, tokens, TTLs, and the kinds when `with_kinds`.
  static std::vector<std::string> renewal_arrays(std::span<const HeldRef> held, bool with_kinds) {
    std::vector<std::string_view> names, owners, kinds;
    std::string tokens = "{", ttls = "{";
    for (std::size_t i = 0; i < held.size(); ++i) {
      names.push_back(held[i].name);
      owners.push_back(held[i].owner);
      kinds.push_back(kind_text(held[i].kind));
      tokens += fmt::format("{}{}", i == 0 ? "" : ",", held[i].token);
      ttls += fmt::format("{}{}", i == 0 ? "" : ",", held[i].ttl.count());
    }
    std::vector<std::string> arrays{pg_text_array(names), pg_text_array(owners)};
    if (with_kinds) arrays.push_back(pg_text_array(kinds));
    arrays.push_back(tokens + "}");
    arrays.push_back(ttls + "}");
    return arrays;
  }

  /// Sends a renewal with its reply bounded by `reply_by`; returns the positions renewed.
  std::vector<std::size_t> run_renewal(const PgStatement& statement, const std::vector<std::string>& params,
                                       std::chrono::steady_clock::time_point reply_by) {
    // A try (the core repeats one whose reply was lost) is pointless once the first deadline has passed.
    if (std::chrono::steady_clock::now() >= reply_by)
      throw OutcomeUnknown("renewal: no time left before the first local deadline", "57014");
    auto session = pool_.lease();
    auto limit = session->limit_replies(reply_by);
    auto result = run(*session, statement, params);
    std::vector<std::size_t> renewed;
    renewed.reserve(static_cast<std::size_t>(PQntuples(result.get())));
    for (int row = 0; row < PQntuples(result.get()); ++row)
      renewed.push_back(static_cast<std::size_t>(to_int64(result.get(), row, 0)));
    return renewed;
  }

  std::optional<Grant> try_acquire_member(std::string_view name, std::string_view owner, HolderKind kind,
                                          std::int64_t capacity, milliseconds ttl, std::int64_t held_token) override {
    std::array<std::string, 6> params{std::string(name), std::string(owner), std::string(kind_text(kind)), std::to_string(capacity),
                                      std::to_string(ttl.count()), std::to_string(held_token)};
    auto result = run(*pool_.lease(), sql_.acquire_member, params);
    if (PQntuples(result.get()) == 0) return std::nullopt;
    return Grant{to_int64(result.get(), 0, 0), to_int64(result.get(), 0, 1)};
  }

  std::optional<std::int64_t> release_member(std::string_view name, std::string_view owner, HolderKind kind,
                                             std::int64_t token) override {
    std::array<std::string, 4> params{std::string(name), std::string(owner), std::string(kind_text(kind)), std::to_string(token)};
    auto result = run(*pool_.lease(), sql_.release_member, params);
    if (PQntuples(result.get()) == 0) return std::nullopt;
    return to_int64(result.get(), 0, 0);
  }

  std::vector<std::size_t> renew_members(std::span<const HeldRef> held,
                                         std::chrono::steady_clock::time_point reply_by) override {
    return run_renewal(sql_.renew_members, renewal_arrays(held, true), reply_by);
  }

  std::optional<milliseconds> lease_left_marking_writer(std::string_view name, std::string_view owner,
                                                        milliseconds mark_for, bool& marked) override {
    std::array<std::string, 3> params{std::string(name), std::string(owner), std::to_string(mark_for.count())};
    auto result = run(*pool_.lease(), sql_.lease_left_marking_writer, params);
    marked = PQntuples(result.get()) > 0 && to_int64(result.get(), 0, 1) > 0;
    if (PQntuples(result.get()) == 0) return std::nullopt;
    return milliseconds(to_int64(result.get(), 0, 0));
  }

  std::optional<milliseconds> first_lease_end(std::string_view name) override {
    std::array<std::string, 1> params{std::string(name)};
    auto result = run(*pool_.lease(), sql_.first_lease_end, params);
    if (PQntuples(result.get()) == 0) return std::nullopt;
    return milliseconds(to_int64(result.get(), 0, 0));
  }

  void unmark_writer(std::string_view name, std::string_view owner) override {
    std::array<std::string, 2> params{std::string(name), std::string(owner)};
    run(*pool_.lease(), sql_.unmark_writer, params);
  }

  std::string schema_;
  std::string prefix_;
  std::string driver_uri_;
  std::int32_t key_;
  std::string channel_;
  StatementIds ids_;  // before every statement set: all of them share its ids
  PgSql sql_;
  PgAdvisorySql advisory_sql_;
  PgMigrationDialect migration_dialect_;
  std::shared_ptr<PgStatementMode> mode_;
  bool session_pooler_;  // pool_mode=session: a pooler that keeps one server process per session
  SessionPool<PgConnection> pool_;
  PgEngine engine_ = PgEngine::postgresql;
  std::unique_ptr<OccurrenceBackend> occurrences_;  // after pool_: it uses its sessions
  std::unique_ptr<FenceBackend> fences_;            // likewise
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

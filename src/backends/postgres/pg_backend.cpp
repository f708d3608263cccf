#include "backends/postgres/pg_backend.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "backends/migration_lock.hpp"
#include "backends/postgres/pg_advisory.hpp"
#include "backends/postgres/pg_connection.hpp"
#include "backends/session_pool.hpp"
#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

std::int64_t to_int64(const PGresult* result, int row, int column) {
  const char* text = PQgetvalue(result, row, column);
  std::int64_t value = 0;
  std::from_chars(text, text + PQgetlength(result, row, column), value);
  return value;
}

std::string text_of(const PGresult* result, int row, int column) {
  return {PQgetvalue(result, row, column), static_cast<std::size_t>(PQgetlength(result, row, column))};
}

/// FNV-1a: a stable 32-bit namespace for this installation's advisory keys and channel name.
std::int32_t installation_key(std::string_view schema, std::string_view prefix) {
  std::uint32_t hash = 2166136261u;
  for (char c : fmt::format("{}.{}", schema, prefix)) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 16777619u;
  }
  return static_cast<std::int32_t>(hash);
}

/// Every SQL statement of table mode, built once per store for its schema and prefix.
struct PgSql {
  PgSql(std::string_view schema, std::string_view prefix, std::int32_t key, std::string_view channel) {
    auto key_text = std::to_string(key);
    auto fill = [&](std::string_view sql) {
      return detail::fill(sql, {{"{schema}", schema}, {"{prefix}", prefix}, {"{key}", key_text}, {"{channel}", channel}});
    };
    // The server-side function draws fencing tokens while holding the row lock (doc/database-facts.md §1).
    acquire = {0, fill(R"(SELECT lock_count, lock_token FROM "{schema}"."{prefix}acquire_held"($1, $2, $3::bigint, $4::bigint))")};
    // At zero the row is deleted; NOTIFY only when a waiter holds the shared advisory key
    // (then our exclusive try fails), so uncontended releases pay no notify cost.
    release = {1, fill(R"(
WITH d AS (DELETE FROM "{schema}"."{prefix}locks" WHERE name = $1 AND owner = $2 AND token = $3::bigint AND count <= 1
           RETURNING name),
     u AS (UPDATE "{schema}"."{prefix}locks" SET count = count - 1
           WHERE name = $1 AND owner = $2 AND token = $3::bigint AND count > 1 RETURNING count)
SELECT 0::bigint, CASE WHEN pg_try_advisory_xact_lock({key}, hashtext(d.name)) THEN 0
                       ELSE (SELECT 1 FROM pg_notify('{channel}', d.name)) END FROM d
UNION ALL SELECT count::bigint, 0 FROM u)")};
    renew = {2, fill(R"(SELECT "{schema}"."{prefix}renew_held"($1::text[], $2::text[], $3::bigint[], $4::bigint[]))")};
    lease_left = {3, fill(R"(
SELECT floor(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint
FROM "{schema}"."{prefix}locks" WHERE name = $1)")};
    list = {4, fill(R"(
SELECT name, owner, count, token, floor(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint
FROM "{schema}"."{prefix}locks" WHERE ($1 = '' OR name = $1) ORDER BY name)")};
    force_release = {5, fill(R"(
WITH d AS (DELETE FROM "{schema}"."{prefix}locks" WHERE name = $1 RETURNING name)
SELECT (SELECT 1 FROM pg_notify('{channel}', d.name)) FROM d)")};
    // SKIP LOCKED: concurrent reapers and acquirers never wait for each other. The row lock is
    // taken on the newest row version and the expiry re-checked there, so a row an acquirer has
    // just taken over or renewed is left alone.
    reap = {6, fill(R"(
WITH victim AS (SELECT name FROM "{schema}"."{prefix}locks" WHERE expires_at <= clock_timestamp()
                ORDER BY expires_at LIMIT $1::bigint FOR UPDATE SKIP LOCKED),
     gone AS (DELETE FROM "{schema}"."{prefix}locks" l USING victim v
              WHERE l.name = v.name AND l.expires_at <= clock_timestamp() RETURNING 1)
SELECT count(*) FROM gone)")};
    census = {7, fill(R"(
SELECT count(*) FILTER (WHERE expires_at > clock_timestamp()),
       count(*) FILTER (WHERE expires_at <= clock_timestamp()),
       coalesce(floor(extract(epoch FROM clock_timestamp() - min(acquired_at) FILTER (WHERE expires_at > clock_timestamp())) * 1000), 0)::bigint
FROM "{schema}"."{prefix}locks")")};
    seed_expired = fill(R"(
INSERT INTO "{schema}"."{prefix}locks" (name, owner, count, token, acquired_at, expires_at)
SELECT $1 || g, 'dblock-bench', 1, nextval('"{schema}"."{prefix}token_seq"'), clock_timestamp() - interval '2 s',
       clock_timestamp() - interval '1 s'
FROM generate_series(1, $2::bigint) g)");
    schema_version = fill(R"(SELECT coalesce(max(version), 0) FROM "{schema}"."{prefix}schema_history" WHERE success)");
    history_table = fill(R"(
CREATE TABLE IF NOT EXISTS "{schema}"."{prefix}schema_history" (
  version      integer PRIMARY KEY,
  name         text NOT NULL,
  checksum     text NOT NULL,
  applied_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
  applied_by   text NOT NULL,
  execution_ms bigint NOT NULL,
  success      boolean NOT NULL
))");
    history = fill(R"(SELECT version, name, checksum, success FROM "{schema}"."{prefix}schema_history" ORDER BY version)");
    record = fill(R"(INSERT INTO "{schema}"."{prefix}schema_history" (version, name, checksum, applied_by, execution_ms, success)
VALUES ($1::integer, $2, $3, $4, $5::bigint, true))");
    forget = fill(R"(DELETE FROM "{schema}"."{prefix}schema_history" WHERE version = $1::integer)");
    migration_lock = fill("SELECT pg_try_advisory_lock({key}, hashtext('dblock:migrate'))");
    migration_xact_lock = fill("SELECT pg_try_advisory_xact_lock({key}, hashtext('dblock:migrate'))");
    migration_lock_blocking = fill("SELECT pg_advisory_lock({key}, hashtext('dblock:migrate'))");
    migration_unlock = fill("SELECT pg_advisory_unlock({key}, hashtext('dblock:migrate'))");
    create_schema = fill(R"(CREATE SCHEMA IF NOT EXISTS "{schema}")");
    // USAGE and CREATE on the schema (CREATE on the database when the schema is to be created),
    // SELECT and INSERT on an existing history, ownership of what is re-defined ($2).
    migration_rights = fill(R"(
SELECT format('CREATE on database %I (to create schema %I)', current_database(), $1::text)
WHERE NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) AND NOT has_database_privilege(current_database(), 'CREATE')
UNION ALL
SELECT format('%s on schema %I', p.priv, n.nspname) FROM pg_namespace n, unnest(ARRAY['USAGE', 'CREATE']) p(priv)
WHERE n.nspname = $1 AND NOT has_schema_privilege(n.oid, p.priv)
UNION ALL
SELECT format('%s on table %I.%I', p.priv, n.nspname, c.relname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, unnest(ARRAY['SELECT', 'INSERT']) p(priv)
WHERE n.nspname = $1 AND c.relname = '{prefix}schema_history' AND NOT has_table_privilege(c.oid, p.priv)
UNION ALL
SELECT format('ownership of %s %I.%I (owned by %I)', CASE c.relkind WHEN 'S' THEN 'sequence' WHEN 'i' THEN 'index' ELSE 'table' END,
              n.nspname, c.relname, pg_get_userbyid(c.relowner))
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = ANY ($2::text[]) AND c.relname <> '{prefix}schema_history'
  AND NOT pg_has_role(c.relowner, 'USAGE')
UNION ALL
SELECT format('ownership of function %I.%I (owned by %I)', n.nspname, p.proname, pg_get_userbyid(p.proowner))
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = $1 AND p.proname = ANY ($2::text[]) AND NOT pg_has_role(p.proowner, 'USAGE'))");
    catalog = fill(R"(
SELECT c.relname,
       CASE c.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'table' WHEN 'S' THEN 'sequence' WHEN 'i' THEN 'index'
                      WHEN 'I' THEN 'index' WHEN 'v' THEN 'view' WHEN 'm' THEN 'view' ELSE 'other' END,
       coalesce((SELECT t.relname FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid WHERE x.indexrelid = c.oid), ''),
       coalesce((SELECT string_agg(a.attname, ',' ORDER BY a.attnum) FROM pg_attribute a
                 WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'p')), ''),
       ''
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = ANY ($2::text[])
UNION ALL
SELECT p.proname, CASE p.prokind WHEN 'p' THEN 'procedure' WHEN 'f' THEN 'function' ELSE 'other' END, '', '', p.prosrc
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = $1 AND p.proname = ANY ($2::text[])
UNION ALL
SELECT t.typname, 'other', '', '', '' FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE n.nspname = $1 AND t.typname = ANY ($2::text[]) AND t.typtype IN ('c', 'd', 'e', 'r')
  AND NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = t.typrelid AND c.relkind <> 'c')
ORDER BY 2, 1)");
  }

  PgStatement acquire, release, renew, lease_left, list, force_release, reap, census;
  std::string seed_expired, schema_version, history_table, history, record, forget, migration_lock, migration_xact_lock,
      migration_lock_blocking,
      migration_unlock, create_schema, migration_rights, catalog;
};

std::vector<AppliedMigration> parse_history(const PGresult* result) {
  std::vector<AppliedMigration> applied;
  for (int row = 0; row < PQntuples(result); ++row)
    applied.push_back(AppliedMigration{static_cast<int>(to_int64(result, row, 0)), text_of(result, row, 1),
                                       text_of(result, row, 2), text_of(result, row, 3) == "t"});
  return applied;
}

/// Owns an eventfd so a blocked listener wait can be interrupted from another thread.
class EventFd {
 public:
  EventFd() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0) throw ConnectionError(fmt::format("eventfd failed: errno {}", errno));
  }
  ~EventFd() { close(fd_); }
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;
  [[nodiscard]] int fd() const noexcept { return fd_; }
  void signal() const noexcept {
    std::uint64_t one = 1;
    [[maybe_unused]] auto written = write(fd_, &one, sizeof one);
  }
  void drain() const noexcept {
    std::uint64_t value = 0;
    [[maybe_unused]] auto got = read(fd_, &value, sizeof value);
  }

 private:
  int fd_;
};

class PgListener final : public ReleaseListener {
 public:
  PgListener(std::unique_ptr<PgConnection> connection, std::int32_t key, std::string channel)
      : connection_(std::move(connection)), key_(std::to_string(key)), channel_(std::move(channel)) {
    connection_->exec(fmt::format("LISTEN \"{}\"", channel_));
  }

  void watch(std::string_view name) override {
    std::array<std::string, 2> params{key_, std::string(name)};
    connection_->exec_params("SELECT pg_advisory_lock_shared($1::integer, hashtext($2))", params);
  }

  void unwatch(std::string_view name) override {
    std::array<std::string, 2> params{key_, std::string(name)};
    connection_->exec_params("SELECT pg_advisory_unlock_shared($1::integer, hashtext($2))", params);
  }

  std::vector<std::string> wait(milliseconds timeout) override {
    std::vector<std::string> released;
    collect(released);
    if (!released.empty()) return released;
    std::array<pollfd, 2> fds{pollfd{PQsocket(connection_->raw()), POLLIN, 0}, pollfd{wake_.fd(), POLLIN, 0}};
    int ready = poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
    if (ready < 0 && errno != EINTR) throw ConnectionError(fmt::format("poll on listener failed: errno {}", errno));
    if (fds[1].revents != 0) wake_.drain();
    if (fds[0].revents != 0) {
      if (PQconsumeInput(connection_->raw()) == 0 || PQstatus(connection_->raw()) == CONNECTION_BAD)
        throw ConnectionError(fmt::format("listener session broke: {}", PQerrorMessage(connection_->raw())));
      collect(released);
    }
    return released;
  }

  void interrupt() noexcept override { wake_.signal(); }

 private:
  void collect(std::vector<std::string>& released) {
    while (PGnotify* notify = PQnotifies(connection_->raw())) {
      if (channel_ == notify->relname) released.emplace_back(notify->extra);
      PQfreemem(notify);
    }
  }

  std::unique_ptr<PgConnection> connection_;
  std::string key_;
  std::string channel_;
  EventFd wake_;
};

/// Directly connected, the migration lock is a session lock and each migration commits on its own.
/// Behind a transaction pooler a session lock would stay on whichever server connection took it, so
/// the whole run is one transaction under a transaction-scoped lock, committed by finish().
class PgMigrationSession final : public MigrationSession {
 public:
  PgMigrationSession(std::unique_ptr<PgConnection> connection, const PgSql& sql, std::string schema,
                     std::string prefix, milliseconds lock_timeout, bool one_transaction)
      : connection_(std::move(connection)),
        sql_(sql),
        schema_(std::move(schema)),
        prefix_(std::move(prefix)),
        one_transaction_(one_transaction) {
    poll_migration_lock(
        [&] {
          if (!one_transaction_) return text_of(connection_->exec(sql_.migration_lock).get(), 0, 0) == "t";
          connection_->exec("BEGIN");
          if (text_of(connection_->exec(sql_.migration_xact_lock).get(), 0, 0) == "t") return true;
          connection_->exec("ROLLBACK");
          return false;
        },
        lock_timeout);
  }

  std::vector<AppliedMigration> history() override {
    // CREATE SCHEMA needs the CREATE privilege on the database even when the schema exists: ask first.
    std::array<std::string, 1> schema{schema_};
    auto found = connection_->exec_params("SELECT 1 FROM pg_namespace WHERE nspname = $1", schema);
    if (PQntuples(found.get()) == 0) connection_->exec(fmt::format("CREATE SCHEMA \"{}\"", schema_));
    connection_->exec(sql_.history_table);
    return parse_history(connection_->exec(sql_.history).get());
  }

  void forget(int version) override {
    std::array<std::string, 1> params{std::to_string(version)};
    connection_->exec_params(sql_.forget, params);
  }

  void apply(const MigrationFile& migration, std::string_view applied_by) override {
    auto started = std::chrono::steady_clock::now();
    if (!one_transaction_) connection_->exec("BEGIN");
    try {
      connection_->exec(fill_placeholders(migration.sql, schema_, prefix_));
      auto elapsed = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - started);
      std::array<std::string, 5> params{std::to_string(migration.version), std::string(migration.name),
                                        std::string(migration.checksum), std::string(applied_by),
                                        std::to_string(elapsed.count())};
      connection_->exec_params(sql_.record, params);
      if (!one_transaction_) connection_->exec("COMMIT");
    } catch (const Error& e) {
      if (PQstatus(connection_->raw()) == CONNECTION_OK) connection_->exec("ROLLBACK");
      throw DatabaseError(fmt::format("migration {:04d}_{} failed and was rolled back, nothing of it{} applied: {}",
                                      migration.version, migration.name,
                                      one_transaction_ ? " nor of this run" : "", e.what()),
                          e.sqlstate());
    }
  }

  void finish() override {
    if (one_transaction_) connection_->exec("COMMIT");
  }

 private:
  std::unique_ptr<PgConnection> connection_;
  const PgSql& sql_;
  std::string schema_;
  std::string prefix_;
  bool one_transaction_;
};

/// Bare libpq on one connection, parameters formatted into stack buffers: PQexecPrepared, or behind
/// a transaction pooler the same statements sent unnamed with PQexecParams.
class PgRawClient final : public RawLockClient {
 public:
  PgRawClient(const std::string& uri, const PgSql& sql, bool unnamed) : conn_(PQconnectdb(uri.c_str())), unnamed_(unnamed) {
    if (PQstatus(conn_.get()) != CONNECTION_OK)
      throw ConnectionError(fmt::format("raw client: {}", PQerrorMessage(conn_.get())));
    prepare(0, sql.acquire.sql);
    prepare(1, sql.release.sql);
    prepare(2, "SELECT pg_advisory_lock($1::bigint)");
    prepare(3, "SELECT pg_advisory_unlock($1::bigint)");
  }

  std::optional<std::int64_t> acquire(const std::string& name, const std::string& owner,
                                      std::int64_t ttl_ms) override {
    char ttl[24];
    *std::to_chars(ttl, ttl + sizeof ttl - 1, ttl_ms).ptr = '\0';
    const char* values[] = {name.c_str(), owner.c_str(), ttl, "0"};
    auto result = run(0, values);
    if (PQntuples(result.get()) == 0) return std::nullopt;
    return to_int64(result.get(), 0, 1);
  }

  bool release(const std::string& name, const std::string& owner, std::int64_t token) override {
    char token_text[24];
    *std::to_chars(token_text, token_text + sizeof token_text - 1, token).ptr = '\0';
    const char* values[] = {name.c_str(), owner.c_str(), token_text};
    return PQntuples(run(1, values).get()) > 0;
  }

  bool blocking_lock(std::int64_t key) override { return run_with_key(2, key); }
  void blocking_unlock(std::int64_t key) override { run_with_key(3, key); }
  std::string_view blocking_lock_functions() const noexcept override { return "pg_advisory_lock + pg_advisory_unlock"; }

 private:
  struct ConnDeleter {
    void operator()(PGconn* conn) const noexcept { PQfinish(conn); }
  };

  void prepare(std::size_t id, const std::string& sql) {
    statements_[id] = PgStatement(id, sql);
    if (unnamed_) return;
    PgResult result(PQprepare(conn_.get(), statements_[id].name.c_str(), sql.c_str(), 0, nullptr));
    if (PQresultStatus(result.get()) != PGRES_COMMAND_OK) throw DatabaseError(PQerrorMessage(conn_.get()));
  }

  template <std::size_t N>
  PgResult run(std::size_t id, const char* const (&values)[N]) {
    auto& statement = statements_[id];
    PgResult result(unnamed_ ? PQexecParams(conn_.get(), statement.sql.c_str(), N, nullptr, values, nullptr, nullptr, 0)
                             : PQexecPrepared(conn_.get(), statement.name.c_str(), N, values, nullptr, nullptr, 0));
    if (PQresultStatus(result.get()) != PGRES_TUPLES_OK) throw DatabaseError(PQerrorMessage(conn_.get()));
    return result;
  }

  bool run_with_key(std::size_t id, std::int64_t key) {
    char key_text[24];
    *std::to_chars(key_text, key_text + sizeof key_text - 1, key).ptr = '\0';
    const char* values[] = {key_text};
    run(id, values);
    return true;
  }

  std::unique_ptr<PGconn, ConnDeleter> conn_;
  bool unnamed_;
  std::array<PgStatement, 4> statements_;
};

class PgBackend final : public Backend {
 public:
  PgBackend(const StoreUri& uri, const BackendSettings& settings)
      : schema_(uri.schema),
        prefix_(uri.prefix),
        driver_uri_(uri.driver_uri),
        key_(installation_key(uri.schema, uri.prefix)),
        channel_(fmt::format("dblock_release_{:08x}", static_cast<std::uint32_t>(key_))),
        sql_(uri.schema, uri.prefix, key_, channel_),
        advisory_sql_(uri.schema, uri.prefix),
        mode_(std::make_shared<PgStatementMode>(uri.transaction_pooler)),
        pool_([driver_uri = uri.driver_uri, redacted = uri.redacted, settings, mode = mode_] {
                return std::make_unique<PgConnection>(driver_uri, redacted, settings.connect_timeout,
                                                      settings.statement_timeout, settings.logger, mode);
              },
              uri.redacted, uri.pool_size, settings.connect_timeout) {
    auto first = pool_.lease();  // proves the server and the credentials now, not at first use
  }

  Dialect dialect() const noexcept override { return Dialect::postgresql; }

  std::optional<Grant> try_acquire(std::string_view name, std::string_view owner, milliseconds ttl,
                                   std::int64_t held_token) override {
    std::array<std::string, 4> params{std::string(name), std::string(owner), std::to_string(ttl.count()),
                                      std::to_string(held_token)};
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

  std::vector<std::size_t> renew(std::span<const HeldRef> held, std::chrono::steady_clock::time_point reply_by) override {
    std::vector<std::string_view> names, owners;
    std::string tokens = "{", ttls = "{";
    for (std::size_t i = 0; i < held.size(); ++i) {
      names.push_back(held[i].name);
      owners.push_back(held[i].owner);
      tokens += fmt::format("{}{}", i == 0 ? "" : ",", held[i].token);
      ttls += fmt::format("{}{}", i == 0 ? "" : ",", held[i].ttl.count());
    }
    std::array<std::string, 4> params{pg_text_array(names), pg_text_array(owners), tokens + "}", ttls + "}"};
    // Extending a lease is idempotent, so a session that turns out broken is replaced and the
    // statement run once more.
    auto result = pool_.idempotent([&](PgConnection& session) {
      // A second try after a lost reply is pointless once the first deadline has passed.
      if (std::chrono::steady_clock::now() >= reply_by)
        throw OutcomeUnknown("renewal: no time left before the first local deadline", "57014");
      auto limit = session.limit_replies(reply_by);
      return run(session, sql_.renew, params);
    });
    std::vector<std::size_t> renewed;
    renewed.reserve(static_cast<std::size_t>(PQntuples(result.get())));
    for (int row = 0; row < PQntuples(result.get()); ++row)
      renewed.push_back(static_cast<std::size_t>(to_int64(result.get(), row, 0)));
    return renewed;
  }

  std::optional<milliseconds> lease_left(std::string_view name) override {
    std::array<std::string, 1> params{std::string(name)};
    auto result = pool_.idempotent([&](PgConnection& session) { return run(session, sql_.lease_left, params); });
    if (PQntuples(result.get()) == 0) return std::nullopt;
    return milliseconds(to_int64(result.get(), 0, 0));
  }

  bool force_release(std::string_view name) override {
    std::array<std::string, 1> params{std::string(name)};
    auto session = pool_.lease();
    auto result = run(*session, sql_.force_release, params);
    return PQntuples(result.get()) > 0;
  }

  bool has_advisory_locks() const noexcept override { return !mode_->behind_transaction_pooler(); }
  std::string no_advisory_message() const override {
    if (!mode_->behind_transaction_pooler()) return Backend::no_advisory_message();
    return "advisory mode cannot work behind a pooler in transaction mode (pool_mode=transaction): session advisory "
           "locks belong to one server connection, and the pooler runs each statement on whichever is free. Connect "
           "advisory mode to PostgreSQL directly or through a session-mode pool, or use LockMode::table";
  }

  std::unique_ptr<AdvisorySession> pin_advisory_session() override {
    if (!has_advisory_locks()) throw InvalidArgument(no_advisory_message());
    return make_pg_advisory_session(pool_.lease(), advisory_sql_);
  }
  void on_pool_dry(std::weak_ptr<const std::function<void()>> give_back) override {
    pool_.add_reclaimer(std::move(give_back));
  }

  std::unique_ptr<ReleaseListener> listen() override {
    // LISTEN and the watch locks are session state: behind a transaction pooler waiters poll.
    if (mode_->behind_transaction_pooler()) return nullptr;
    return std::make_unique<PgListener>(pool_.connect_dedicated(), key_, channel_);
  }

  std::size_t reap(std::size_t batch) override {
    std::array<std::string, 1> params{std::to_string(batch)};
    auto session = pool_.lease();
    auto result = run(*session, sql_.reap, params);
    return static_cast<std::size_t>(to_int64(result.get(), 0, 0));
  }

  LockCensus census() override {
    auto result = pool_.idempotent([&](PgConnection& session) { return run(session, sql_.census, std::span<const std::string>()); });
    return LockCensus{to_int64(result.get(), 0, 0), to_int64(result.get(), 0, 1),
                      milliseconds(to_int64(result.get(), 0, 2))};
  }

  std::unique_ptr<RawLockClient> raw_client() override {
    return std::make_unique<PgRawClient>(driver_uri_, sql_, mode_->behind_transaction_pooler());
  }

  void seed_expired(std::string_view stem, std::size_t count) override {
    std::array<std::string, 2> params{std::string(stem), std::to_string(count)};
    pool_.lease()->exec_params(sql_.seed_expired, params);
  }

  int schema_version() override {
    auto result = pool_.idempotent([&](PgConnection& session) { return session.exec(sql_.schema_version); });
    return static_cast<int>(to_int64(result.get(), 0, 0));
  }

  std::optional<std::vector<AppliedMigration>> read_history() override {
    try {
      auto result = pool_.idempotent([&](PgConnection& session) { return session.exec(sql_.history); });
      return parse_history(result.get());
    } catch (const SchemaError&) {
      return std::nullopt;  // no history table (or schema) yet
    }
  }

  std::vector<CatalogObject> catalog(std::span<const std::string> names) override {
    std::vector<std::string_view> views(names.begin(), names.end());
    std::array<std::string, 2> params{schema_, pg_text_array(views)};
    auto result = pool_.idempotent([&](PgConnection& session) { return session.exec_params(sql_.catalog, params); });
    std::vector<CatalogObject> objects;
    for (int row = 0; row < PQntuples(result.get()); ++row)
      objects.push_back({text_of(result.get(), row, 1), text_of(result.get(), row, 0), text_of(result.get(), row, 2),
                         split_list(text_of(result.get(), row, 3)), text_of(result.get(), row, 4)});
    return objects;
  }
  std::vector<std::string> missing_migration_rights(std::span<const CatalogObject> to_create,
                                                    std::span<const CatalogObject> to_redefine) override {
    (void)to_create;  // whatever is created needs CREATE on the schema, which is always asked
    std::vector<std::string_view> redefined;
    for (auto& object : to_redefine) redefined.push_back(object.name);
    std::array<std::string, 2> params{schema_, pg_text_array(redefined)};
    auto result = pool_.idempotent([&](PgConnection& session) { return session.exec_params(sql_.migration_rights, params); });
    std::vector<std::string> missing;
    for (int row = 0; row < PQntuples(result.get()); ++row) missing.push_back(text_of(result.get(), row, 0));
    return missing;
  }
  std::optional<std::int64_t> xact_lock(pg_conn* conn, const AdvisoryTarget& target, milliseconds wait) override {
    return pg_xact_lock(conn, advisory_sql_, target, wait);
  }
  std::string filled(std::string_view migration_sql) const override {
    return fill_placeholders(migration_sql, schema_, prefix_);
  }
  std::string history_ddl() const override { return sql_.history_table; }

  std::unique_ptr<MigrationSession> begin_migration(milliseconds lock_timeout) override {
    return std::make_unique<PgMigrationSession>(pool_.connect_dedicated(), sql_, schema_, prefix_, lock_timeout,
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

  std::vector<LockInfo> list_rows(std::string_view only_name) override {
    std::array<std::string, 1> params{std::string(only_name)};
    auto result = pool_.idempotent([&](PgConnection& session) { return run(session, sql_.list, params); });
    std::vector<LockInfo> rows;
    for (int row = 0; row < PQntuples(result.get()); ++row)
      rows.push_back(LockInfo{text_of(result.get(), row, 0), text_of(result.get(), row, 1),
                              to_int64(result.get(), row, 2), to_int64(result.get(), row, 3),
                              milliseconds(to_int64(result.get(), row, 4))});
    return rows;
  }

  std::string schema_;
  std::string prefix_;
  std::string driver_uri_;
  std::int32_t key_;
  std::string channel_;
  PgSql sql_;
  PgAdvisorySql advisory_sql_;
  std::shared_ptr<PgStatementMode> mode_;
  SessionPool<PgConnection> pool_;
};

}  // namespace

std::string render_postgres_migrations(const StoreUri& uri, std::span<const MigrationFile> migrations) {
  auto key = installation_key(uri.schema, uri.prefix);
  PgSql sql(uri.schema, uri.prefix, key, "");
  std::string script = fmt::format(
      "-- dblock migrations for PostgreSQL: schema \"{}\", table prefix \"{}\". Apply with\n"
      "--   psql -v ON_ERROR_STOP=1 -X -f THIS_FILE\n"
      "-- The history records make `dblock migrate status` recognise what was applied by hand.\n"
      "{};\n{};\n{};\n",
      uri.schema, uri.prefix, sql.migration_lock_blocking, sql.create_schema, sql.history_table);
  for (auto& migration : migrations) {
    // The same fill() `up` applies; name and checksum are [a-z0-9_] and hex, safe as literals.
    script += fmt::format(
        "\n-- {:04d}_{}\nBEGIN;\n{}\nINSERT INTO \"{}\".\"{}schema_history\" "
        "(version, name, checksum, applied_by, execution_ms, success)\nVALUES ({}, '{}', '{}', 'dblock migrate sql', 0, "
        "true);\nCOMMIT;\n",
        migration.version, migration.name, fill_placeholders(migration.sql, uri.schema, uri.prefix), uri.schema,
        uri.prefix, migration.version, migration.name, migration.checksum);
  }
  return script + fmt::format("\n{};\n", sql.migration_unlock);
}

std::string postgres_driver_version() {
  int version = PQlibVersion();  // e.g. 150018
  return fmt::format("libpq {}.{}", version / 10000, version % 10000);
}

std::unique_ptr<Backend> make_postgres_backend(const StoreUri& uri, const BackendSettings& settings) {
  return std::make_unique<PgBackend>(uri, settings);
}

}  // namespace dblock::detail

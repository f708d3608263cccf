// SOCI's sqlite3 header wraps <sqlite3.h> in namespace sqlite_api: include it first, and never
// <sqlite3.h> directly (doc/database-facts.md §4).
#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>
#include <soci/version.h>

#include "backends/sqlite/sqlite_backend.hpp"

#include <map>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "backends/session_pool.hpp"
#include "base/json.hpp"
#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

// SQLite's clock in epoch milliseconds; exact, unlike the julianday() form (1 ms low).
constexpr std::string_view kNow =
    "(CAST(strftime('%s','now') AS INTEGER) * 1000 + CAST(substr(strftime('%f','now'), 4) AS INTEGER))";

constexpr int kSqliteBusy = 5;
constexpr int kSqliteLocked = 6;

struct SqliteSql {
  explicit SqliteSql(std::string_view prefix) {
    auto fill = [&](std::string_view sql) { return detail::fill(sql, {{"{prefix}", prefix}, {"{now}", kNow}}); };
    // A re-entry needs the token of the grant the caller holds (:held, 0 for none): a live row of
    // the caller's with another token is a leftover it no longer counts, taken over afresh.
    acquire = detail::fill(fill(R"(
INSERT INTO "{prefix}locks" AS l (name, owner, count, token, acquired_at, expires_at)
VALUES (:name, :owner, 1, (SELECT value + 1 FROM "{prefix}token_counter" WHERE id = 1), {now}, {now} + :ttl)
ON CONFLICT (name) DO UPDATE SET
  count       = CASE WHEN {reenter} THEN l.count + 1 ELSE 1 END,
  token       = CASE WHEN {reenter} THEN l.token ELSE excluded.token END,
  acquired_at = CASE WHEN {reenter} THEN l.acquired_at ELSE excluded.acquired_at END,
  owner       = excluded.owner,
  expires_at  = CASE WHEN {reenter} THEN max(l.expires_at, excluded.expires_at) ELSE excluded.expires_at END
WHERE l.owner = excluded.owner OR l.expires_at <= {now}
RETURNING count, token)"), {{"{reenter}", "l.owner = excluded.owner AND l.expires_at > " + std::string(kNow) +
                                             " AND l.token = :held"}});
    release_last = fill(R"(
DELETE FROM "{prefix}locks" WHERE name = :name AND owner = :owner AND token = :token AND count = 1 RETURNING 0)");
    release_inner = fill(R"(
UPDATE "{prefix}locks" SET count = count - 1
WHERE name = :name AND owner = :owner AND token = :token AND count > 1 RETURNING count)");
    renew = fill(R"(
UPDATE "{prefix}locks" SET expires_at = max(expires_at, {now} + h.ttl)
FROM (SELECT value ->> 0 AS name, value ->> 1 AS owner, value ->> 2 AS token, value ->> 3 AS ttl
      FROM json_each(:held)) AS h
WHERE "{prefix}locks".name = h.name AND "{prefix}locks".owner = h.owner AND "{prefix}locks".token = h.token
  AND "{prefix}locks".expires_at > {now}
RETURNING name, owner, token)");
    lease_left = fill(R"(SELECT expires_at - {now} FROM "{prefix}locks" WHERE name = :name)");
    list = fill(R"(
SELECT name, owner, count, token, expires_at - {now} FROM "{prefix}locks"
WHERE (:name = '' OR name = :name2) ORDER BY name)");
    force_release = fill(R"(DELETE FROM "{prefix}locks" WHERE name = :name RETURNING name)");
    // One statement: SQLite serialises writers, so the expiry re-check sees any takeover.
    reap = fill(R"(
DELETE FROM "{prefix}locks" WHERE name IN (SELECT name FROM "{prefix}locks" WHERE expires_at <= {now}
                                           ORDER BY expires_at LIMIT :batch)
  AND expires_at <= {now}
RETURNING name)");
    census = fill(R"(
SELECT coalesce(sum(expires_at > {now}), 0), coalesce(sum(expires_at <= {now}), 0),
       coalesce({now} - min(CASE WHEN expires_at > {now} THEN acquired_at END), 0)
FROM "{prefix}locks")");
    seed_expired = fill(R"(
WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < :count)
INSERT INTO "{prefix}locks" (name, owner, count, token, acquired_at, expires_at)
SELECT :stem || i, 'dblock-bench', 1, (SELECT value FROM "{prefix}token_counter") + i, {now} - 2000, {now} - 1000
FROM g)");
    schema_version = fill(R"(SELECT coalesce(max(version), 0) FROM "{prefix}schema_history" WHERE success)");
    history_table = fill(R"(
CREATE TABLE IF NOT EXISTS "{prefix}schema_history" (
  version      INTEGER PRIMARY KEY,
  name         TEXT NOT NULL,
  checksum     TEXT NOT NULL,
  applied_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  applied_by   TEXT NOT NULL,
  execution_ms INTEGER NOT NULL,
  success      INTEGER NOT NULL
))");
    history = fill(R"(SELECT version, name, checksum, success FROM "{prefix}schema_history" ORDER BY version)");
    record = fill(R"(
INSERT INTO "{prefix}schema_history" (version, name, checksum, applied_by, execution_ms, success)
VALUES (:version, :name, :checksum, :applied_by, :execution_ms, 1))");
    forget = fill(R"(DELETE FROM "{prefix}schema_history" WHERE version = :version)");
  }

  std::string acquire, release_last, release_inner, renew, lease_left, list, force_release, reap, census;
  std::string seed_expired, schema_version, history_table, history, record, forget;
};

/// Translates SOCI/SQLite failures into dblock exceptions.
[[noreturn]] void rethrow_translated(std::string_view what, std::string_view path) {
  try {
    throw;
  } catch (const soci::sqlite3_soci_error& e) {
    std::string_view detail = e.what();
    detail = detail.substr(0, detail.find(" while preparing"));  // SOCI appends the whole statement
    auto message = fmt::format("{} on sqlite://{}: {}", what, path, detail);
    // Compare primary codes: extended ones such as SQLITE_BUSY_SNAPSHOT (517) are busy too.
    int primary = e.result() & 0xff;
    if (primary == kSqliteBusy || primary == kSqliteLocked) throw TransientError(message);
    if (std::string_view(e.what()).find("no such table") != std::string_view::npos)
      throw SchemaError(SchemaError::Reason::missing,
                        fmt::format("dblock's tables are missing in sqlite://{}: run `dblock migrate up`", path));
    throw DatabaseError(message);
  } catch (const soci::soci_error& e) {
    std::string_view detail = e.what();
    throw DatabaseError(fmt::format("{} on sqlite://{}: {}", what, path, detail.substr(0, detail.find(" while "))));
  }
}

/// Executes a statement that returns at most one row and runs it to completion: SQLite commits an
/// autocommit write only when its statement finishes, and SOCI stops stepping after the first row.
bool execute_single(soci::statement& statement) {
  bool got = statement.execute(true);
  if (got) {
    [[maybe_unused]] bool more = statement.fetch();
  }
  return got;
}

/// One SOCI session on the file with every statement prepared once. Single-threaded, like the
/// SOCI session it wraps; the pool hands it to one thread at a time.
class SqliteSession {
 public:
  SqliteSession(const std::string& path, std::chrono::milliseconds busy_timeout, const SqliteSql& sql)
      : path_(path), sql_(sql) {
    try {
      session_.open(soci::sqlite3, fmt::format("db=\"{}\"", path));
      raw_ = static_cast<soci::sqlite3_session_backend*>(session_.get_backend())->conn_;
      session_ << fmt::format("PRAGMA busy_timeout = {}", busy_timeout.count());
      switch_to_wal(busy_timeout);
      session_ << "PRAGMA synchronous = NORMAL";
    } catch (const soci::soci_error& e) {
      throw ConnectionError(fmt::format("cannot open SQLite database sqlite://{}: {}", path, e.what()));
    }
  }

  /// WAL is a property of the file: once one opener has set it, the others only read it. The
  /// switch needs an exclusive lock, and SQLite answers SQLITE_BUSY without calling the busy
  /// handler when two openers of a new file race for it (deadlock avoidance), so the race is
  /// retried here, bounded by the busy timeout.
  void switch_to_wal(std::chrono::milliseconds busy_timeout) {
    auto deadline = std::chrono::steady_clock::now() + busy_timeout;
    auto pause = std::chrono::milliseconds(1);
    for (;;) {
      try {
        std::string mode;
        session_ << "PRAGMA journal_mode", soci::into(mode);
        if (mode == "wal") return;
        session_ << "PRAGMA journal_mode = WAL", soci::into(mode);
        if (mode == "wal") return;
        throw ConnectionError(fmt::format("sqlite://{} cannot use WAL (journal mode stays {})", path_, mode));
      } catch (const soci::sqlite3_soci_error& e) {
        bool busy = (e.result() & 0xff) == kSqliteBusy || (e.result() & 0xff) == kSqliteLocked;
        if (!busy || std::chrono::steady_clock::now() + pause > deadline) throw;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
  }

  // Statements are prepared on first use (the tables may not exist yet when migrating) and then
  // reused for the life of the session.
  soci::statement& acquire() {
    return prepared(acquire_, [&] {
      return soci::statement((session_.prepare << sql_.acquire, soci::use(name_, "name"), soci::use(owner_, "owner"),
                              soci::use(number_, "ttl"), soci::use(held_token_, "held"), soci::into(result_a_),
                              soci::into(result_b_)));
    });
  }
  soci::statement& release_last() {
    return prepared(release_last_, [&] {
      return soci::statement((session_.prepare << sql_.release_last, soci::use(name_, "name"),
                              soci::use(owner_, "owner"), soci::use(number_, "token"), soci::into(result_a_)));
    });
  }
  soci::statement& release_inner() {
    return prepared(release_inner_, [&] {
      return soci::statement((session_.prepare << sql_.release_inner, soci::use(name_, "name"),
                              soci::use(owner_, "owner"), soci::use(number_, "token"), soci::into(result_a_)));
    });
  }
  soci::statement& renew() {
    return prepared(renew_, [&] {
      return soci::statement((session_.prepare << sql_.renew, soci::use(text_, "held"), soci::into(out_name_),
                             soci::into(out_owner_), soci::into(result_a_)));
    });
  }
  soci::statement& lease_left() {
    return prepared(lease_left_, [&] {
      return soci::statement((session_.prepare << sql_.lease_left, soci::use(name_, "name"), soci::into(result_a_)));
    });
  }
  soci::statement& list() {
    return prepared(list_, [&] {
      return soci::statement((session_.prepare << sql_.list, soci::use(name_, "name"), soci::use(name_, "name2"),
                              soci::into(out_name_), soci::into(out_owner_), soci::into(result_a_),
                              soci::into(result_b_), soci::into(result_c_)));
    });
  }
  soci::statement& begin_immediate() {
    return prepared(begin_immediate_, [&] { return soci::statement((session_.prepare << "BEGIN IMMEDIATE")); });
  }
  soci::statement& commit() {
    return prepared(commit_, [&] { return soci::statement((session_.prepare << "COMMIT")); });
  }
  soci::statement& reap() {
    return prepared(reap_, [&] {
      return soci::statement((session_.prepare << sql_.reap, soci::use(number_, "batch"), soci::into(out_name_)));
    });
  }
  soci::statement& census() {
    return prepared(census_, [&] {
      return soci::statement(
          (session_.prepare << sql_.census, soci::into(result_a_), soci::into(result_b_), soci::into(result_c_)));
    });
  }
  soci::statement& force_release() {
    return prepared(force_release_, [&] {
      return soci::statement((session_.prepare << sql_.force_release, soci::use(name_, "name"),
                              soci::into(out_name_)));
    });
  }

  /// False after any failure (a statement may be mid-step) or inside a transaction.
  [[nodiscard]] bool usable() const noexcept { return !broken_ && sqlite_api::sqlite3_get_autocommit(raw_) != 0; }

  /// Runs `body` and translates failures; a failed session is not reused.
  template <class Fn>
  auto guarded(std::string_view what, Fn&& body) {
    try {
      return body();
    } catch (const Error&) {
      broken_ = true;
      throw;
    } catch (...) {
      broken_ = true;
      rethrow_translated(what, path_);
    }
  }

  void exec_script(const std::string& sql) {
    char* error = nullptr;
    if (sqlite_api::sqlite3_exec(raw_, sql.c_str(), nullptr, nullptr, &error) != 0) {
      std::string message = error != nullptr ? error : "unknown error";
      sqlite_api::sqlite3_free(error);
      throw soci::sqlite3_soci_error(message, sqlite_api::sqlite3_errcode(raw_));
    }
  }

  soci::session& session() { return session_; }

 private:
  template <class Make>
  soci::statement& prepared(std::optional<soci::statement>& slot, Make&& make) {
    if (!slot) slot.emplace(make());
    return *slot;
  }

  std::string path_;
  const SqliteSql& sql_;
  soci::session session_;  // declared before the statements: they must be destroyed first
  sqlite_api::sqlite3* raw_ = nullptr;
  bool broken_ = false;

 public:
  // Bound parameters and results of the prepared statements (bound by address at prepare time).
  std::string name_, owner_, text_, out_name_, out_owner_;
  std::int64_t number_ = 0, held_token_ = 0, result_a_ = 0, result_b_ = 0, result_c_ = 0;

 private:
  std::optional<soci::statement> acquire_, release_last_, release_inner_, renew_, lease_left_, list_, force_release_,
      reap_, census_, begin_immediate_, commit_;
};

std::vector<AppliedMigration> read_history_rows(soci::session& session, const SqliteSql& sql) {
  std::vector<AppliedMigration> applied;
  soci::rowset<soci::row> rows = session.prepare << sql.history;
  for (auto& row : rows)
    applied.push_back(
        AppliedMigration{row.get<int>(0), row.get<std::string>(1), row.get<std::string>(2), row.get<int>(3) != 0});
  return applied;
}

class SqliteMigrationSession final : public MigrationSession {
 public:
  SqliteMigrationSession(std::unique_ptr<SqliteSession> session, const SqliteSql& sql, std::string prefix,
                         std::chrono::milliseconds lock_timeout)
      : session_(std::move(session)), sql_(sql), prefix_(std::move(prefix)) {
    // The database-level lock: one writer at a time, held until finish(). The busy timeout
    // bounds the wait for a concurrent migrator.
    session_->guarded("taking the migration lock", [&] {
      session_->session() << fmt::format("PRAGMA busy_timeout = {}", lock_timeout.count());
      try {
        session_->exec_script("BEGIN IMMEDIATE");
      } catch (const soci::sqlite3_soci_error& e) {
        if ((e.result() & 0xff) == kSqliteBusy)
          throw Timeout(fmt::format("another `dblock migrate` held the database for longer than {}ms",
                                    lock_timeout.count()));
        throw;
      }
    });
  }

  ~SqliteMigrationSession() override {
    if (!finished_) {
      try {
        session_->exec_script("ROLLBACK");
      } catch (...) {  // the connection closes next, which rolls back as well
      }
    }
  }

  std::vector<AppliedMigration> history() override {
    return session_->guarded("reading the migration history", [&] {
      session_->exec_script(sql_.history_table);
      return read_history_rows(session_->session(), sql_);
    });
  }

  void forget(int version) override {
    session_->guarded("clearing a history record",
                      [&] { session_->session() << sql_.forget, soci::use(version, "version"); });
  }

  void apply(const MigrationFile& migration, std::string_view applied_by) override {
    auto started = std::chrono::steady_clock::now();
    try {
      session_->exec_script("SAVEPOINT dblock_migration");
      session_->exec_script(fill_placeholders(migration.sql, "main", prefix_));
      int version = migration.version;
      std::string name(migration.name), checksum(migration.checksum), by(applied_by);
      auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
      std::int64_t elapsed_ms = elapsed.count();
      session_->session() << sql_.record, soci::use(version, "version"), soci::use(name, "name"),
          soci::use(checksum, "checksum"), soci::use(by, "applied_by"), soci::use(elapsed_ms, "execution_ms");
      session_->exec_script("RELEASE dblock_migration");
    } catch (const std::exception& e) {
      try {
        session_->exec_script("ROLLBACK TO dblock_migration; RELEASE dblock_migration");
      } catch (...) {
      }
      throw DatabaseError(fmt::format("migration {:04d}_{} failed and was rolled back, nothing of it applied: {}",
                                      migration.version, migration.name, e.what()));
    }
  }

  void finish() override {
    session_->guarded("committing migrations", [&] { session_->exec_script("COMMIT"); });
    finished_ = true;
  }

 private:
  std::unique_ptr<SqliteSession> session_;
  const SqliteSql& sql_;
  std::string prefix_;
  bool finished_ = false;
};

/// Bare sqlite3: the backend's statements prepared once on one connection, bound and stepped.
class SqliteRawClient final : public RawLockClient {
 public:
  SqliteRawClient(const std::string& path, std::chrono::milliseconds busy_timeout, const SqliteSql& sql) {
    sqlite_api::sqlite3* db = nullptr;
    int rc = sqlite_api::sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr);
    db_.reset(db);
    if (rc != 0) throw ConnectionError(fmt::format("raw client: cannot open {}", path));
    sqlite_api::sqlite3_busy_timeout(db, static_cast<int>(busy_timeout.count()));
    exec("PRAGMA synchronous = NORMAL");
    acquire_ = prepare(sql.acquire);
    release_last_ = prepare(sql.release_last);
    release_inner_ = prepare(sql.release_inner);
    begin_ = prepare("BEGIN IMMEDIATE");
    commit_ = prepare("COMMIT");
  }

  std::optional<std::int64_t> acquire(const std::string& name, const std::string& owner,
                                      std::int64_t ttl_ms) override {
    auto* st = acquire_.get();
    bind(st, name, owner, ttl_ms);
    sqlite_api::sqlite3_bind_int64(st, 4, 0);  // :held, no grant held
    std::optional<std::int64_t> token;
    if (step(st) == SQLITE_ROW) token = sqlite_api::sqlite3_column_int64(st, 1);
    while (step(st) == SQLITE_ROW) {
    }
    sqlite_api::sqlite3_reset(st);
    return token;
  }

  bool release(const std::string& name, const std::string& owner, std::int64_t token) override {
    run(begin_.get());
    bool released = run_returning(release_last_.get(), name, owner, token) ||
                    run_returning(release_inner_.get(), name, owner, token);
    run(commit_.get());
    return released;
  }

  bool blocking_lock(std::int64_t) override { return false; }
  void blocking_unlock(std::int64_t) override {}

 private:
  struct DbCloser {
    void operator()(sqlite_api::sqlite3* db) const noexcept { sqlite_api::sqlite3_close(db); }
  };
  struct StatementFinalizer {
    void operator()(sqlite_api::sqlite3_stmt* st) const noexcept { sqlite_api::sqlite3_finalize(st); }
  };
  using Statement = std::unique_ptr<sqlite_api::sqlite3_stmt, StatementFinalizer>;

  Statement prepare(const std::string& sql) {
    sqlite_api::sqlite3_stmt* st = nullptr;
    if (sqlite_api::sqlite3_prepare_v2(db_.get(), sql.c_str(), -1, &st, nullptr) != 0)
      throw DatabaseError(fmt::format("raw client: {}", sqlite_api::sqlite3_errmsg(db_.get())));
    return Statement(st);
  }
  void exec(const char* sql) { sqlite_api::sqlite3_exec(db_.get(), sql, nullptr, nullptr, nullptr); }
  static void bind(sqlite_api::sqlite3_stmt* st, const std::string& name, const std::string& owner, std::int64_t n) {
    sqlite_api::sqlite3_bind_text(st, 1, name.c_str(), static_cast<int>(name.size()), nullptr);
    sqlite_api::sqlite3_bind_text(st, 2, owner.c_str(), static_cast<int>(owner.size()), nullptr);
    sqlite_api::sqlite3_bind_int64(st, 3, n);
  }
  int step(sqlite_api::sqlite3_stmt* st) {
    int rc = sqlite_api::sqlite3_step(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
      sqlite_api::sqlite3_reset(st);
      throw DatabaseError(fmt::format("raw client: {}", sqlite_api::sqlite3_errmsg(db_.get())));
    }
    return rc;
  }
  void run(sqlite_api::sqlite3_stmt* st) {
    step(st);
    sqlite_api::sqlite3_reset(st);
  }
  bool run_returning(sqlite_api::sqlite3_stmt* st, const std::string& name, const std::string& owner,
                     std::int64_t token) {
    bind(st, name, owner, token);
    bool got = step(st) == SQLITE_ROW;
    while (got && step(st) == SQLITE_ROW) {
    }
    sqlite_api::sqlite3_reset(st);
    return got;
  }

  std::unique_ptr<sqlite_api::sqlite3, DbCloser> db_;
  Statement acquire_, release_last_, release_inner_, begin_, commit_;
};

class SqliteBackend final : public Backend {
 public:
  SqliteBackend(const StoreUri& uri, std::chrono::milliseconds busy_timeout, std::shared_ptr<spdlog::logger> logger)
      : path_(uri.driver_uri),
        prefix_(uri.prefix),
        busy_timeout_(busy_timeout),
        sql_(uri.prefix),
        logger_(std::move(logger)),
        pool_([this] { return std::make_unique<SqliteSession>(path_, busy_timeout_, sql_); }, uri.redacted,
              uri.pool_size, busy_timeout) {
    auto first = pool_.lease();  // opens (and creates) the file now, so a bad path fails at open
  }

  Dialect dialect() const noexcept override { return Dialect::sqlite; }

  std::optional<Grant> try_acquire(std::string_view name, std::string_view owner, milliseconds ttl,
                                   std::int64_t held_token) override {
    auto session = pool_.lease();
    return session->guarded("acquire", [&]() -> std::optional<Grant> {
      session->name_ = name;
      session->owner_ = owner;
      session->number_ = ttl.count();
      session->held_token_ = held_token;
      if (!execute_single(session->acquire())) return std::nullopt;
      return Grant{session->result_a_, session->result_b_};
    });
  }

  std::optional<std::int64_t> release(std::string_view name, std::string_view owner, std::int64_t token) override {
    auto session = pool_.lease();
    return session->guarded("release", [&]() -> std::optional<std::int64_t> {
      session->name_ = name;
      session->owner_ = owner;
      session->number_ = token;
      // Delete-at-one and decrement are two statements: one IMMEDIATE transaction makes them atomic.
      session->begin_immediate().execute(true);
      std::optional<std::int64_t> remaining;
      if (execute_single(session->release_last())) remaining = 0;
      else if (execute_single(session->release_inner())) remaining = session->result_a_;
      session->commit().execute(true);
      return remaining;
    });
  }

  std::vector<std::size_t> renew(std::span<const HeldRef> held, std::chrono::steady_clock::time_point) override {
    std::string json = "[";
    for (std::size_t i = 0; i < held.size(); ++i)
      json += fmt::format("{}[{},{},{},{}]", i == 0 ? "" : ",", json_string(held[i].name), json_string(held[i].owner),
                          held[i].token, held[i].ttl.count());
    json += "]";
    auto session = pool_.lease();
    return session->guarded("renew", [&] {
      session->text_ = json;
      // SQLite's RETURNING cannot name the joined list: the row's owner and token say which it was.
      std::vector<std::size_t> renewed;
      std::multimap<std::string_view, std::size_t> by_name;
      for (std::size_t i = 0; i < held.size(); ++i) by_name.emplace(held[i].name, i);
      auto position_of_row = [&] {
        auto [first, last] = by_name.equal_range(session->out_name_);
        for (auto it = first; it != last; ++it)
          if (held[it->second].owner == session->out_owner_ && held[it->second].token == session->result_a_)
            return it->second;
        return held.size();
      };
      if (session->renew().execute(true)) {
        do renewed.push_back(position_of_row());
        while (session->renew().fetch());
      }
      return renewed;
    });
  }

  std::optional<milliseconds> lease_left(std::string_view name) override {
    auto session = pool_.lease();
    return session->guarded("reading a lease", [&]() -> std::optional<milliseconds> {
      session->name_ = name;
      if (!execute_single(session->lease_left())) return std::nullopt;
      return milliseconds(session->result_a_);
    });
  }

  bool force_release(std::string_view name) override {
    auto session = pool_.lease();
    return session->guarded("force release", [&] {
      session->name_ = name;
      return execute_single(session->force_release());
    });
  }

  std::size_t reap(std::size_t batch) override {
    auto session = pool_.lease();
    return session->guarded("reaping", [&] {
      session->number_ = static_cast<std::int64_t>(batch);
      std::size_t deleted = 0;
      if (session->reap().execute(true)) {
        do ++deleted;
        while (session->reap().fetch());
      }
      return deleted;
    });
  }

  LockCensus census() override {
    auto session = pool_.lease();
    return session->guarded("counting locks", [&] {
      execute_single(session->census());
      return LockCensus{session->result_a_, session->result_b_, milliseconds(session->result_c_)};
    });
  }

  std::unique_ptr<RawLockClient> raw_client() override {
    return std::make_unique<SqliteRawClient>(path_, busy_timeout_, sql_);
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
       CASE WHEN m.type = 'table' THEN (SELECT group_concat(c.name, ',') FROM pragma_table_info(m.name) c) ELSE '' END
FROM sqlite_master m WHERE instr(',' || :names || ',', ',' || m.name || ',') > 0 ORDER BY m.type, m.name)",
                                      soci::use(joined, "names"));
      for (auto& row : rows) {
        CatalogObject object{row.get<std::string>(1), row.get<std::string>(0), row.get<std::string>(2),
                             split_list(row.get<std::string>(4, "")), row.get<std::string>(3)};
        if (object.kind != "trigger") object.definition.clear();  // tables and indexes are compared by shape
        if (object.kind != "index" && object.kind != "trigger") object.table.clear();
        objects.push_back(std::move(object));
      }
      return objects;
    });
  }
  std::string filled(std::string_view migration_sql) const override {
    return fill_placeholders(migration_sql, "main", prefix_);
  }
  std::string history_ddl() const override { return sql_.history_table; }

  std::unique_ptr<MigrationSession> begin_migration(milliseconds lock_timeout) override {
    return std::make_unique<SqliteMigrationSession>(pool_.connect_dedicated(), sql_, prefix_, lock_timeout);
  }

 private:
  std::vector<LockInfo> list_rows(std::string_view only_name) override {
    auto session = pool_.lease();
    return session->guarded("listing locks", [&] {
      session->name_ = only_name;
      std::vector<LockInfo> rows;
      if (session->list().execute(true)) {
        do rows.push_back(LockInfo{session->out_name_, session->out_owner_, session->result_a_, session->result_b_,
                                   milliseconds(session->result_c_)});
        while (session->list().fetch());
      }
      return rows;
    });
  }

  std::string path_;
  std::string prefix_;
  std::chrono::milliseconds busy_timeout_;
  SqliteSql sql_;
  std::shared_ptr<spdlog::logger> logger_;
  SessionPool<SqliteSession> pool_;
};

}  // namespace

std::string sqlite_driver_version() {
  return fmt::format("SOCI {}.{}.{}, SQLite {}", SOCI_VERSION / 100000, SOCI_VERSION / 100 % 1000, SOCI_VERSION % 100,
                     sqlite_api::sqlite3_libversion());
}

std::string render_sqlite_migrations(const StoreUri& uri, std::span<const MigrationFile> migrations) {
  SqliteSql sql(uri.prefix);
  std::string script = fmt::format(
      "-- dblock migrations for SQLite, table prefix \"{}\". Apply with: sqlite3 FILE.db < THIS_FILE\n"
      "-- The history records make `dblock migrate status` recognise what was applied by hand.\n"
      "PRAGMA journal_mode = WAL;\nBEGIN IMMEDIATE;\n{};\n",
      uri.prefix, sql.history_table);
  for (auto& migration : migrations) {
    // The same fill() `up` applies; name and checksum are [a-z0-9_] and hex, safe as literals.
    script += fmt::format(
        "\n-- {:04d}_{}\n{}\nINSERT INTO \"{}schema_history\" (version, name, checksum, applied_by, execution_ms, "
        "success)\nVALUES ({}, '{}', '{}', 'dblock migrate sql', 0, 1);\n",
        migration.version, migration.name, fill_placeholders(migration.sql, "main", uri.prefix), uri.prefix,
        migration.version, migration.name, migration.checksum);
  }
  return script + "COMMIT;\n";
}

std::unique_ptr<Backend> make_sqlite_backend(const StoreUri& uri, std::chrono::milliseconds busy_timeout,
                                             std::shared_ptr<spdlog::logger> logger) {
  return std::make_unique<SqliteBackend>(uri, busy_timeout, std::move(logger));
}

}  // namespace dblock::detail

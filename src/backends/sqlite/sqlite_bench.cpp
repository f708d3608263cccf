// SOCI's sqlite3 header wraps <sqlite3.h> in namespace sqlite_api: include it first, and never
// <sqlite3.h> directly (doc/database-facts.md §4).
#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>

#include "backends/sqlite/sqlite_bench.hpp"

#include <fmt/format.h>

#include <dblock/errors.hpp>

#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

struct DbCloser {
  void operator()(sqlite_api::sqlite3* db) const noexcept { sqlite_api::sqlite3_close(db); }
};
struct StatementFinalizer {
  void operator()(sqlite_api::sqlite3_stmt* st) const noexcept { sqlite_api::sqlite3_finalize(st); }
};
using Statement = std::unique_ptr<sqlite_api::sqlite3_stmt, StatementFinalizer>;

Statement prepare_on(sqlite_api::sqlite3* db, const std::string& sql, std::string_view client) {
  sqlite_api::sqlite3_stmt* st = nullptr;
  if (sqlite_api::sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != 0)
    throw DatabaseError(fmt::format("{}: {}", client, sqlite_api::sqlite3_errmsg(db)));
  return Statement(st);
}

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
    release_last_ = prepare(sql.release_last);  // an uncontended release is a last level
  }

  std::optional<std::int64_t> acquire(const std::string& name, const std::string& owner, std::int64_t ttl_ms) override {
    auto* st = acquire_.get();
    bind(st, name, owner, ttl_ms);
    // By name: the statement's parameters are numbered in order of first appearance.
    sqlite_api::sqlite3_bind_int64(st, sqlite_api::sqlite3_bind_parameter_index(st, ":held"), 0);   // no grant held
    sqlite_api::sqlite3_bind_int64(st, sqlite_api::sqlite3_bind_parameter_index(st, ":delay"), 0);  // no lock-delay
    std::optional<std::int64_t> token;
    if (step(st) == SQLITE_ROW) token = sqlite_api::sqlite3_column_int64(st, 1);
    while (step(st) == SQLITE_ROW) {
    }
    sqlite_api::sqlite3_reset(st);
    return token;
  }

  bool release(const std::string& name, const std::string& owner, std::int64_t token) override {
    return run_returning(release_last_.get(), name, owner, token);
  }

  bool blocking_lock(std::int64_t) override { return false; }
  void blocking_unlock(std::int64_t) override {}

 private:
  Statement prepare(const std::string& sql) { return prepare_on(db_.get(), sql, "raw client"); }
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
  Statement acquire_, release_last_;
};

/// Bare sqlite3 on one connection: BEGIN IMMEDIATE (as Store::fenced begins), [the fence,] one
/// insert into the bench's own table, COMMIT, each statement prepared once.
class SqliteRawWriteClient final : public RawWriteClient {
 public:
  SqliteRawWriteClient(const std::string& path, std::chrono::milliseconds busy_timeout, std::string_view prefix) {
    sqlite_api::sqlite3* db = nullptr;
    int rc = sqlite_api::sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr);
    db_.reset(db);
    if (rc != 0) throw ConnectionError(fmt::format("raw write client: cannot open {}", path));
    sqlite_api::sqlite3_busy_timeout(db, static_cast<int>(busy_timeout.count()));
    auto fill_in = [&](std::string_view sql) { return fill(sql, {{"{prefix}", prefix}}); };
    exec("PRAGMA synchronous = NORMAL");
    exec(fill_in(R"(CREATE TABLE IF NOT EXISTS "{prefix}bench_writes" (run TEXT NOT NULL, n INTEGER NOT NULL))"));
    insert_sql_ = fill_in(R"(INSERT INTO "{prefix}bench_writes" (run, n) VALUES (?, ?))");
    begin_ = prepare("BEGIN IMMEDIATE");
    commit_ = prepare("COMMIT");
    fence_ = prepare(fill_in(R"(INSERT INTO "{prefix}fence" (name, token) VALUES (?, ?))"));
    insert_ = prepare(insert_sql_);
    clear_ = prepare(fill_in(R"(DELETE FROM "{prefix}bench_writes" WHERE run = ?)"));
  }

  void write(const std::string& run, std::int64_t n,
             const std::optional<std::pair<std::string, std::int64_t>>& fence) override {
    step(begin_.get());
    try {
      if (fence) step(fence_.get(), fence->first, fence->second);
      step(insert_.get(), run, n);
      step(commit_.get());
    } catch (...) {
      exec("ROLLBACK");
      throw;
    }
  }

  const std::string& insert_sql() const noexcept override { return insert_sql_; }

  void clear(const std::string& run) override {
    sqlite_api::sqlite3_bind_text(clear_.get(), 1, run.c_str(), static_cast<int>(run.size()), nullptr);
    step(clear_.get());
  }

 private:
  Statement prepare(const std::string& sql) { return prepare_on(db_.get(), sql, "raw write client"); }
  void exec(const std::string& sql) {
    if (sqlite_api::sqlite3_exec(db_.get(), sql.c_str(), nullptr, nullptr, nullptr) != 0)
      throw DatabaseError(fmt::format("raw write client: {}", sqlite_api::sqlite3_errmsg(db_.get())));
  }
  void step(sqlite_api::sqlite3_stmt* st, const std::string& text, std::int64_t number) {
    sqlite_api::sqlite3_bind_text(st, 1, text.c_str(), static_cast<int>(text.size()), nullptr);
    sqlite_api::sqlite3_bind_int64(st, 2, number);
    step(st);
  }
  /// Runs `st` to its end and resets it; a failure (the fence refused, a busy database) throws.
  void step(sqlite_api::sqlite3_stmt* st) {
    int rc = 0;
    while ((rc = sqlite_api::sqlite3_step(st)) == SQLITE_ROW) {
    }
    sqlite_api::sqlite3_reset(st);
    if (rc != SQLITE_DONE)
      throw DatabaseError(fmt::format("raw write client: {}", sqlite_api::sqlite3_errmsg(db_.get())));
  }

  std::unique_ptr<sqlite_api::sqlite3, DbCloser> db_;
  std::string insert_sql_;
  Statement begin_, commit_, fence_, insert_, clear_;
};

}  // namespace

std::unique_ptr<RawWriteClient> make_sqlite_raw_write_client(const std::string& path,
                                                             std::chrono::milliseconds busy_timeout,
                                                             std::string_view prefix) {
  return std::make_unique<SqliteRawWriteClient>(path, busy_timeout, prefix);
}

std::unique_ptr<RawLockClient> make_sqlite_raw_client(const std::string& path, std::chrono::milliseconds busy_timeout,
                                                      const SqliteSql& sql) {
  return std::make_unique<SqliteRawClient>(path, busy_timeout, sql);
}

namespace {

class SqliteBench final : public BenchBackend {
 public:
  SqliteBench(SessionPool<SqliteSession>& pool, std::string path, std::chrono::milliseconds busy_timeout,
              const SqliteSql& sql, std::string prefix)
      : pool_(pool), path_(std::move(path)), busy_timeout_(busy_timeout), sql_(sql), prefix_(std::move(prefix)) {}

  std::unique_ptr<RawLockClient> raw_client() override { return make_sqlite_raw_client(path_, busy_timeout_, sql_); }
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

 private:
  SessionPool<SqliteSession>& pool_;
  std::string path_;
  std::chrono::milliseconds busy_timeout_;
  const SqliteSql& sql_;
  std::string prefix_;
};

}  // namespace

std::unique_ptr<BenchBackend> make_sqlite_bench(SessionPool<SqliteSession>& pool, std::string path,
                                                std::chrono::milliseconds busy_timeout, const SqliteSql& sql,
                                                std::string prefix) {
  return std::make_unique<SqliteBench>(pool, std::move(path), busy_timeout, sql, std::move(prefix));
}

}  // namespace dblock::detail

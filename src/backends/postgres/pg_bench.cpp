#include "backends/postgres/pg_bench.hpp"

#include <array>
#include <charconv>

#include <fmt/format.h>

#include "backends/postgres/pg_database.hpp"
#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

/// Bare libpq on one connection, parameters formatted into stack buffers: PQexecPrepared, or behind
/// a transaction pooler the same statements sent unnamed with PQexecParams.
class PgRawClient final : public RawLockClient {
 public:
  PgRawClient(const std::string& uri, const PgSql& sql, bool unnamed, RawStatements statements)
      : conn_(PQconnectdb(uri.c_str())), unnamed_(unnamed), hand_written_(statements != RawStatements::dblock) {
    if (PQstatus(conn_.get()) != CONNECTION_OK)
      throw ConnectionError(fmt::format("raw client: {}", PQerrorMessage(conn_.get())));
    acquire_ = prepare(hand_written_ ? sql.hand_written_acquire : sql.acquire.sql);
    switch (statements) {
      case RawStatements::dblock:
        release_ = prepare(sql.release_last.sql);
        break;  // an uncontended release is a last level
      case RawStatements::hand_written:
        release_ = prepare(sql.hand_written_release);
        break;
      case RawStatements::hand_written_async_delete:
        release_ = prepare(sql.hand_written_release_async);
        break;
    }
    lock_ = prepare("SELECT pg_advisory_lock($1::bigint)");
    unlock_ = prepare("SELECT pg_advisory_unlock($1::bigint)");
  }

  std::optional<std::int64_t> acquire(const std::string& name, const std::string& owner, std::int64_t ttl_ms) override {
    char ttl[24];
    *std::to_chars(ttl, ttl + sizeof ttl - 1, ttl_ms).ptr = '\0';
    const char* values[] = {name.c_str(), owner.c_str(), ttl, "0", "0"};  // no grant held, no lock-delay
    auto result = hand_written_ ? run(acquire_, {name.c_str(), owner.c_str(), ttl}) : run(acquire_, values);
    if (PQntuples(result.get()) == 0) return std::nullopt;
    return to_int64(result.get(), 0, 1);
  }

  bool release(const std::string& name, const std::string& owner, std::int64_t token) override {
    char token_text[24];
    *std::to_chars(token_text, token_text + sizeof token_text - 1, token).ptr = '\0';
    const char* values[] = {name.c_str(), owner.c_str(), token_text};
    return PQntuples(run(release_, values).get()) > 0;
  }

  bool blocking_lock(std::int64_t key) override { return run_with_key(lock_, key); }
  void blocking_unlock(std::int64_t key) override { run_with_key(unlock_, key); }
  std::string_view blocking_lock_functions() const noexcept override { return "pg_advisory_lock + pg_advisory_unlock"; }

 private:
  struct ConnDeleter {
    void operator()(PGconn* conn) const noexcept { PQfinish(conn); }
  };

  PgStatement prepare(const std::string& sql) {
    PgStatement statement(ids_, sql);
    if (unnamed_) return statement;
    PgResult result(PQprepare(conn_.get(), statement.name.c_str(), sql.c_str(), 0, nullptr));
    if (PQresultStatus(result.get()) != PGRES_COMMAND_OK) throw DatabaseError(PQerrorMessage(conn_.get()));
    return statement;
  }

  template <std::size_t N>
  PgResult run(const PgStatement& statement, const char* const (&values)[N]) {
    PgResult result(unnamed_ ? PQexecParams(conn_.get(), statement.sql.c_str(), N, nullptr, values, nullptr, nullptr, 0)
                             : PQexecPrepared(conn_.get(), statement.name.c_str(), N, values, nullptr, nullptr, 0));
    if (PQresultStatus(result.get()) != PGRES_TUPLES_OK) throw DatabaseError(PQerrorMessage(conn_.get()));
    return result;
  }

  bool run_with_key(const PgStatement& statement, std::int64_t key) {
    char key_text[24];
    *std::to_chars(key_text, key_text + sizeof key_text - 1, key).ptr = '\0';
    const char* values[] = {key_text};
    run(statement, values);
    return true;
  }

  std::unique_ptr<PGconn, ConnDeleter> conn_;
  bool unnamed_;
  bool hand_written_;
  // Its own connection, so ids of its own: libpq prepares these by name, and no session cache
  // indexed by id holds them.
  StatementIds ids_;
  PgStatement acquire_, release_, lock_, unlock_;
};

/// Bare libpq on one connection: BEGIN [pipelined with the fence], one insert into the bench's own
/// table, COMMIT, the fence and the insert prepared (sent unnamed behind a transaction pooler).
class PgRawWriteClient final : public RawWriteClient {
 public:
  PgRawWriteClient(const std::string& uri, std::string_view schema, std::string_view prefix, bool unnamed)
      : conn_(PQconnectdb(uri.c_str())), unnamed_(unnamed) {
    if (PQstatus(conn_.get()) != CONNECTION_OK)
      throw ConnectionError(fmt::format("raw write client: {}", PQerrorMessage(conn_.get())));
    PQsetNoticeProcessor(
        conn_.get(), [](void*, const char*) {}, nullptr);  // "already exists, skipping"
    auto fill_in = [&](std::string_view sql) { return fill(sql, {{"{schema}", schema}, {"{prefix}", prefix}}); };
    command(fill_in(
        R"(CREATE TABLE IF NOT EXISTS "{schema}"."{prefix}bench_writes" (run text NOT NULL, n bigint NOT NULL))"));
    insert_sql_ = fill_in(R"(INSERT INTO "{schema}"."{prefix}bench_writes" (run, n) VALUES ($1, $2::bigint))");
    fence_ = prepare(fill_in(R"(SELECT "{schema}"."{prefix}fence"($1, $2::bigint))"));
    insert_ = prepare(insert_sql_);
    clear_ = prepare(fill_in(R"(DELETE FROM "{schema}"."{prefix}bench_writes" WHERE run = $1)"));
  }

  void write(const std::string& run, std::int64_t n,
             const std::optional<std::pair<std::string, std::int64_t>>& fence) override {
    if (fence)
      begin_fenced(fence->first, fence->second);
    else
      command("BEGIN");
    run_prepared(insert_, run, n, PGRES_COMMAND_OK);
    command("COMMIT");
  }

  const std::string& insert_sql() const noexcept override { return insert_sql_; }

  void clear(const std::string& run) override {
    const char* values[] = {run.c_str()};
    check(run_statement(clear_, 1, values), PGRES_COMMAND_OK);
  }

 private:
  struct ConnDeleter {
    void operator()(PGconn* conn) const noexcept { PQfinish(conn); }
  };

  void check(PgResult result, ExecStatusType expected) {
    if (PQresultStatus(result.get()) != expected) {
      std::string message = PQerrorMessage(conn_.get());
      PgResult(PQexec(conn_.get(), "ROLLBACK"));  // a failed statement must not leave the session in a transaction
      throw DatabaseError("raw write client: " + message);
    }
  }
  void command(const std::string& sql) { check(PgResult(PQexec(conn_.get(), sql.c_str())), PGRES_COMMAND_OK); }
  PgStatement prepare(const std::string& sql) {
    PgStatement statement(ids_, sql);
    if (!unnamed_)
      check(PgResult(PQprepare(conn_.get(), statement.name.c_str(), sql.c_str(), 0, nullptr)), PGRES_COMMAND_OK);
    return statement;
  }
  PgResult run_statement(const PgStatement& statement, int count, const char* const* values) {
    return PgResult(unnamed_
                        ? PQexecParams(conn_.get(), statement.sql.c_str(), count, nullptr, values, nullptr, nullptr, 0)
                        : PQexecPrepared(conn_.get(), statement.name.c_str(), count, values, nullptr, nullptr, 0));
  }
  /// BEGIN and the fence in one round trip, pipelined as Store::fenced sends them.
  void begin_fenced(const std::string& name, std::int64_t token) {
    char token_text[24];
    *std::to_chars(token_text, token_text + sizeof token_text - 1, token).ptr = '\0';
    const char* values[] = {name.c_str(), token_text};
    auto& fence = fence_;
    auto* conn = conn_.get();
    bool sent = PQenterPipelineMode(conn) != 0 &&
                PQsendQueryParams(conn, "BEGIN", 0, nullptr, nullptr, nullptr, nullptr, 0) != 0 &&
                (unnamed_ ? PQsendQueryParams(conn, fence.sql.c_str(), 2, nullptr, values, nullptr, nullptr, 0)
                          : PQsendQueryPrepared(conn, fence.name.c_str(), 2, values, nullptr, nullptr, 0)) != 0 &&
                PQpipelineSync(conn) != 0;
    if (!sent) throw DatabaseError(fmt::format("raw write client: {}", PQerrorMessage(conn)));
    // BEGIN's and the fence's results, each followed by a null, then the sync.
    std::string failed;
    for (ExecStatusType expected : {PGRES_COMMAND_OK, PGRES_TUPLES_OK}) {
      PgResult result(PQgetResult(conn));
      if (failed.empty() && PQresultStatus(result.get()) != expected)
        failed = result ? PQresultErrorMessage(result.get()) : PQerrorMessage(conn);
      if (result)
        while (PGresult* more = PQgetResult(conn)) PQclear(more);
    }
    PgResult sync(PQgetResult(conn));
    bool left = PQresultStatus(sync.get()) == PGRES_PIPELINE_SYNC && PQexitPipelineMode(conn) != 0;
    if (!failed.empty() || !left) {
      std::string message = !failed.empty() ? failed : PQerrorMessage(conn);
      if (left) PgResult(PQexec(conn, "ROLLBACK"));
      throw DatabaseError("raw write client: " + message);
    }
  }
  void run_prepared(const PgStatement& statement, const std::string& text, std::int64_t number,
                    ExecStatusType expected) {
    char number_text[24];
    *std::to_chars(number_text, number_text + sizeof number_text - 1, number).ptr = '\0';
    const char* values[] = {text.c_str(), number_text};
    check(run_statement(statement, 2, values), expected);
  }

  std::unique_ptr<PGconn, ConnDeleter> conn_;
  bool unnamed_;
  std::string insert_sql_;
  StatementIds ids_;  // its own connection: as PgRawClient's
  PgStatement fence_, insert_, clear_;
};

}  // namespace

std::unique_ptr<RawWriteClient> make_pg_raw_write_client(const std::string& uri, std::string_view schema,
                                                         std::string_view prefix, bool unnamed) {
  return std::make_unique<PgRawWriteClient>(uri, schema, prefix, unnamed);
}

std::unique_ptr<RawLockClient> make_pg_raw_client(const std::string& uri, const PgSql& sql, bool unnamed,
                                                  RawStatements statements) {
  return std::make_unique<PgRawClient>(uri, sql, unnamed, statements);
}

namespace {

class PgBench final : public BenchBackend {
 public:
  explicit PgBench(PgDatabase& database) : database_(database) {}

  std::unique_ptr<RawLockClient> raw_client() override {
    return make_pg_raw_client(database_.driver_uri, database_.sql, database_.behind_transaction_pooler(),
                              RawStatements::dblock);
  }
  std::unique_ptr<RawLockClient> hand_written_client(HandWritten how) override {
    return make_pg_raw_client(
        database_.driver_uri, database_.sql, database_.behind_transaction_pooler(),
        how == HandWritten::synchronous ? RawStatements::hand_written : RawStatements::hand_written_async_delete);
  }
  std::unique_ptr<RawWriteClient> raw_write_client() override {
    return make_pg_raw_write_client(database_.driver_uri, database_.schema, database_.prefix,
                                    database_.behind_transaction_pooler());
  }
  std::unique_ptr<RawBatchClient> ceiling_client() override {
    return make_pg_ceiling_client(database_.driver_uri, database_.sql, database_.behind_transaction_pooler());
  }
  void seed_expired(std::string_view stem, std::size_t count) override {
    std::array<std::string, 2> params{std::string(stem), std::to_string(count)};
    database_.pool.lease()->exec_params(database_.sql.seed_expired, params);
  }

 private:
  PgDatabase& database_;
};

}  // namespace

std::unique_ptr<BenchBackend> make_pg_bench(PgDatabase& database) { return std::make_unique<PgBench>(database); }

}  // namespace dblock::detail

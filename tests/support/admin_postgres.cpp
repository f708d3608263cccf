// The test admin for PostgreSQL, through libpq.
#include "support/admin.hpp"

#include <libpq-fe.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <dblock/advisory_key.hpp>

namespace dblock::test {

namespace {

class PgAdmin final : public Admin {
 public:
  PgAdmin(const std::string& dsn, std::string schema, std::string prefix)
      : conn_(PQconnectdb(dsn.c_str())),
        schema_(schema),
        table_(fmt::format("\"{}\".\"{}locks\"", schema, prefix)),
        sequence_(fmt::format("\"{}\".\"{}token_seq\"", schema, prefix)),
        history_(fmt::format("\"{}\".\"{}schema_history\"", schema, prefix)) {
    if (PQstatus(conn_) != CONNECTION_OK) {
      // The destructor does not run for a constructor that throws: a refused connection (the write
      // nemesis cuts them) leaked it, and LeakSanitizer failed the worker process.
      std::string error = PQerrorMessage(conn_);
      PQfinish(conn_);
      throw std::runtime_error(error);
    }
  }
  ~PgAdmin() override { PQfinish(conn_); }

  void expire(const std::string& name) override {
    run(fmt::format("UPDATE {} SET expires_at = clock_timestamp() - interval '1 second' WHERE name = {}", table_,
                    quote(name)));
  }
  void steal(const std::string& name, const std::string& owner) override {
    run(
        fmt::format("UPDATE {} SET owner = {}, count = 1, token = nextval('{}'), "
                    "expires_at = clock_timestamp() + interval '1 hour' WHERE name = {}",
                    table_, quote(owner), sequence_, quote(name)));
  }

  void exec(const std::string& sql) override { run(sql); }

  std::vector<std::string> query(const std::string& sql) override {
    PGresult* result = PQexec(conn_, sql.c_str());
    std::vector<std::string> rows;
    if (PQresultStatus(result) != PGRES_TUPLES_OK) {
      std::string error = PQresultErrorMessage(result);
      PQclear(result);
      throw std::runtime_error(error);
    }
    for (int row = 0; row < PQntuples(result); ++row) rows.emplace_back(PQgetvalue(result, row, 0));
    PQclear(result);
    return rows;
  }

  bool table_exists(const std::string& name) override {
    return query(fmt::format("SELECT 1 FROM pg_tables WHERE schemaname = {} AND tablename = {}", quote(schema_),
                             quote(name)))
               .size() == 1;
  }

  std::string history_table() const override { return history_; }

  bool advisory_held(const std::string& name) override {
    return query("SELECT count(*) FROM pg_locks WHERE " + advisory_lock_of(name)).at(0) != "0";
  }

  int kill_advisory_holder(const std::string& name) override {
    return static_cast<int>(
        query("SELECT pg_terminate_backend(pid, 5000) FROM pg_locks WHERE " + advisory_lock_of(name)).size());
  }

 private:
  /// The pg_locks condition for the advisory lock of a name.
  static std::string advisory_lock_of(const std::string& name) {
    auto key = static_cast<std::uint64_t>(dblock::AdvisoryKey::from_name(name).key());
    return fmt::format("locktype = 'advisory' AND classid = {} AND objid = {} AND objsubid = 1 AND granted", key >> 32,
                       key & 0xffffffffu);
  }
  std::string quote(const std::string& text) {
    char* quoted = PQescapeLiteral(conn_, text.c_str(), text.size());
    std::string out(quoted);
    PQfreemem(quoted);
    return out;
  }
  void run(const std::string& sql) {
    PGresult* result = PQexec(conn_, sql.c_str());
    auto status = PQresultStatus(result);
    std::string error = PQresultErrorMessage(result);
    PQclear(result);
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) throw std::runtime_error(error);
  }

  PGconn* conn_;
  std::string schema_;
  std::string table_;
  std::string sequence_;
  std::string history_;
};

}  // namespace

std::unique_ptr<Admin> make_postgres_admin(const std::string& dsn, const std::string& schema,
                                           const std::string& prefix) {
  return std::make_unique<PgAdmin>(dsn, schema, prefix);
}

}  // namespace dblock::test

// The ceiling of PostgreSQL's lock statements for `dblock bench`: acquire_many and release_last_many
// (a lone name: acquire and release_last, as the core sends it) driven by bare libpq in pipeline mode
// on one connection, as pgbench would drive them: what the server gives dblock's own SQL with nothing
// of the client in the way.
#include <charconv>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "backends/postgres/pg_bench.hpp"
#include "backends/postgres/pg_connection.hpp"

namespace dblock::detail {

namespace {

std::string bigint_array(std::span<const std::int64_t> values) {
  std::string text = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    char digits[24];
    text.append(i == 0 ? "" : ",").append(digits, std::to_chars(digits, digits + sizeof digits, values[i]).ptr);
  }
  return text + "}";
}

class PgCeilingClient final : public RawBatchClient {
 public:
  PgCeilingClient(const std::string& uri, const PgSql& sql, bool unnamed)
      : conn_(PQconnectdb(uri.c_str())), unnamed_(unnamed) {
    if (PQstatus(conn_.get()) != CONNECTION_OK)
      throw ConnectionError(fmt::format("ceiling client: {}", PQerrorMessage(conn_.get())));
    acquire_many_ = prepare(sql.acquire_many.sql);
    release_many_ = prepare(sql.release_last_many.sql);
    acquire_one_ = prepare(sql.acquire.sql);
    release_one_ = prepare(sql.release_last.sql);
    if (PQenterPipelineMode(conn_.get()) == 0) fail("pipeline mode");
  }

  std::size_t cycle(std::span<const std::string> names, const std::string& owner, std::int64_t ttl_ms) override {
    bool releasing = !held_names_.empty();
    if (releasing) send_release(owner);
    // One name: the single statements, which are what the core sends for a lone request.
    bool alone = names.size() == 1;
    auto ttl = std::to_string(ttl_ms);
    if (alone) {
      send(acquire_one_, {names.front(), owner, ttl, "0", "0"});  // no grant held, no lock-delay
    } else {
      std::vector<std::string_view> views(names.begin(), names.end()), owners(names.size(), owner);
      std::vector<std::int64_t> ttls(names.size(), ttl_ms), zeros(names.size(), 0);
      send(acquire_many_,
           {pg_text_array(views), pg_text_array(owners), bigint_array(ttls), bigint_array(zeros), bigint_array(zeros)});
    }
    if (releasing) receive();
    auto granted = receive();
    held_names_.clear();
    held_tokens_.clear();
    for (int row = 0; row < PQntuples(granted.get()); ++row) {
      // acquire: (count, token); acquire_many: (name, count, token)
      held_names_.emplace_back(alone ? names.front() : std::string(PQgetvalue(granted.get(), row, 0)));
      held_tokens_.push_back(to_int64(granted.get(), row, alone ? 1 : 2));
    }
    return held_names_.size();
  }

  void release_held() override {
    if (held_names_.empty()) return;
    send_release(owner_of_held_);
    receive();
    held_names_.clear();
    held_tokens_.clear();
  }

 private:
  struct ConnDeleter {
    void operator()(PGconn* conn) const noexcept { PQfinish(conn); }
  };

  [[noreturn]] void fail(std::string_view what) {
    throw DatabaseError(fmt::format("ceiling client: {}: {}", what, PQerrorMessage(conn_.get())));
  }

  PgStatement prepare(const std::string& sql) {
    PgStatement statement(ids_, sql);
    if (unnamed_) return statement;
    PgResult result(PQprepare(conn_.get(), statement.name.c_str(), sql.c_str(), 0, nullptr));
    if (PQresultStatus(result.get()) != PGRES_COMMAND_OK) fail("prepare");
    return statement;
  }

  void send_release(const std::string& owner) {
    owner_of_held_ = owner;
    if (held_names_.size() == 1) {
      send(release_one_, {held_names_.front(), owner, std::to_string(held_tokens_.front())});
      return;
    }
    std::vector<std::string_view> names(held_names_.begin(), held_names_.end()), owners(held_names_.size(), owner);
    send(release_many_, {pg_text_array(names), pg_text_array(owners), bigint_array(held_tokens_)});
  }

  /// Queues `statement` and a sync after it (each statement its own transaction) and flushes.
  void send(const PgStatement& statement, std::vector<std::string> params) {
    std::vector<const char*> values;
    for (auto& param : params) values.push_back(param.c_str());
    auto count = static_cast<int>(values.size());
    bool sent =
        (unnamed_
             ? PQsendQueryParams(conn_.get(), statement.sql.c_str(), count, nullptr, values.data(), nullptr, nullptr, 0)
             : PQsendQueryPrepared(conn_.get(), statement.name.c_str(), count, values.data(), nullptr, nullptr, 0)) !=
            0 &&
        PQpipelineSync(conn_.get()) != 0;
    if (!sent) fail("send");
  }

  /// The next statement's rows, then the null that ends them, then its sync.
  PgResult receive() {
    PgResult result(PQgetResult(conn_.get()));
    if (PQresultStatus(result.get()) != PGRES_TUPLES_OK) fail("statement");
    while (PGresult* more = PQgetResult(conn_.get())) PQclear(more);
    PgResult sync(PQgetResult(conn_.get()));
    if (PQresultStatus(sync.get()) != PGRES_PIPELINE_SYNC) fail("sync");
    return result;
  }

  std::unique_ptr<PGconn, ConnDeleter> conn_;
  bool unnamed_;
  StatementIds ids_;  // its own connection: as the raw clients'
  PgStatement acquire_many_, release_many_, acquire_one_, release_one_;
  std::vector<std::string> held_names_;
  std::vector<std::int64_t> held_tokens_;
  std::string owner_of_held_;
};

}  // namespace

std::unique_ptr<RawBatchClient> make_pg_ceiling_client(const std::string& uri, const PgSql& sql, bool unnamed) {
  return std::make_unique<PgCeilingClient>(uri, sql, unnamed);
}

}  // namespace dblock::detail

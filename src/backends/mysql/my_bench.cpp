#include "backends/mysql/my_bench.hpp"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "backends/mysql/my_database.hpp"
#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

/// Bare Connector/C++: the same prepared statements on one connection, no pool, no bookkeeping.
class MyRawClient final : public RawLockClient {
 public:
  MyRawClient(std::unique_ptr<MyConnection> connection, const MySql& sql, StatementIds& ids)
      : connection_(std::move(connection)),
        sql_(sql),
        blocking_lock_{ids, "GET_LOCK", "SELECT GET_LOCK(?, ?)"},
        blocking_unlock_{ids, "RELEASE_LOCK", "SELECT RELEASE_LOCK(?)"} {}

  std::optional<std::int64_t> acquire(const std::string& name, const std::string& owner, std::int64_t ttl_ms) override {
    std::array<MyParam, 5> params{name, owner, ttl_ms * 1000, std::int64_t{0},
                                  std::int64_t{0}};  // no grant held, no lock-delay
    auto grant = parse_grant(connection_->query(sql_.acquire, params));
    if (!grant) return std::nullopt;
    return grant->token;
  }

  bool release(const std::string& name, const std::string& owner, std::int64_t token) override {
    std::array<MyParam, 3> params{name, owner, token};
    return connection_->update(sql_.release_last, params) > 0;  // an uncontended release is a last level
  }

  bool blocking_lock(std::int64_t key) override {
    auto name = fmt::format("dblock-bench:{}", key);
    std::array<MyParam, 2> params{name, 31536000.0};
    connection_->query(blocking_lock_, params);
    return true;
  }
  void blocking_unlock(std::int64_t key) override {
    auto name = fmt::format("dblock-bench:{}", key);
    std::array<MyParam, 1> params{name};
    connection_->query(blocking_unlock_, params);
  }
  std::string_view blocking_lock_functions() const noexcept override { return "GET_LOCK + RELEASE_LOCK"; }

 private:
  std::unique_ptr<MyConnection> connection_;
  const MySql& sql_;
  MyStatement blocking_lock_, blocking_unlock_;
};

/// Bare Connector/C++ on one connection: START TRANSACTION (fenced: CALL fence_begin, which starts
/// the transaction and fences it), one insert into the bench's own table, COMMIT; prepared once.
class MyRawWriteClient final : public RawWriteClient {
 public:
  MyRawWriteClient(std::unique_ptr<MyConnection> connection, std::string_view prefix)
      : connection_(std::move(connection)),
        fence_{ids_, "fence_begin", fill("CALL `{prefix}fence_begin`(?, ?)", {{"{prefix}", prefix}})},
        insert_{ids_, "bench insert",
                fill("INSERT INTO `{prefix}bench_writes` (run, n) VALUES (?, ?)", {{"{prefix}", prefix}})},
        clear_{ids_, "bench clear", fill("DELETE FROM `{prefix}bench_writes` WHERE run = ?", {{"{prefix}", prefix}})} {
    connection_->execute(
        fill("CREATE TABLE IF NOT EXISTS `{prefix}bench_writes` (run VARCHAR(255) NOT NULL, n BIGINT NOT "
             "NULL) ENGINE=InnoDB",
             {{"{prefix}", prefix}}));
  }

  void write(const std::string& run, std::int64_t n,
             const std::optional<std::pair<std::string, std::int64_t>>& fence) override {
    // Fenced, the transaction begins as Store::fenced begins it: fence_begin (0010) starts it and
    // runs the fence in one round trip.
    if (fence) {
      std::array<MyParam, 2> params{fence->first, fence->second};
      try {
        connection_->call(fence_, params);
      } catch (...) {
        if (connection_->usable()) connection_->execute("ROLLBACK");
        throw;
      }
    } else {
      connection_->execute("START TRANSACTION");
    }
    try {
      std::array<MyParam, 2> params{run, n};
      connection_->update(insert_, params);
      connection_->execute("COMMIT");
    } catch (...) {
      if (connection_->usable()) connection_->execute("ROLLBACK");
      throw;
    }
  }

  const std::string& insert_sql() const noexcept override { return insert_.sql; }

  void clear(const std::string& run) override {
    std::array<MyParam, 1> params{run};
    connection_->update(clear_, params);
  }

 private:
  std::unique_ptr<MyConnection> connection_;
  StatementIds ids_;  // its own connection runs only these three
  MyStatement fence_, insert_, clear_;
};

class MyBench final : public BenchBackend {
 public:
  explicit MyBench(MyDatabase& db) : db_(db) {}

  /// The client's own statements join `db`'s registry: they run on a connection like the pool's.
  std::unique_ptr<RawLockClient> raw_client() override {
    return std::make_unique<MyRawClient>(db_.connect(), db_.sql, db_.ids);
  }
  std::unique_ptr<RawWriteClient> raw_write_client() override {
    return std::make_unique<MyRawWriteClient>(db_.connect(), db_.prefix);
  }

  void seed_expired(std::string_view stem, std::size_t count) override {
    // Chunks stay below the servers' default recursion limit of a CTE (1,000).
    constexpr std::size_t kChunk = 1000;
    auto session = db_.pool.lease();
    for (std::size_t done = 0; done < count; done += kChunk) {
      std::array<MyParam, 3> params{static_cast<std::int64_t>(std::min(kChunk, count - done)), stem,
                                    static_cast<std::int64_t>(done)};
      session->update(db_.sql.seed_expired, params);
    }
  }

 private:
  MyDatabase& db_;
};

}  // namespace

std::unique_ptr<BenchBackend> make_my_bench(MyDatabase& database) { return std::make_unique<MyBench>(database); }

}  // namespace dblock::detail

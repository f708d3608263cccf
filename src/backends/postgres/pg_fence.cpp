#include "backends/postgres/pg_fence.hpp"

#include <array>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include <fmt/format.h>
#include <dblock/errors.hpp>

#include "backends/postgres/pg_sql.hpp"
#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

// The fence function's documented SQLSTATE (doc/sql-contract.md).
constexpr std::string_view kFenceRefused = "DBF01";

class PgFencedSession final : public FencedSession {
 public:
  PgFencedSession(SessionPool<PgConnection>::Lease session, std::int64_t left_ms)
      : session_(std::move(session)), left_ms_(left_ms) {}
  ~PgFencedSession() override {
    if (!done_) rollback();
  }
  PgFencedSession(const PgFencedSession&) = delete;
  PgFencedSession& operator=(const PgFencedSession&) = delete;

  std::int64_t lease_left_ms() const noexcept override { return left_ms_; }

  FenceRows query(std::string_view sql, std::span<const std::string> params) override {
    auto result = session_->exec_application(std::string(sql), params);
    FenceRows rows;
    for (int row = 0; row < PQntuples(result.get()); ++row) {
      auto& cells = rows.emplace_back();
      for (int column = 0; column < PQnfields(result.get()); ++column)
        cells.push_back(PQgetisnull(result.get(), row, column) != 0
                            ? std::nullopt
                            : std::optional<std::string>(text_of(result.get(), row, column)));
    }
    return rows;
  }

  std::int64_t execute(std::string_view sql, std::span<const std::string> params) override {
    auto result = session_->exec_application(std::string(sql), params);
    return std::atoll(PQcmdTuples(result.get()));
  }

  void commit() override {
    done_ = true;
    auto result = session_->exec("COMMIT");
    // COMMIT of a transaction that failed earlier answers ROLLBACK, without an error.
    if (std::strcmp(PQcmdStatus(result.get()), "COMMIT") != 0) throw FailedStatementStop::failed();
  }

  void rollback() noexcept override {
    done_ = true;
    try {
      session_->exec("ROLLBACK");
    } catch (...) {
      session_->abandon();  // the pool must not get a session still inside the transaction
    }
  }

 private:
  SessionPool<PgConnection>::Lease session_;
  std::int64_t left_ms_;
  bool done_ = false;
};

class PgFences final : public FenceBackend {
 public:
  PgFences(SessionPool<PgConnection>& pool, StatementIds& ids, std::string_view schema, std::string_view prefix,
           std::string_view redacted)
      : pool_(pool),
        fence_(ids, fill(R"(SELECT "{schema}"."{prefix}fence"($1, $2::bigint))",
                         {{"{schema}", schema}, {"{prefix}", prefix}})),
        member_(ids, fill(R"(SELECT "{schema}"."{prefix}fence_member"($1, $2, $3, $4::bigint))",
                          {{"{schema}", schema}, {"{prefix}", prefix}})),
        redacted_(redacted) {}

  std::unique_ptr<FencedSession> begin_fenced(std::span<const FenceRef> targets) override {
    for (int attempt = 0;; ++attempt) {
      auto session = pool_.lease();
      std::size_t at = 0;
      try {
        // BEGIN and every fence in one round trip (issue 32: the fence adds no round trip where
        // the driver can send statements together).
        std::vector<std::array<std::string, 4>> params(targets.size());
        std::vector<std::array<const char*, 4>> values(targets.size());
        std::vector<PgConnection::Pipelined> steps{{.statement = nullptr, .text = "BEGIN", .values = {}}};
        for (std::size_t i = 0; i < targets.size(); ++i) steps.push_back(fence_step(targets[i], params[i], values[i]));
        std::size_t failed_at = 0;
        std::vector<PgResult> results;
        try {
          results = session->exec_pipelined(steps, failed_at);
        } catch (const Error&) {
          at = failed_at > 0 ? failed_at - 1 : 0;
          throw;
        }
        std::int64_t least_ms = std::numeric_limits<std::int64_t>::max();
        std::size_t least_at = 0;
        for (std::size_t i = 0; i < targets.size(); ++i) {
          auto left_ms = to_int64(results[i + 1].get(), 0, 0);
          if (left_ms < least_ms) least_ms = left_ms, least_at = i;
        }
        // Each fence sets the transaction's timeouts to its own lease left: the smallest must come
        // last, so fence that target once more (it holds its share lock already).
        if (least_at + 1 != targets.size()) (void)fence(*session, targets[at = least_at]);
        return std::make_unique<PgFencedSession>(std::move(session), least_ms);
      } catch (const PoolerDetected&) {
        roll_back(*session);
        if (attempt > 0) throw;  // sent unnamed the second time: never seen twice
      } catch (const Error& e) {
        roll_back(*session);
        if (std::string_view(e.sqlstate()) == kFenceRefused)
          throw LockLost(fence_refused_message(targets[at], redacted_));
        throw;
      }
    }
  }

 private:
  PgConnection::Pipelined fence_step(const FenceRef& target, std::array<std::string, 4>& params,
                                     std::array<const char*, 4>& values) const {
    if (target.member())
      params = {std::string(target.name), std::string(target.owner), std::string(target.kind),
                std::to_string(target.token)};
    else
      params = {std::string(target.name), std::to_string(target.token), {}, {}};
    for (std::size_t i = 0; i < params.size(); ++i) values[i] = params[i].c_str();
    std::size_t count = target.member() ? 4 : 2;
    return {
        .statement = target.member() ? &member_ : &fence_, .text = nullptr, .values = std::span(values).first(count)};
  }

  std::int64_t fence(PgConnection& session, const FenceRef& target) {
    std::array<std::string, 4> params;
    std::array<const char*, 4> values{};
    auto step = fence_step(target, params, values);
    auto result = session.exec_prepared(*step.statement, step.values);
    return to_int64(result.get(), 0, 0);
  }

  static void roll_back(PgConnection& session) noexcept {
    try {
      session.exec("ROLLBACK");
    } catch (...) {
      session.abandon();
    }
  }

  SessionPool<PgConnection>& pool_;
  PgStatement fence_, member_;
  std::string redacted_;
};

}  // namespace

std::unique_ptr<FenceBackend> make_pg_fences(SessionPool<PgConnection>& pool, StatementIds& ids,
                                             std::string_view schema, std::string_view prefix,
                                             std::string_view redacted_uri) {
  return std::make_unique<PgFences>(pool, ids, schema, prefix, redacted_uri);
}

}  // namespace dblock::detail

#include "backends/sqlite/sqlite_fence.hpp"

#include <array>

#include <fmt/format.h>
#include <dblock/errors.hpp>

#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

// The fence trigger's RAISE message (migrations/sqlite/0009_fence.sql).
constexpr std::string_view kFenceRefused = "dblock fence:";

/// Runs one statement with text parameters to completion, collecting its rows into `rows` when
/// given; returns the rows it changed. The statement is prepared once per session (its cache) and
/// left reset. Throws soci's sqlite3 error (translated by guarded()).
std::int64_t run(SqliteSession& session, std::string_view sql, std::span<const std::string> params, FenceRows* rows) {
  using namespace sqlite_api;
  auto* db = session.raw();
  auto fail = [&](int code) { throw soci::sqlite3_soci_error(sqlite3_errmsg(db), code); };
  int code = SQLITE_OK;
  auto* statement = session.statement_cache().get(db, sql, code);
  if (statement == nullptr) fail(sqlite3_extended_errcode(db));
  for (std::size_t i = 0; i < params.size(); ++i)
    if (sqlite3_bind_text(statement, static_cast<int>(i + 1), params[i].data(), static_cast<int>(params[i].size()),
                          SQLITE_TRANSIENT) != SQLITE_OK)
      fail(sqlite3_extended_errcode(db));
  while ((code = sqlite3_step(statement)) == SQLITE_ROW) {
    if (rows == nullptr) continue;
    auto& cells = rows->emplace_back();
    for (int column = 0; column < sqlite3_column_count(statement); ++column) {
      auto text = reinterpret_cast<const char*>(sqlite3_column_text(statement, column));
      cells.push_back(text == nullptr ? std::nullopt
                                      : std::optional<std::string>(std::string(
                                            text, static_cast<std::size_t>(sqlite3_column_bytes(statement, column)))));
    }
  }
  if (code != SQLITE_DONE) {
    auto extended = sqlite3_extended_errcode(db);
    std::string message = sqlite3_errmsg(db);
    sqlite3_reset(statement);
    throw soci::sqlite3_soci_error(message, extended);
  }
  sqlite3_reset(statement);  // a finished statement keeps nothing open
  return sqlite3_changes(db);
}

class SqliteFencedSession final : public FencedSession {
 public:
  explicit SqliteFencedSession(SessionPool<SqliteSession>::Lease session) : session_(std::move(session)) {}
  ~SqliteFencedSession() override {
    if (!done_) rollback();
  }
  SqliteFencedSession(const SqliteFencedSession&) = delete;
  SqliteFencedSession& operator=(const SqliteFencedSession&) = delete;

  // No server ends a paused SQLite transaction: no lease bound is known here.
  std::int64_t lease_left_ms() const noexcept override { return -1; }

  FenceRows query(std::string_view sql, std::span<const std::string> params) override {
    FenceRows rows;
    stop_.run([&] {
      session_->guarded(
          "a statement in a fenced transaction", [&] { run(*session_, sql, params, &rows); },
          StatementAuthor::application);
    });
    return rows;
  }

  std::int64_t execute(std::string_view sql, std::span<const std::string> params) override {
    return execute(sql, params, StatementAuthor::application);
  }

  /// execute() of `author`'s statement: the fence itself is dblock's.
  std::int64_t execute(std::string_view sql, std::span<const std::string> params, StatementAuthor author) {
    return stop_.run([&] {
      return session_->guarded(
          "a statement in a fenced transaction", [&] { return run(*session_, sql, params, nullptr); }, author);
    });
  }

  void commit() override {
    if (stop_.stopped()) {
      rollback();
      throw FailedStatementStop::failed();
    }
    done_ = true;
    session_->guarded("committing a fenced transaction", [&] { run(*session_, "COMMIT", {}, nullptr); });
  }

  void rollback() noexcept override {
    done_ = true;
    try {
      session_->guarded("rolling back a fenced transaction", [&] {
        session_->statement_cache().reset_all();  // a statement that failed mid-step must not hold its lock
        run(*session_, "ROLLBACK", {}, nullptr);
      });
    } catch (...) {
      // guarded() marked the session broken: the pool drops it, and closing it rolls back.
    }
  }

 private:
  SessionPool<SqliteSession>::Lease session_;
  bool done_ = false;
  FailedStatementStop stop_;
};

class SqliteFences final : public FenceBackend {
 public:
  SqliteFences(SessionPool<SqliteSession>& pool, std::string_view prefix, std::string path)
      : pool_(pool),
        fence_(fill(R"(INSERT INTO "{prefix}fence" (name, token) VALUES (?, ?))", {{"{prefix}", prefix}})),
        member_(fill(R"(INSERT INTO "{prefix}fence_member" (name, owner, kind, token) VALUES (?, ?, ?, ?))",
                     {{"{prefix}", prefix}})),
        path_(std::move(path)) {}

  std::unique_ptr<FencedSession> begin_fenced(std::span<const FenceRef> targets) override {
    auto session = pool_.lease();
    session->guarded("beginning a fenced transaction", [&] { run(*session, "BEGIN IMMEDIATE", {}, nullptr); });
    auto fenced = std::make_unique<SqliteFencedSession>(std::move(session));
    for (auto& target : targets) {
      try {
        if (target.member()) {
          std::array<std::string, 4> params{std::string(target.name), std::string(target.owner),
                                            std::string(target.kind), std::to_string(target.token)};
          fenced->execute(member_, params, StatementAuthor::dblock);
        } else {
          std::array<std::string, 2> params{std::string(target.name), std::to_string(target.token)};
          fenced->execute(fence_, params, StatementAuthor::dblock);
        }
      } catch (const Error& e) {
        fenced->rollback();
        if (std::string_view(e.what()).find(kFenceRefused) != std::string_view::npos)
          throw LockLost(fence_refused_message(target, "sqlite://" + path_));
        throw;
      }
    }
    return fenced;
  }

 private:
  SessionPool<SqliteSession>& pool_;
  std::string fence_, member_;
  std::string path_;
};

}  // namespace

std::unique_ptr<FenceBackend> make_sqlite_fences(SessionPool<SqliteSession>& pool, std::string_view prefix,
                                                 std::string path) {
  return std::make_unique<SqliteFences>(pool, prefix, std::move(path));
}

}  // namespace dblock::detail

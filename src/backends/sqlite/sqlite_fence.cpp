#include "backends/sqlite/sqlite_fence.hpp"

#include <array>

#include <dblock/errors.hpp>
#include <fmt/format.h>

#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

// The fence trigger's RAISE message (migrations/sqlite/0009_fence.sql).
constexpr std::string_view kFenceRefused = "dblock fence:";

sqlite_api::sqlite3* raw_of(SqliteSession& session) {
  return static_cast<soci::sqlite3_session_backend*>(session.session().get_backend())->conn_;
}

/// Runs one statement with text parameters to completion, collecting its rows into `rows` when
/// given; returns the rows it changed. Throws soci's sqlite3 error (translated by guarded()).
std::int64_t run(sqlite_api::sqlite3* db, std::string_view sql, std::span<const std::string> params, FenceRows* rows) {
  using namespace sqlite_api;
  auto fail = [&](int code) { throw soci::sqlite3_soci_error(sqlite3_errmsg(db), code); };
  sqlite3_stmt* raw = nullptr;
  int code = sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &raw, nullptr);
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> statement(raw, sqlite3_finalize);
  if (code != SQLITE_OK) fail(sqlite3_extended_errcode(db));
  for (std::size_t i = 0; i < params.size(); ++i)
    if (sqlite3_bind_text(raw, static_cast<int>(i + 1), params[i].data(), static_cast<int>(params[i].size()),
                          SQLITE_TRANSIENT) != SQLITE_OK)
      fail(sqlite3_extended_errcode(db));
  while ((code = sqlite3_step(raw)) == SQLITE_ROW) {
    if (rows == nullptr) continue;
    auto& cells = rows->emplace_back();
    for (int column = 0; column < sqlite3_column_count(raw); ++column) {
      auto text = reinterpret_cast<const char*>(sqlite3_column_text(raw, column));
      cells.push_back(text == nullptr ? std::nullopt
                                      : std::optional<std::string>(std::string(text, static_cast<std::size_t>(
                                                                                         sqlite3_column_bytes(raw, column)))));
    }
  }
  if (code != SQLITE_DONE) fail(sqlite3_extended_errcode(db));
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
    session_->guarded("a statement in a fenced transaction", [&] { run(raw_of(*session_), sql, params, &rows); });
    return rows;
  }

  std::int64_t execute(std::string_view sql, std::span<const std::string> params) override {
    return session_->guarded("a statement in a fenced transaction",
                             [&] { return run(raw_of(*session_), sql, params, nullptr); });
  }

  void commit() override {
    done_ = true;
    session_->guarded("committing a fenced transaction", [&] { session_->exec_script("COMMIT"); });
  }

  void rollback() noexcept override {
    done_ = true;
    try {
      session_->guarded("rolling back a fenced transaction", [&] { session_->exec_script("ROLLBACK"); });
    } catch (...) {
      // guarded() marked the session broken: the pool drops it, and closing it rolls back.
    }
  }

 private:
  SessionPool<SqliteSession>::Lease session_;
  bool done_ = false;
};

class SqliteFences final : public FenceBackend {
 public:
  SqliteFences(SessionPool<SqliteSession>& pool, std::string_view prefix, std::string path)
      : pool_(pool), fence_(fill(R"(INSERT INTO "{prefix}fence" (name, token) VALUES (?, ?))", {{"{prefix}", prefix}})),
        path_(std::move(path)) {}

  std::unique_ptr<FencedSession> begin_fenced(std::string_view name, std::int64_t token) override {
    auto session = pool_.lease();
    session->guarded("beginning a fenced transaction", [&] { session->exec_script("BEGIN IMMEDIATE"); });
    auto fenced = std::make_unique<SqliteFencedSession>(std::move(session));
    std::array<std::string, 2> params{std::string(name), std::to_string(token)};
    try {
      fenced->execute(fence_, params);
    } catch (const Error& e) {
      fenced->rollback();
      if (std::string_view(e.what()).find(kFenceRefused) != std::string_view::npos)
        throw LockLost(fence_refused_message(name, token, "sqlite://" + path_));
      throw;
    }
    return fenced;
  }

 private:
  SessionPool<SqliteSession>& pool_;
  std::string fence_;
  std::string path_;
};

}  // namespace

std::unique_ptr<FenceBackend> make_sqlite_fences(SessionPool<SqliteSession>& pool, std::string_view prefix,
                                                 std::string path) {
  return std::make_unique<SqliteFences>(pool, prefix, std::move(path));
}

}  // namespace dblock::detail

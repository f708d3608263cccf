#pragma once
// SOCI's sqlite3 header wraps <sqlite3.h> in namespace sqlite_api: include it first, and never
// <sqlite3.h> directly (doc/database-facts.md §4).
#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <dblock/errors.hpp>

#include "backends/backend_errors.hpp"
#include "backends/backend_seams.hpp"
#include "backends/sqlite/sqlite_sql.hpp"
#include "backends/sqlite/sqlite_statement_cache.hpp"
#include "backends/sqlite/sqlite_writers.hpp"

namespace dblock::detail {

/// Who wrote a statement: dblock, or the application (a fenced transaction's work), whose missing
/// table is its own, not a sign that dblock's tables are missing.
enum class StatementAuthor { dblock, application };

/// Translates SOCI/SQLite failures (the exception in flight) into dblock exceptions. The
/// application's statements get SQLite's own message, never dblock's advice (`migrate up`).
[[noreturn]] void rethrow_translated(std::string_view what, std::string_view path,
                                     StatementAuthor author = StatementAuthor::dblock);

/// Executes a statement that returns at most one row and runs it to completion: SQLite commits an
/// autocommit write only when its statement finishes, and SOCI stops stepping after the first row.
bool execute_single(soci::statement& statement);

/// Ends a transaction its caller began with ROLLBACK when the scope ends before committed() (an
/// error mid-transaction). Rolled back at once, in the writer's turn: left open until the failed
/// session is closed, SQLite's write lock would stay held, and the next writer in line would
/// sleep in the busy handler meanwhile.
class RollbackUnlessCommitted {
 public:
  explicit RollbackUnlessCommitted(soci::session& session) : session_(session) {}
  ~RollbackUnlessCommitted() {
    if (open_) {
      try {
        session_ << "ROLLBACK";
      } catch (...) {  // none was open, or the session is broken: guarded() drops it
      }
    }
  }
  RollbackUnlessCommitted(const RollbackUnlessCommitted&) = delete;
  RollbackUnlessCommitted& operator=(const RollbackUnlessCommitted&) = delete;
  void committed() noexcept { open_ = false; }

 private:
  soci::session& session_;
  bool open_ = true;
};

/// BEGIN IMMEDIATE now, COMMIT by commit(), ROLLBACK when the scope ends before it.
class ImmediateTransaction {
 public:
  explicit ImmediateTransaction(soci::session& session) : session_(session), rollback_(session) {
    session_ << "BEGIN IMMEDIATE";
  }
  void commit() {
    session_ << "COMMIT";
    rollback_.committed();
  }

 private:
  soci::session& session_;
  RollbackUnlessCommitted rollback_;
};

/// A role's per-session state (SqliteSession::part).
class SqliteSessionPart {
 public:
  virtual ~SqliteSessionPart() = default;
};

/// One SOCI session on the file, with the parts the roles keep on it (their statements, prepared
/// once). Single-threaded, like the SOCI session it wraps; the pool hands it to one thread at a time.
class SqliteSession {
 public:
  /// `clock` and `hook`: dblock::testing's seams (backend_seams.hpp), null in production; they
  /// outlive the session. With a clock, the session defines dblock_now() (kTestNow) to read it.
  SqliteSession(const std::string& path, std::chrono::milliseconds busy_timeout, const SqliteSql& sql,
                SqliteWriters& writers, const DatabaseClock* clock = nullptr, StatementHook* hook = nullptr)
      : path_(path), sql_(sql), writers_(writers), hook_(hook) {
    try {
      session_.open(soci::sqlite3, fmt::format("db=\"{}\"", path));
      raw_ = static_cast<soci::sqlite3_session_backend*>(session_.get_backend())->conn_;
      if (clock != nullptr) define_test_clock(*clock);
      session_ << fmt::format("PRAGMA busy_timeout = {}", busy_timeout.count());
      switch_to_wal();
      session_ << "PRAGMA synchronous = NORMAL";
    } catch (const soci::soci_error& e) {
      throw ConnectionError(fmt::format("cannot open SQLite database sqlite://{}: {}", path, e.what()));
    }
  }

  /// WAL is a property of the file: once one opener has set it, the others only read it. The
  /// switch needs an exclusive lock, and SQLite answers SQLITE_BUSY without calling the busy
  /// handler when two openers of a new file race for it (deadlock avoidance): that is a
  /// TransientError, and Store::open opens again.
  void switch_to_wal() {
    try {
      std::string mode;
      session_ << "PRAGMA journal_mode", soci::into(mode);
      if (mode == "wal") return;
      session_ << "PRAGMA journal_mode = WAL", soci::into(mode);
      if (mode == "wal") return;
      throw ConnectionError(fmt::format("sqlite://{} cannot use WAL (journal mode stays {})", path_, mode));
    } catch (const soci::sqlite3_soci_error& e) {
      bool busy = (e.result() & 0xff) == kSqliteBusy || (e.result() & 0xff) == kSqliteLocked;
      if (!busy) throw;
      throw TransientError(
          fmt::format("sqlite://{}: another opener is switching the new file to WAL: {}", path_, e.what()));
    }
  }

  /// False after any failure (a statement may be mid-step) or inside a transaction.
  [[nodiscard]] bool usable() const noexcept { return !broken_ && sqlite_api::sqlite3_get_autocommit(raw_) != 0; }

  /// Runs `body` and translates failures (`author` wrote its statements); a failed session is not reused.
  template <class Fn>
  auto guarded(std::string_view what, Fn&& body, StatementAuthor author = StatementAuthor::dblock) {
    auto fault = consult_hook(what);
    return guarded_after_hook(what, fault, std::forward<Fn>(body), author);
  }

  /// guarded() for a write: it runs in this backend's writers' turn (sqlite_writers.hpp).
  template <class Fn>
  auto guarded_write(std::string_view what, Fn&& body) {
    auto fault = consult_hook(what);  // before the turn: a stalled statement holds no writer's turn
    auto turn = writers_.turn(what, path_);
    return guarded_after_hook(what, fault, std::forward<Fn>(body), StatementAuthor::dblock);
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
  sqlite_api::sqlite3* raw() noexcept { return raw_; }
  /// Fenced transactions' statements (sqlite_fence.cpp), prepared once per session.
  SqliteStatementCache& statement_cache() noexcept { return statement_cache_; }
  [[nodiscard]] const SqliteSql& sql() const noexcept { return sql_; }

  /// This session's `Part`, built on first use as Part(*this): a role's prepared statements and
  /// their bound buffers (sqlite_locks.hpp), kept for the life of the session. The session itself
  /// knows no role.
  template <class Part>
  Part& part() {
    static const std::size_t index = next_part_index();
    if (index >= parts_.size()) parts_.resize(index + 1);
    auto& slot = parts_[index];
    if (!slot) slot = std::make_unique<Part>(*this);
    return static_cast<Part&>(*slot);
  }

 private:
  StatementFault consult_hook(std::string_view what) {
    return hook_ != nullptr ? hook_->before(what) : StatementFault::none;
  }

  template <class Fn>
  auto guarded_after_hook(std::string_view what, StatementFault fault, Fn&& body, StatementAuthor author) {
    try {
      // A fault is SQLite's own error, translated as every other (dblock::testing).
      if (fault == StatementFault::busy) throw soci::sqlite3_soci_error("database is locked", kSqliteBusy);
      if (fault == StatementFault::error) throw soci::sqlite3_soci_error("disk I/O error", kSqliteIoErr);
      if (fault == StatementFault::disconnect)
        throw ConnectionError(
            fmt::format("{} on sqlite://{}: the connection dropped (dblock::testing fault)", what, path_));
      if (fault == StatementFault::reply_lost) {
        body();
        throw OutcomeUnknown(fmt::format("{} on sqlite://{}: the reply was lost (dblock::testing fault)", what, path_));
      }
      return body();
    } catch (const Error&) {
      broken_ = true;
      throw;
    } catch (...) {
      broken_ = true;
      rethrow_translated(what, path_, author);
    }
  }

  /// One index per Part type, the same in every session.
  static std::size_t next_part_index() noexcept {
    static std::atomic<std::size_t> next{0};
    return next.fetch_add(1, std::memory_order_relaxed);
  }

  /// dblock_now(): the test clock's milliseconds (kTestNow).
  void define_test_clock(const DatabaseClock& clock) {
    auto now = [](sqlite_api::sqlite3_context* context, int, sqlite_api::sqlite3_value**) {
      const auto* source = static_cast<const DatabaseClock*>(sqlite_api::sqlite3_user_data(context));
      sqlite_api::sqlite3_result_int64(context, source->now_ms());
    };
    // Not SQLITE_DETERMINISTIC: SQLite must call it on every statement, never fold it.
    int rc = sqlite_api::sqlite3_create_function_v2(raw_, "dblock_now", 0, SQLITE_UTF8,
                                                    const_cast<DatabaseClock*>(&clock),  // NOLINT: read only
                                                    now, nullptr, nullptr, nullptr);
    if (rc != 0) throw soci::sqlite3_soci_error("cannot define dblock_now()", rc);
  }

  std::string path_;
  const SqliteSql& sql_;
  SqliteWriters& writers_;
  StatementHook* hook_ = nullptr;
  soci::session session_;  // declared before the statements: they must be destroyed first
  sqlite_api::sqlite3* raw_ = nullptr;
  bool broken_ = false;

  std::vector<std::unique_ptr<SqliteSessionPart>> parts_;  // after session_: their statements go first
  SqliteStatementCache statement_cache_;                   // after session_: finalized before the connection closes
};

}  // namespace dblock::detail

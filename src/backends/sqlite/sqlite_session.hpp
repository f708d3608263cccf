#pragma once
// SOCI's sqlite3 header wraps <sqlite3.h> in namespace sqlite_api: include it first, and never
// <sqlite3.h> directly (doc/database-facts.md §4).
#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>
#include <optional>
#include <string>
#include <string_view>

#include <dblock/errors.hpp>
#include <fmt/format.h>

#include "backends/backend_errors.hpp"
#include "backends/lock_backend.hpp"
#include "backends/sqlite/sqlite_sql.hpp"
#include "backends/sqlite/sqlite_statement_cache.hpp"

namespace dblock::detail {

/// Translates SOCI/SQLite failures (the exception in flight) into dblock exceptions.
[[noreturn]] void rethrow_translated(std::string_view what, std::string_view path);

/// Executes a statement that returns at most one row and runs it to completion: SQLite commits an
/// autocommit write only when its statement finishes, and SOCI stops stepping after the first row.
bool execute_single(soci::statement& statement);

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
      throw TransientError(fmt::format("sqlite://{}: another opener is switching the new file to WAL: {}", path_, e.what()));
    }
  }

  // Lock operations, one statement (or one IMMEDIATE transaction) each, on this session; callers
  // run them inside guarded(). Defined in sqlite_locks.cpp.
  std::optional<Grant> try_acquire(std::string_view name, std::string_view owner, std::chrono::milliseconds ttl,
                                   std::int64_t held_token, std::chrono::milliseconds lock_delay);
  std::optional<std::int64_t> release(std::string_view name, std::string_view owner, std::int64_t token);
  std::optional<std::int64_t> release_last(std::string_view name, std::string_view owner, std::int64_t token);
  /// `held_json`: [[name, owner, token, ttl_ms], ...]; returns the positions in `held` renewed.
  std::vector<std::size_t> renew(std::span<const HeldRef> held, const std::string& held_json);
  std::optional<std::chrono::milliseconds> lease_left(std::string_view name);
  bool force_release(std::string_view name);
  // Rare (an operator's revocation, a revoked holder's release, a release within a minimum hold):
  // prepared per call.
  bool revoke(std::string_view name);
  bool acknowledge_revoked(std::string_view name, std::string_view owner, std::int64_t token);
  bool release_keeping(std::string_view name, std::string_view owner, std::int64_t token, std::chrono::milliseconds min_hold);
  std::size_t reap(std::size_t batch);
  LockCensus census();
  /// Every row, or only `only_name`'s when it is not empty, ordered by name.
  std::vector<LockInfo> list(std::string_view only_name, std::size_t limit);

  // Groups (GroupBackend), one IMMEDIATE transaction each. Defined in sqlite_groups.cpp.
  std::optional<Grant> acquire_member(std::string_view name, std::string_view owner, HolderKind kind,
                                      std::int64_t capacity, std::chrono::milliseconds ttl, std::int64_t held_token);
  std::optional<std::int64_t> release_member(std::string_view name, std::string_view owner, HolderKind kind,
                                             std::int64_t token);
  std::vector<std::size_t> renew_members(std::span<const HeldRef> held);
  std::optional<std::chrono::milliseconds> lease_left_marking_writer(std::string_view name, std::string_view owner,
                                                                     std::chrono::milliseconds mark_for, bool& marked);
  void unmark_writer(std::string_view name, std::string_view owner);
  std::optional<std::chrono::milliseconds> first_lease_end(std::string_view name);

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
  sqlite_api::sqlite3* raw() noexcept { return raw_; }
  /// Fenced transactions' statements (sqlite_fence.cpp), prepared once per session.
  SqliteStatementCache& statement_cache() noexcept { return statement_cache_; }

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

  // Statements are prepared on first use (the tables may not exist yet when migrating) and then
  // reused for the life of the session.
  soci::statement& acquire_statement() {
    return prepared(acquire_, [&] {
      return soci::statement((session_.prepare << sql_.acquire, soci::use(name_, "name"), soci::use(owner_, "owner"),
                              soci::use(number_, "ttl"), soci::use(delay_, "delay"), soci::use(held_token_, "held"),
                              soci::into(result_a_), soci::into(result_b_)));
    });
  }
  soci::statement& release_last_statement() {
    return prepared(release_last_, [&] {
      return soci::statement((session_.prepare << sql_.release_last, soci::use(name_, "name"),
                              soci::use(owner_, "owner"), soci::use(number_, "token"), soci::into(result_a_)));
    });
  }
  soci::statement& release_at_one_statement() {
    return prepared(release_at_one_, [&] {
      return soci::statement((session_.prepare << sql_.release_at_one, soci::use(name_, "name"),
                              soci::use(owner_, "owner"), soci::use(number_, "token"), soci::into(result_a_)));
    });
  }
  soci::statement& release_inner_statement() {
    return prepared(release_inner_, [&] {
      return soci::statement((session_.prepare << sql_.release_inner, soci::use(name_, "name"),
                              soci::use(owner_, "owner"), soci::use(number_, "token"), soci::into(result_a_)));
    });
  }
  soci::statement& renew_statement() {
    return prepared(renew_, [&] {
      return soci::statement((session_.prepare << sql_.renew, soci::use(text_, "held"), soci::into(out_name_),
                             soci::into(out_owner_), soci::into(result_a_)));
    });
  }
  soci::statement& lease_left_statement() {
    return prepared(lease_left_, [&] {
      return soci::statement((session_.prepare << sql_.lease_left, soci::use(name_, "name"), soci::into(result_a_)));
    });
  }
  soci::statement& list_statement() {
    return prepared(list_, [&] {
      return soci::statement((session_.prepare << sql_.list, soci::use(name_, "name"), soci::use(name_, "name2"),
                              soci::use(name_, "name3"), soci::use(name_, "name4"), soci::use(limit_, "limit"),
                              soci::into(out_name_), soci::into(out_owner_), soci::into(result_a_),
                              soci::into(result_b_), soci::into(result_c_), soci::into(out_kind_), soci::into(delay_),
                              soci::into(held_for_)));
    });
  }
  soci::statement& begin_immediate_statement() {
    return prepared(begin_immediate_, [&] { return soci::statement((session_.prepare << "BEGIN IMMEDIATE")); });
  }
  soci::statement& commit_statement() {
    return prepared(commit_, [&] { return soci::statement((session_.prepare << "COMMIT")); });
  }
  soci::statement& reap_statement() {
    return prepared(reap_, [&] {
      return soci::statement((session_.prepare << sql_.reap, soci::use(number_, "batch"), soci::into(out_name_)));
    });
  }
  soci::statement& reap_members_statement() {
    return prepared(reap_members_, [&] {
      return soci::statement((session_.prepare << sql_.reap_members, soci::use(number_, "batch"),
                              soci::into(out_name_)));
    });
  }
  soci::statement& census_statement() {
    return prepared(census_, [&] {
      return soci::statement(
          (session_.prepare << sql_.census, soci::into(result_a_), soci::into(result_b_), soci::into(result_c_)));
    });
  }
  soci::statement& force_release_statement() {
    return prepared(force_release_, [&] {
      return soci::statement((session_.prepare << sql_.force_release, soci::use(name_, "name"),
                              soci::into(out_name_)));
    });
  }

  // Bound parameters and results of the prepared statements (bound by address at prepare time).
  std::string name_, owner_, text_, out_name_, out_owner_, out_kind_;
  std::int64_t number_ = 0, held_token_ = 0, delay_ = 0, result_a_ = 0, result_b_ = 0, result_c_ = 0;
  std::int64_t held_for_ = 0;  // list: the row's age
  std::int64_t limit_ = 0;     // list: most rows

  std::optional<soci::statement> acquire_, release_last_, release_at_one_, release_inner_, renew_, lease_left_, list_, force_release_,
      reap_, reap_members_, census_, begin_immediate_, commit_;
  SqliteStatementCache statement_cache_;  // after session_: finalized before the connection closes
};

}  // namespace dblock::detail

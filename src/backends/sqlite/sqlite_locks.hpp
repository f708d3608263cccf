#pragma once
// SQLite's lock role: table-mode locks as rows in the file, on the backend's pooled sessions. Each
// session keeps the role's statements as its SqliteLockStatements part, prepared on first use.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/lock_backend.hpp"
#include "backends/session_pool.hpp"
#include "backends/sqlite/sqlite_session.hpp"

namespace dblock::detail {

/// The lock statements of one session, bound to buffers of their own.
class SqliteLockStatements final : public SqliteSessionPart {
 public:
  explicit SqliteLockStatements(SqliteSession& session) : session_(session.session()), sql_(session.sql()) {}

  // One statement (or one IMMEDIATE transaction) each, on this part's session; callers run them
  // inside SqliteSession::guarded().
  std::optional<Grant> try_acquire(std::string_view name, std::string_view owner, std::chrono::milliseconds ttl,
                                   std::int64_t held_token, std::chrono::milliseconds lock_delay);
  std::optional<std::int64_t> release(std::string_view name, std::string_view owner, std::int64_t token);
  std::optional<std::int64_t> release_last(std::string_view name, std::string_view owner, std::int64_t token);
  /// Combined: each request's statement in turn, in the order given, inside one IMMEDIATE
  /// transaction (one commit for the batch; nothing of it stays if one fails).
  std::vector<std::optional<Grant>> try_acquire_many(std::span<const AcquireRequest> requests);
  std::vector<bool> release_last_many(std::span<const ReleaseRequest> requests);
  /// `held_json`: [[name, owner, token, ttl_ms], ...]; returns the positions in `held` renewed,
  /// and those of them whose grant was asked to let go.
  Renewal renew(std::span<const HeldRef> held, const std::string& held_json);
  std::optional<std::chrono::milliseconds> lease_left(std::string_view name);
  bool force_release(std::string_view name);
  bool set_note(std::string_view name, std::string_view owner, std::int64_t token, std::string_view note);
  // Rare (an operator's revocation or request, a revoked holder's release, a release within a
  // minimum hold): prepared per call.
  bool revoke(std::string_view name);
  bool ask_release(std::string_view name);
  bool acknowledge_revoked(std::string_view name, std::string_view owner, std::int64_t token);
  bool release_keeping(std::string_view name, std::string_view owner, std::int64_t token,
                       std::chrono::milliseconds min_hold);
  std::size_t reap(std::size_t batch);
  LockCensus census();
  /// Every row, or only `only_name`'s when it is not empty, ordered by name.
  std::vector<LockInfo> list(std::string_view only_name, std::size_t limit);
  /// The applied schema version.
  int schema_version();

 private:
  template <class Make>
  soci::statement& prepared(std::optional<soci::statement>& slot, Make&& make) {
    if (!slot) slot.emplace(make());
    return *slot;
  }

  soci::session& session_;
  const SqliteSql& sql_;

  // Statements are prepared on first use (the tables may not exist yet when migrating) and then
  // reused for the life of the session.
  soci::statement& acquire_statement() {
    return prepared(acquire_, [&] {
      return soci::statement((session_.prepare << sql_.acquire, soci::use(name_, "name"), soci::use(owner_, "owner"),
                              soci::use(number_, "ttl"), soci::use(delay_, "delay"), soci::use(held_token_, "held"),
                              soci::into(result_a_), soci::into(result_b_)));
    });
  }
  soci::statement& release_last_statement() { return owned_row_statement(release_last_, sql_.release_last); }
  soci::statement& release_at_one_statement() { return owned_row_statement(release_at_one_, sql_.release_at_one); }
  soci::statement& release_inner_statement() { return owned_row_statement(release_inner_, sql_.release_inner); }
  /// The three release statements bind the same row identity (name, owner, token) and read one number.
  soci::statement& owned_row_statement(std::optional<soci::statement>& slot, const std::string& sql) {
    return prepared(slot, [&] {
      return soci::statement((session_.prepare << sql, soci::use(name_, "name"), soci::use(owner_, "owner"),
                              soci::use(number_, "token"), soci::into(result_a_)));
    });
  }
  soci::statement& renew_statement() {
    return prepared(renew_, [&] {
      return soci::statement((session_.prepare << sql_.renew, soci::use(text_, "held"), soci::into(out_name_),
                              soci::into(out_owner_), soci::into(result_a_), soci::into(result_b_)));
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
                              soci::into(held_for_), soci::into(out_note_)));
    });
  }
  soci::statement& begin_immediate_statement() {
    return prepared(begin_immediate_, [&] { return soci::statement((session_.prepare << "BEGIN IMMEDIATE")); });
  }
  soci::statement& commit_statement() {
    return prepared(commit_, [&] { return soci::statement((session_.prepare << "COMMIT")); });
  }
  /// BEGIN IMMEDIATE; the transaction is rolled back at once unless commit() is reached.
  [[nodiscard]] RollbackUnlessCommitted begin_immediate() {
    begin_immediate_statement().execute(true);
    return RollbackUnlessCommitted(session_);
  }
  void commit(RollbackUnlessCommitted& transaction) {
    commit_statement().execute(true);
    transaction.committed();
  }
  soci::statement& reap_statement() {
    return prepared(reap_, [&] {
      return soci::statement((session_.prepare << sql_.reap, soci::use(number_, "batch"), soci::into(out_name_)));
    });
  }
  soci::statement& reap_members_statement() {
    return prepared(reap_members_, [&] {
      return soci::statement(
          (session_.prepare << sql_.reap_members, soci::use(number_, "batch"), soci::into(out_name_)));
    });
  }
  soci::statement& census_statement() {
    return prepared(census_, [&] {
      return soci::statement((session_.prepare << sql_.census, soci::into(result_a_), soci::into(result_b_),
                              soci::into(result_c_), soci::into(result_d_)));
    });
  }
  // Every acquisition with a note (each `dblock run` by default) sends it: prepared once.
  soci::statement& set_note_statement() {
    return prepared(set_note_, [&] {
      return soci::statement((session_.prepare << sql_.set_note, soci::use(text_, "note"), soci::use(name_, "name"),
                              soci::use(owner_, "owner"), soci::use(number_, "token"), soci::into(out_name_)));
    });
  }
  soci::statement& force_release_statement() {
    return prepared(force_release_, [&] {
      return soci::statement((session_.prepare << sql_.force_release, soci::use(name_, "name"), soci::into(out_name_)));
    });
  }

  // Bound parameters and results of the prepared statements (bound by address at prepare time).
  std::string name_, owner_, text_, out_name_, out_owner_, out_kind_, out_note_;
  std::int64_t number_ = 0, held_token_ = 0, delay_ = 0, result_a_ = 0, result_b_ = 0, result_c_ = 0, result_d_ = 0;
  std::int64_t held_for_ = 0;  // list: the row's age
  std::int64_t limit_ = 0;     // list: most rows

  std::optional<soci::statement> acquire_, release_last_, release_at_one_, release_inner_, renew_, lease_left_, list_,
      force_release_, set_note_, reap_, reap_members_, census_, begin_immediate_, commit_;
};

/// The lock role over `pool`'s sessions.
[[nodiscard]] std::unique_ptr<LockBackend> make_sqlite_locks(SessionPool<SqliteSession>& pool, bool combine);

}  // namespace dblock::detail

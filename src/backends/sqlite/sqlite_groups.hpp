#pragma once
// SQLite's group role (migration 0004): semaphores' permits and readers of shared locks, on the
// backend's pooled sessions. Each session keeps the role's state as its SqliteGroupStatements part.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "backends/group_backend.hpp"
#include "backends/session_pool.hpp"
#include "backends/sqlite/sqlite_session.hpp"

namespace dblock::detail {

/// The group operations on one session.
class SqliteGroupStatements final : public SqliteSessionPart {
 public:
  explicit SqliteGroupStatements(SqliteSession& session) : session_(session.session()), sql_(session.sql()) {}

  // The writes are one IMMEDIATE transaction each, on this part's session; callers run them inside
  // SqliteSession::guarded_write(), and the reads inside guarded().
  std::optional<Grant> acquire_member(std::string_view name, std::string_view owner, HolderKind kind,
                                      std::int64_t capacity, std::chrono::milliseconds ttl, std::int64_t held_token);
  std::optional<std::int64_t> release_member(std::string_view name, std::string_view owner, HolderKind kind,
                                             std::int64_t token);
  std::vector<std::size_t> renew_members(std::span<const HeldRef> held);
  /// What a waiting writer reads each time (no transaction: waiting stays read-only unless readers
  /// hold the name, and then the caller runs mark_writer() as a write of its own).
  struct LeaseRow {
    std::chrono::milliseconds left;
    bool held_by_readers;
  };
  std::optional<LeaseRow> lease_row(std::string_view name);
  void mark_writer(std::string_view name, std::string_view owner, std::chrono::milliseconds mark_for);
  void unmark_writer(std::string_view name, std::string_view owner);
  std::optional<std::chrono::milliseconds> first_lease_end(std::string_view name);

 private:
  soci::session& session_;
  const SqliteSql& sql_;
};

/// The group role over `pool`'s sessions.
[[nodiscard]] std::unique_ptr<GroupBackend> make_sqlite_groups(SessionPool<SqliteSession>& pool);

}  // namespace dblock::detail

#include "backends/mysql/my_queue.hpp"

#include <array>
#include <vector>

#include <dblock/errors.hpp>

#include "backends/mysql/my_sql.hpp"
#include "base/holder_kind.hpp"
#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

/// wait_turn's "seq count token left_ms" (migration 0018); NULL: the row is gone and nothing is ours.
Turn parse_turn(const MyRows& rows) {
  Turn turn;
  if (rows.empty() || !rows.front().text(0)) return turn;
  auto [seq, count, token, left] = parse_numbers<4>(*rows.front().text(0), "wait_turn");
  turn.seq = seq;
  if (count > 0) turn.grant = Grant{count, token};
  turn.left = milliseconds(left);
  return turn;
}

/// MariaDB sends no notifications: a queued waiter polls (the core's back-off) and reads its grant
/// at its next look. The turn and the hand-off are 0018's functions, one statement each.
class MyQueue final : public QueueBackend {
 public:
  MyQueue(SessionPool<MyConnection>& pool, StatementIds& ids, std::string_view prefix) : pool_(pool) {
    auto fill = [&](std::string_view sql) { return detail::fill(sql, {{"{prefix}", prefix}}); };
    // The upsert that takes a free name waits at most 1 s for a row lock (a fenced transaction that
    // outlived its lease): the turn then fails as busy (1205) and the waiter tries again.
    take_turn_ = {ids, "wait_turn",
                  fill("SET STATEMENT innodb_lock_wait_timeout = 1 FOR SELECT `{prefix}wait_turn`(?, ?, ?, ?, ?)")};
    // One statement, one snapshot: a hand-off that committed shows as the row gone and the grant there.
    look_ = {ids, "look", fill(R"(
SELECT EXISTS (SELECT 1 FROM `{prefix}waiters` w WHERE w.name = ? AND w.seq = ? AND w.owner = ?),
       COALESCE(MAX(l.count), 0), COALESCE(MAX(l.token), 0),
       COALESCE(MAX(FLOOR(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), l.expires_at) / 1000)), 0),
       COALESCE((SELECT GREATEST(FLOOR(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), h.expires_at) / 1000), 0)
                 FROM `{prefix}locks` h WHERE h.name = ?), 0)
FROM `{prefix}locks` l WHERE l.name = ? AND l.owner = ? AND l.expires_at > UTC_TIMESTAMP(6))")};
    // The hand-off locks the row it grants (FOR UPDATE): a leave waits for it and then finds the
    // row gone, or deletes it first and the hand-off passes to the next waiter.
    leave_ = {ids, "leave", fill("DELETE FROM `{prefix}waiters` WHERE name = ? AND owner = ? AND seq = ?")};
    release_handing_off_ = {ids, "release_handing_off", fill("SELECT `{prefix}release_handing_off`(?, ?, ?)")};
    release_handing_to_ = {ids, "release_handing_to", fill("SELECT `{prefix}release_handing_to`(?, ?, ?, ?)")};
    reap_ = {ids, "reap_waiters",
             fill("DELETE FROM `{prefix}waiters` WHERE expires_at <= UTC_TIMESTAMP(6) ORDER BY expires_at LIMIT ?")};
    // A name's arrival counter, once nobody waits for the name and nothing drew from it for ten
    // minutes (migration 0020): a draw in flight holds the row's lock, and this DELETE, once it has
    // waited for that lock, reads the row as drawn from just now and keeps it.
    reap_counters_ = {ids, "reap_waiter_counters", fill(R"(
DELETE FROM `{prefix}waiter_counters`
WHERE (touched_at IS NULL OR touched_at < UTC_TIMESTAMP(6) - INTERVAL 10 MINUTE)
  AND NOT EXISTS (SELECT 1 FROM `{prefix}waiters` w WHERE w.name = `{prefix}waiter_counters`.name)
LIMIT ?)")};
    rows_ = {ids, "waiter_rows", fill("SELECT COUNT(*) FROM `{prefix}waiters` WHERE name = ?")};
    // The position counts live waiters only: a dead one is skipped by the hand-off, so it is no one's turn.
    list_ = {ids, "list_waiters", fill(R"(
SELECT q.name, q.owner, q.kind, q.position, q.waited_ms
FROM (SELECT w.name, w.seq, w.owner, w.kind, ROW_NUMBER() OVER (PARTITION BY w.name ORDER BY w.seq) AS position,
             FLOOR(TIMESTAMPDIFF(MICROSECOND, w.queued_at, n.t) / 1000) AS waited_ms
      FROM `{prefix}waiters` w, (SELECT UTC_TIMESTAMP(6) AS t) n WHERE w.expires_at > n.t) q
ORDER BY q.name, q.seq LIMIT ?)")};
    place_ = {ids, "place", fill(R"(
SELECT IF(SUM(seq = ?) > 0, COUNT(*), 0) FROM `{prefix}waiters`
WHERE name = ? AND seq <= ? AND expires_at > UTC_TIMESTAMP(6))")};
    edges_ = {ids, "wait_edges", fill(R"(
SELECT w.owner, w.name, l.owner, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', w.queued_at)
FROM (SELECT UTC_TIMESTAMP(6) AS t) n
JOIN `{prefix}waiters` w ON w.kind = 'exclusive' AND w.expires_at > n.t
JOIN `{prefix}locks` l ON l.name = w.name AND l.expires_at > n.t
ORDER BY w.queued_at LIMIT ?)")};
  }

  Turn take_turn(std::string_view name, std::string_view owner, milliseconds ttl, milliseconds waiter_ttl,
                 std::int64_t seq) override {
    std::array<MyParam, 5> params{name, owner, ttl.count() * 1000, waiter_ttl.count() * 1000, seq};
    return parse_turn(pool_.lease()->query(take_turn_, params));
  }

  WaiterLook look(std::string_view name, std::string_view owner, std::int64_t seq) override {
    std::array<MyParam, 6> params{name, seq, owner, name, name, owner};
    auto rows = pool_.lease()->query(look_, params);
    if (rows.empty()) throw DatabaseError("look answered no row");
    const auto& row = rows.front();
    WaiterLook look;
    look.queued = row.num(0) != 0;
    if (row.num(1) > 0) look.grant = Grant{row.num(1), row.num(2)};
    look.grant_left = milliseconds(row.num(3));
    look.holder_left = milliseconds(row.num(4));
    return look;
  }

  bool leave(std::string_view name, std::string_view owner, std::int64_t seq) override {
    std::array<MyParam, 3> params{name, owner, seq};
    return pool_.lease()->update(leave_, params) > 0;
  }

  std::optional<std::int64_t> release_handing_off(std::string_view name, std::string_view owner, std::int64_t token,
                                                  std::string_view successor) override {
    std::array<MyParam, 4> params{name, owner, token, successor};
    auto rows = successor.empty() ? pool_.lease()->query(release_handing_off_, std::span(params).first(3))
                                  : pool_.lease()->query(release_handing_to_, params);
    if (rows.empty() || !rows.front().text(0)) return std::nullopt;  // not ours: nothing changed
    return 0;
  }

  std::size_t reap_waiters(std::size_t batch) override {
    std::array<MyParam, 1> params{static_cast<std::int64_t>(batch)};
    auto session = pool_.lease();
    auto reaped = static_cast<std::size_t>(session->update(reap_, params));
    session->update(reap_counters_, params);
    return reaped;
  }

  std::size_t waiter_rows(std::string_view name) override {
    std::array<MyParam, 1> params{name};
    return static_cast<std::size_t>(first_int64(pool_.lease()->query(rows_, params)).value_or(0));
  }

  std::int64_t place(std::string_view name, std::int64_t seq) override {
    std::array<MyParam, 3> params{seq, name, seq};
    return first_int64(pool_.lease()->query(place_, params)).value_or(0);
  }

  std::vector<WaiterInfo> list_waiters(std::size_t limit) override {
    std::array<MyParam, 1> params{static_cast<std::int64_t>(limit)};
    std::vector<WaiterInfo> waiters;
    for (auto& row : pool_.lease()->query(list_, params))
      waiters.push_back(
          WaiterInfo{row.str(0), row.str(1), kind_from_text(row.str(2)), row.num(3), milliseconds(row.num(4))});
    return waiters;
  }

  std::vector<WaitEdge> wait_edges(std::size_t limit) override {
    std::array<MyParam, 1> params{static_cast<std::int64_t>(limit)};
    std::vector<WaitEdge> edges;
    for (auto& row : pool_.lease()->query(edges_, params))
      edges.push_back(WaitEdge{row.str(0), row.str(1), row.str(2), row.num(3)});
    return edges;
  }

 private:
  SessionPool<MyConnection>& pool_;
  MyStatement take_turn_, look_, leave_, release_handing_off_, release_handing_to_, reap_, reap_counters_, rows_, list_,
      place_, edges_;
};

}  // namespace

std::unique_ptr<QueueBackend> make_my_queue(SessionPool<MyConnection>& pool, StatementIds& ids,
                                            std::string_view prefix) {
  return std::make_unique<MyQueue>(pool, ids, prefix);
}

}  // namespace dblock::detail

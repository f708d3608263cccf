// SOCI's sqlite3 header wraps <sqlite3.h>: included first, through the session's header.
#include "backends/sqlite/sqlite_queue.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "base/holder_kind.hpp"
#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

/// SQLite has one writer: every operation below runs in one IMMEDIATE transaction with the clock
/// read once, so each sees and changes the queue and the lock row as one step, and seq (one more
/// than the name's largest) follows arrival per name.
class SqliteQueue final : public QueueBackend {
 public:
  SqliteQueue(SessionPool<SqliteSession>& pool, std::string_view prefix, std::string_view clock) : pool_(pool) {
    auto fill = [&](std::string_view sql) { return detail::fill(sql, {{"{prefix}", prefix}, {"{now}", clock}}); };
    now_ = fill("SELECT {now}");
    lock_row_ = fill(R"(SELECT owner, count, token, expires_at FROM "{prefix}locks" WHERE name = :name)");
    renew_ = fill(R"(
UPDATE "{prefix}waiters" SET expires_at = max(expires_at, :expires) WHERE name = :name AND seq = :seq AND owner = :owner
RETURNING seq)");
    first_live_ = fill(R"(
SELECT coalesce(min(seq), 0) FROM "{prefix}waiters" WHERE name = :name AND kind = 'exclusive' AND expires_at > :now)");
    next_token_ = fill(R"(UPDATE "{prefix}token_counter" SET value = value + 1 WHERE id = 1 RETURNING value)");
    grant_ = fill(R"(
INSERT OR REPLACE INTO "{prefix}locks" (name, owner, count, token, acquired_at, expires_at, lock_delay_ms)
VALUES (:name, :owner, 1, :token, :now, :expires, 0))");
    drop_own_ = fill(R"(DELETE FROM "{prefix}waiters" WHERE name = :name AND owner = :owner AND kind = 'exclusive')");
    enqueue_ = fill(R"(
INSERT INTO "{prefix}waiters" (name, seq, owner, kind, ttl_ms, queued_at, expires_at)
VALUES (:name, (SELECT coalesce(max(seq), 0) + 1 FROM "{prefix}waiters"), :owner, 'exclusive',
        :ttl, :now, :expires)
ON CONFLICT (name, owner, kind) DO UPDATE SET
  seq = excluded.seq, ttl_ms = excluded.ttl_ms, queued_at = excluded.queued_at, expires_at = excluded.expires_at
RETURNING seq)");
    look_ = fill(R"(
SELECT EXISTS (SELECT 1 FROM "{prefix}waiters" w WHERE w.name = :name AND w.seq = :seq AND w.owner = :owner),
       coalesce(l.count, 0), coalesce(l.token, 0), coalesce(l.expires_at - c.now, 0),
       coalesce((SELECT h.expires_at - c.now FROM "{prefix}locks" h WHERE h.name = :name2), 0)
FROM (SELECT {now} AS now) c
LEFT JOIN "{prefix}locks" l ON l.name = :name3 AND l.owner = :owner2 AND l.expires_at > c.now)");
    leave_ =
        fill(R"(DELETE FROM "{prefix}waiters" WHERE name = :name AND owner = :owner AND seq = :seq RETURNING seq)");
    release_ =
        fill(R"(DELETE FROM "{prefix}locks" WHERE name = :name AND owner = :owner AND token = :token RETURNING name)");
    first_waiter_ = fill(R"(
SELECT seq, owner, ttl_ms FROM "{prefix}waiters" WHERE name = :name AND kind = 'exclusive' AND expires_at > :now
ORDER BY owner = :successor DESC, seq LIMIT 1)");
    drop_waiter_ = fill(R"(DELETE FROM "{prefix}waiters" WHERE name = :name AND seq = :seq)");
    reap_ = fill(R"(
DELETE FROM "{prefix}waiters" WHERE (name, seq) IN (
  SELECT name, seq FROM "{prefix}waiters" WHERE expires_at <= {now} ORDER BY expires_at LIMIT :batch))");
    rows_ = fill(R"(SELECT count(*) FROM "{prefix}waiters" WHERE name = :name)");
    // The position counts live waiters only: a dead one is skipped by the hand-off, so it is no one's turn.
    list_ = fill(R"(
SELECT q.name, q.owner, q.kind, q.position, q.waited_ms
FROM (SELECT w.name, w.seq, w.owner, w.kind, row_number() OVER (PARTITION BY w.name ORDER BY w.seq) AS position,
             c.now - w.queued_at AS waited_ms
      FROM "{prefix}waiters" w, (SELECT {now} AS now) c WHERE w.expires_at > c.now) q
ORDER BY q.name, q.seq LIMIT :limit)");
    place_ = fill(R"(
SELECT CASE WHEN sum(seq = :seq) > 0 THEN count(*) ELSE 0 END FROM "{prefix}waiters"
WHERE name = :name AND seq <= :seq2 AND expires_at > {now})");
    edges_ = fill(R"(
SELECT w.owner, w.name, l.owner, w.seq
FROM (SELECT {now} AS now) c
JOIN "{prefix}waiters" w ON w.kind = 'exclusive' AND w.expires_at > c.now
JOIN "{prefix}locks" l ON l.name = w.name AND l.expires_at > c.now
ORDER BY w.seq LIMIT :limit)");
  }

  Turn take_turn(std::string_view name_in, std::string_view owner_in, milliseconds ttl, milliseconds waiter_ttl,
                 std::int64_t seq_in) override {
    auto session = pool_.lease();
    return session->guarded_write("taking a turn in the queue", [&] {
      auto& sql = session->session();
      std::string name(name_in), owner(owner_in);
      long long seq = seq_in, now = 0, ttl_ms = ttl.count(), waiter_expires = 0;
      ImmediateTransaction transaction(sql);
      sql << now_, soci::into(now);
      waiter_expires = now + waiter_ttl.count();
      Turn turn;
      if (seq > 0) {
        long long renewed = 0;
        sql << renew_, soci::use(waiter_expires, "expires"), soci::use(name, "name"), soci::use(seq, "seq"),
            soci::use(owner, "owner"), soci::into(renewed);
        if (!sql.got_data()) {  // granted by a release, or gone
          auto row = read_row(sql, name);
          if (row.owner == owner && row.expires > now)
            turn = Turn{0, Grant{row.count, row.token}, milliseconds(row.expires - now)};
          transaction.commit();
          return turn;
        }
      }
      long long first = 0;
      sql << first_live_, soci::use(name, "name"), soci::use(now, "now"), soci::into(first);
      auto row = read_row(sql, name);
      if ((first == 0 || first == seq) && row.expires <= now) {
        long long token = 0, expires = now + ttl_ms;
        sql << next_token_, soci::into(token);
        sql << grant_, soci::use(name, "name"), soci::use(owner, "owner"), soci::use(token, "token"),
            soci::use(now, "now"), soci::use(expires, "expires");
        sql << drop_own_, soci::use(name, "name"), soci::use(owner, "owner");
        transaction.commit();
        return Turn{0, Grant{1, token}, ttl};
      }
      if (seq == 0)
        sql << enqueue_, soci::use(name, "name"), soci::use(owner, "owner"), soci::use(ttl_ms, "ttl"),
            soci::use(now, "now"), soci::use(waiter_expires, "expires"), soci::into(seq);
      transaction.commit();
      return Turn{seq, std::nullopt, milliseconds(row.expires > now ? row.expires - now : 0)};
    });
  }

  WaiterLook look(std::string_view name_in, std::string_view owner_in, std::int64_t seq_in) override {
    auto session = pool_.lease();
    return session->guarded("looking at a place in the queue", [&] {
      std::string name(name_in), owner(owner_in);
      long long seq = seq_in, queued = 0, count = 0, token = 0, grant_left = 0, holder_left = 0;
      session->session() << look_, soci::use(name, "name"), soci::use(seq, "seq"), soci::use(owner, "owner"),
          soci::use(name, "name2"), soci::use(name, "name3"), soci::use(owner, "owner2"), soci::into(queued),
          soci::into(count), soci::into(token), soci::into(grant_left), soci::into(holder_left);
      WaiterLook look;
      look.queued = queued != 0;
      if (count > 0) look.grant = Grant{count, token};
      look.grant_left = milliseconds(grant_left);
      look.holder_left = milliseconds(holder_left > 0 ? holder_left : 0);
      return look;
    });
  }

  bool leave(std::string_view name_in, std::string_view owner_in, std::int64_t seq_in) override {
    auto session = pool_.lease();
    return session->guarded_write("leaving the queue", [&] {
      std::string name(name_in), owner(owner_in);
      long long seq = seq_in, left = 0;
      session->session() << leave_, soci::use(name, "name"), soci::use(owner, "owner"), soci::use(seq, "seq"),
          soci::into(left);
      return session->session().got_data();
    });
  }

  std::optional<std::int64_t> release_handing_off(std::string_view name_in, std::string_view owner_in,
                                                  std::int64_t token_in, std::string_view successor_in) override {
    auto session = pool_.lease();
    return session->guarded_write("release", [&]() -> std::optional<std::int64_t> {
      auto& sql = session->session();
      std::string name(name_in), owner(owner_in), successor(successor_in), released, next_owner;
      long long token = token_in, now = 0, seq = 0, ttl_ms = 0;
      ImmediateTransaction transaction(sql);
      sql << release_, soci::use(name, "name"), soci::use(owner, "owner"), soci::use(token, "token"),
          soci::into(released);
      if (!sql.got_data()) return std::nullopt;  // not ours: rolled back, nothing changed
      sql << now_, soci::into(now);
      sql << first_waiter_, soci::use(name, "name"), soci::use(now, "now"), soci::use(successor, "successor"),
          soci::into(seq), soci::into(next_owner), soci::into(ttl_ms);
      if (sql.got_data()) {
        long long next_token = 0, expires = now + ttl_ms;
        sql << drop_waiter_, soci::use(name, "name"), soci::use(seq, "seq");
        sql << next_token_, soci::into(next_token);
        sql << grant_, soci::use(name, "name"), soci::use(next_owner, "owner"), soci::use(next_token, "token"),
            soci::use(now, "now"), soci::use(expires, "expires");
      }
      transaction.commit();
      return 0;
    });
  }

  std::size_t reap_waiters(std::size_t batch_in) override {
    auto session = pool_.lease();
    return session->guarded_write("reaping dead waiters", [&] {
      long long batch = static_cast<long long>(batch_in), changed = 0;
      session->session() << reap_, soci::use(batch, "batch");
      session->session() << "SELECT changes()", soci::into(changed);
      return static_cast<std::size_t>(changed);
    });
  }

  std::int64_t place(std::string_view name_in, std::int64_t seq_in) override {
    auto session = pool_.lease();
    return session->guarded("reading a place in the queue", [&] {
      std::string name(name_in);
      long long seq = seq_in, position = 0;
      session->session() << place_, soci::use(seq, "seq"), soci::use(name, "name"), soci::use(seq, "seq2"),
          soci::into(position);
      return static_cast<std::int64_t>(position);
    });
  }

  std::vector<WaiterInfo> list_waiters(std::size_t limit_in) override {
    auto session = pool_.lease();
    return session->guarded("listing waiters", [&] {
      long long limit = static_cast<long long>(std::min<std::size_t>(limit_in, INT64_MAX)), position = 0, waited = 0;
      std::string name, owner, kind;
      soci::statement listing((session->session().prepare << list_, soci::use(limit, "limit"), soci::into(name),
                               soci::into(owner), soci::into(kind), soci::into(position), soci::into(waited)));
      std::vector<WaiterInfo> waiters;
      if (listing.execute(true)) {
        do waiters.push_back(WaiterInfo{name, owner, kind_from_text(kind), position, milliseconds(waited)});
        while (listing.fetch());
      }
      return waiters;
    });
  }

  std::vector<WaitEdge> wait_edges(std::size_t limit_in) override {
    auto session = pool_.lease();
    return session->guarded("reading the wait graph", [&] {
      long long limit = static_cast<long long>(std::min<std::size_t>(limit_in, INT64_MAX)), queued = 0;
      std::string waiter, name, holder;
      soci::statement reading((session->session().prepare << edges_, soci::use(limit, "limit"), soci::into(waiter),
                               soci::into(name), soci::into(holder), soci::into(queued)));
      std::vector<WaitEdge> edges;
      if (reading.execute(true)) {
        do edges.push_back(WaitEdge{waiter, name, holder, queued});
        while (reading.fetch());
      }
      return edges;
    });
  }

  std::size_t waiter_rows(std::string_view name_in) override {
    auto session = pool_.lease();
    return session->guarded("counting waiters", [&] {
      std::string name(name_in);
      long long rows = 0;
      session->session() << rows_, soci::use(name, "name"), soci::into(rows);
      return static_cast<std::size_t>(rows);
    });
  }

 private:
  struct Row {
    std::string owner;
    long long count = 0, token = 0, expires = 0;  // expires 0: no row
  };
  Row read_row(soci::session& sql, const std::string& name) {
    Row row;
    sql << lock_row_, soci::use(name, "name"), soci::into(row.owner), soci::into(row.count), soci::into(row.token),
        soci::into(row.expires);
    if (!sql.got_data()) row = Row{};
    return row;
  }

  SessionPool<SqliteSession>& pool_;
  std::string now_, lock_row_, renew_, first_live_, next_token_, grant_, drop_own_, enqueue_, look_, leave_, release_,
      first_waiter_, drop_waiter_, reap_, rows_, list_, place_, edges_;
};

}  // namespace

std::unique_ptr<QueueBackend> make_sqlite_queue(SessionPool<SqliteSession>& pool, std::string_view prefix,
                                                std::string_view clock) {
  return std::make_unique<SqliteQueue>(pool, prefix, clock);
}

}  // namespace dblock::detail

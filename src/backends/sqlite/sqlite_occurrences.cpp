// SOCI's sqlite3 header wraps <sqlite3.h>: included first, through the session's header.
#include "backends/sqlite/sqlite_occurrences.hpp"

#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

/// A lock grant that still holds a live lease, for the record `o`.
constexpr std::string_view kLive = R"(EXISTS (SELECT 1 FROM "{prefix}locks" l
  WHERE l.name = o.name AND l.token = o.token AND l.expires_at > {now}))";

class SqliteOccurrences final : public OccurrenceBackend {
 public:
  SqliteOccurrences(SessionPool<SqliteSession>& pool, std::string_view prefix, std::string_view clock) : pool_(pool) {
    auto fill = [&](std::string_view sql) {
      return detail::fill(detail::fill(sql, {{"{live}", kLive}}), {{"{prefix}", prefix}, {"{now}", clock}});
    };
    clock_ = fill("SELECT {now}");
    // One statement (SQLite serialises writes): inserted only while the caller's grant is live (as
    // the fence sees it: its lease without the lock-delay, not revoked or kept for a minimum hold);
    // the primary key lets one claimer win. A 'running' row with another token is abandoned: the
    // caller's live exclusive grant on the name proves that lease ended. One with the caller's token
    // is taken only by the claim (owner) whose reply was lost, never by a second claim of the grant.
    claim_ = fill(R"(
INSERT INTO "{prefix}occurrences"
  (name, occurrence, owner, token, status, attempts, exit_code, claimed_at, finished_at, keep_until)
SELECT :name, :occurrence, :owner, :token, 'running', 1, NULL, c.now, NULL, c.now + :keep
FROM (SELECT {now} AS now) c
WHERE EXISTS (SELECT 1 FROM "{prefix}locks" l WHERE l.name = :name2 AND l.token = :token2
              AND l.expires_at - l.lock_delay_ms > c.now
              AND l.owner NOT LIKE '(revoked)%' AND l.owner NOT LIKE '(min-hold)%')
ON CONFLICT (name, occurrence) DO UPDATE SET
  owner = excluded.owner, token = excluded.token, status = 'running', exit_code = NULL,
  attempts = attempts + (token <> excluded.token), claimed_at = excluded.claimed_at, finished_at = NULL,
  keep_until = max(keep_until, excluded.keep_until)
WHERE (token = excluded.token AND owner = excluded.owner AND status = 'running')
   OR (:retry AND (status = 'failed' OR (status = 'running' AND token <> excluded.token))))");
    finish_ = fill(R"(
UPDATE "{prefix}occurrences" SET status = CASE WHEN :code = 0 THEN 'succeeded' ELSE 'failed' END,
  exit_code = :code2, finished_at = {now}
WHERE name = :name AND occurrence = :occurrence AND token = :token AND status = 'running')");
    list_ = fill(R"(
SELECT o.name, o.occurrence, o.owner, o.token,
       CASE WHEN o.status = 'running' AND NOT {live} THEN 'abandoned' ELSE o.status END,
       o.attempts, coalesce(o.exit_code, 0), o.exit_code IS NOT NULL, {now} - o.claimed_at
FROM "{prefix}occurrences" o WHERE :name = '' OR o.name = :name2
ORDER BY o.name, o.occurrence)");
    reap_ = fill(R"(
DELETE FROM "{prefix}occurrences" WHERE (name, occurrence) IN (
  SELECT o.name, o.occurrence FROM "{prefix}occurrences" o
  WHERE o.keep_until <= {now} AND NOT (o.status = 'running' AND {live})
  ORDER BY o.keep_until LIMIT :batch))");
  }

  std::int64_t clock_ms() override {
    auto session = pool_.lease();
    return session->guarded("reading the clock", [&] {
      long long now = 0;
      session->session() << clock_, soci::into(now);
      return static_cast<std::int64_t>(now);
    });
  }

  bool claim(const OccurrenceClaimRef& claim) override {
    auto session = pool_.lease();
    return session->guarded_write("claiming an occurrence", [&] {
      std::string name(claim.name), occurrence(claim.occurrence), owner(claim.owner);
      long long token = claim.token, keep = claim.keep.count(), changed = 0;
      int retry = claim.retry_failed ? 1 : 0;
      session->session() << claim_, soci::use(name, "name"), soci::use(occurrence, "occurrence"),
          soci::use(owner, "owner"), soci::use(token, "token"), soci::use(keep, "keep"), soci::use(name, "name2"),
          soci::use(token, "token2"), soci::use(retry, "retry");
      session->session() << "SELECT changes()", soci::into(changed);
      return changed > 0;
    });
  }

  bool finish(std::string_view name, std::string_view occurrence, std::int64_t token, int exit_code) override {
    auto session = pool_.lease();
    return session->guarded_write("recording an occurrence", [&] {
      std::string name_text(name), occurrence_text(occurrence);
      long long token_value = token, changed = 0;
      session->session() << finish_, soci::use(exit_code, "code"), soci::use(exit_code, "code2"),
          soci::use(name_text, "name"), soci::use(occurrence_text, "occurrence"), soci::use(token_value, "token");
      session->session() << "SELECT changes()", soci::into(changed);
      return changed > 0;
    });
  }

  std::vector<OccurrenceInfo> list(std::string_view only_name) override {
    auto session = pool_.lease();
    return session->guarded("listing occurrences", [&] {
      std::string name(only_name);
      std::vector<OccurrenceInfo> rows;
      soci::rowset<soci::row> result =
          (session->session().prepare << list_, soci::use(name, "name"), soci::use(name, "name2"));
      for (auto& row : result) {
        OccurrenceInfo info{row.get<std::string>(0),
                            row.get<std::string>(1),
                            row.get<std::string>(2),
                            number(row, 3),
                            occurrence_status_of(row.get<std::string>(4)),
                            number(row, 5),
                            std::nullopt,
                            std::chrono::milliseconds(number(row, 8))};
        if (number(row, 7) != 0) info.exit_code = static_cast<int>(number(row, 6));
        rows.push_back(std::move(info));
      }
      return rows;
    });
  }

  std::size_t reap(std::size_t batch) override {
    auto session = pool_.lease();
    return session->guarded_write("reaping occurrences", [&] {
      long long limit = static_cast<long long>(batch), changed = 0;
      session->session() << reap_, soci::use(limit, "batch");
      session->session() << "SELECT changes()", soci::into(changed);
      return static_cast<std::size_t>(changed);
    });
  }

 private:
  /// SOCI types an SQLite column by its declaration, or by its first value for an expression.
  static std::int64_t number(const soci::row& row, std::size_t column) {
    switch (row.get_properties(column).get_data_type()) {
      case soci::dt_integer:
        return row.get<int>(column);
      case soci::dt_long_long:
        return row.get<long long>(column);
      case soci::dt_unsigned_long_long:
        return static_cast<std::int64_t>(row.get<unsigned long long>(column));
      case soci::dt_double:
        return static_cast<std::int64_t>(row.get<double>(column));
      default:
        return std::stoll(row.get<std::string>(column));
    }
  }

  SessionPool<SqliteSession>& pool_;
  std::string clock_, claim_, finish_, list_, reap_;
};

}  // namespace

std::unique_ptr<OccurrenceBackend> make_sqlite_occurrences(SessionPool<SqliteSession>& pool, std::string_view prefix,
                                                           std::string_view clock) {
  return std::make_unique<SqliteOccurrences>(pool, prefix, clock);
}

}  // namespace dblock::detail

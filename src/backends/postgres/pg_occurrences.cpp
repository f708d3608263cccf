#include "backends/postgres/pg_occurrences.hpp"

#include <array>

#include "backends/postgres/pg_sql.hpp"
#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

/// The status as listed: a run still 'running' whose grant holds no live lease was abandoned.
constexpr std::string_view kListedStatus = R"(CASE WHEN o.status = 'running' AND NOT EXISTS (
    SELECT FROM "{schema}"."{prefix}locks" l WHERE l.name = o.name AND l.token = o.token AND l.expires_at > clock_timestamp())
  THEN 'abandoned' ELSE o.status END)";

class PgOccurrences final : public OccurrenceBackend {
 public:
  PgOccurrences(SessionPool<PgConnection>& pool, StatementIds& ids, std::string_view schema, std::string_view prefix)
      : pool_(pool) {
    auto fill = [&](std::string_view sql) {
      return detail::fill(detail::fill(sql, {{"{listed_status}", kListedStatus}}),
                          {{"{schema}", schema}, {"{prefix}", prefix}});
    };
    clock_ = {ids, "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"};
    // One statement: the row is inserted only while the caller's grant is live (as the fence sees
    // it: its lease, not the lock-delay after it; not revoked or kept for a minimum hold), and the primary key
    // lets one claimer of (name, occurrence) win; ON CONFLICT locks the existing row, so two
    // retries of a failed occurrence cannot both take it over. A 'running' row with another token
    // is abandoned here: the caller's live exclusive grant on the name proves that lease ended. A
    // 'running' row with the caller's token is taken only by the same claim (its owner, a nonce
    // per claim) whose reply was lost: a second claim under the same grant is refused.
    claim_ = {ids, fill(R"(
WITH c AS (SELECT clock_timestamp() AS now)
INSERT INTO "{schema}"."{prefix}occurrences" AS o
  (name, occurrence, owner, token, status, attempts, exit_code, claimed_at, finished_at, keep_until)
SELECT $1, $2, $3, $4::bigint, 'running', 1, NULL, c.now, NULL, c.now + $5::bigint * interval '1 millisecond' FROM c
WHERE EXISTS (SELECT FROM "{schema}"."{prefix}locks" l
              WHERE l.name = $1 AND l.token = $4::bigint
                AND l.expires_at - l.lock_delay_ms * interval '1 millisecond' > c.now
                AND l.owner NOT LIKE '(revoked)%' AND l.owner NOT LIKE '(min-hold)%')
ON CONFLICT (name, occurrence) DO UPDATE SET
  owner = EXCLUDED.owner, token = EXCLUDED.token, status = 'running', exit_code = NULL,
  attempts = CASE WHEN o.token = EXCLUDED.token THEN o.attempts ELSE o.attempts + 1 END,
  claimed_at = EXCLUDED.claimed_at, finished_at = NULL, keep_until = greatest(o.keep_until, EXCLUDED.keep_until)
WHERE (o.token = EXCLUDED.token AND o.owner = EXCLUDED.owner AND o.status = 'running')
   OR ($6::boolean AND (o.status = 'failed' OR (o.status = 'running' AND o.token <> EXCLUDED.token)))
RETURNING o.attempts)")};
    finish_ = {ids, fill(R"(
UPDATE "{schema}"."{prefix}occurrences"
SET status = CASE WHEN $4::integer = 0 THEN 'succeeded' ELSE 'failed' END, exit_code = $4::integer,
    finished_at = clock_timestamp()
WHERE name = $1 AND occurrence = $2 AND token = $3::bigint AND status = 'running'
RETURNING 1)")};
    list_ = {ids, fill(R"(
SELECT o.name, o.occurrence, o.owner, o.token, {listed_status}, o.attempts, coalesce(o.exit_code, -1000),
       o.exit_code IS NOT NULL, floor(extract(epoch FROM clock_timestamp() - o.claimed_at) * 1000)::bigint
FROM "{schema}"."{prefix}occurrences" o WHERE $1 = '' OR o.name = $1
ORDER BY o.name, o.occurrence)")};
    // SKIP LOCKED: concurrent reapers and claimers never wait for each other.
    reap_ = {ids, fill(R"(
WITH async AS (SELECT set_config('synchronous_commit', 'off', true)),
     victim AS (SELECT o.name, o.occurrence FROM "{schema}"."{prefix}occurrences" o
                WHERE o.keep_until <= clock_timestamp() AND {listed_status} <> 'running'
                ORDER BY o.keep_until LIMIT $1::bigint FOR UPDATE SKIP LOCKED),
     gone AS (DELETE FROM "{schema}"."{prefix}occurrences" o USING victim v
              WHERE o.name = v.name AND o.occurrence = v.occurrence RETURNING 1)
SELECT count(*) FROM gone, async)")};
  }

  std::int64_t clock_ms() override { return to_int64(run(clock_, std::span<const std::string>()).get(), 0, 0); }

  bool claim(const OccurrenceClaimRef& claim) override {
    std::array<std::string, 6> params{
        std::string(claim.name),     std::string(claim.occurrence),      std::string(claim.owner),
        std::to_string(claim.token), std::to_string(claim.keep.count()), claim.retry_failed ? "true" : "false"};
    return PQntuples(run(claim_, params).get()) > 0;
  }

  bool finish(std::string_view name, std::string_view occurrence, std::int64_t token, int exit_code) override {
    std::array<std::string, 4> params{std::string(name), std::string(occurrence), std::to_string(token),
                                      std::to_string(exit_code)};
    return PQntuples(run(finish_, params).get()) > 0;
  }

  std::vector<OccurrenceInfo> list(std::string_view only_name) override {
    std::array<std::string, 1> params{std::string(only_name)};
    auto result = run(list_, params);
    std::vector<OccurrenceInfo> rows;
    for (int row = 0; row < PQntuples(result.get()); ++row) {
      OccurrenceInfo info{text_of(result.get(), row, 0),
                          text_of(result.get(), row, 1),
                          text_of(result.get(), row, 2),
                          to_int64(result.get(), row, 3),
                          occurrence_status_of(text_of(result.get(), row, 4)),
                          to_int64(result.get(), row, 5),
                          std::nullopt,
                          std::chrono::milliseconds(to_int64(result.get(), row, 8))};
      if (text_of(result.get(), row, 7) == "t") info.exit_code = static_cast<int>(to_int64(result.get(), row, 6));
      rows.push_back(std::move(info));
    }
    return rows;
  }

  std::size_t reap(std::size_t batch) override {
    std::array<std::string, 1> params{std::to_string(batch)};
    return static_cast<std::size_t>(to_int64(run(reap_, params).get(), 0, 0));
  }

 private:
  /// As table mode's: a statement that met a transaction pooler did not run and goes out again unnamed.
  template <class Params>
  PgResult run(const PgStatement& statement, const Params& params) {
    auto session = pool_.lease();
    try {
      return session->exec_prepared(statement, params);
    } catch (const PoolerDetected&) {
      return session->exec_prepared(statement, params);
    }
  }

  SessionPool<PgConnection>& pool_;
  PgStatement clock_, claim_, finish_, list_, reap_;
};

}  // namespace

std::unique_ptr<OccurrenceBackend> make_pg_occurrences(SessionPool<PgConnection>& pool, StatementIds& ids,
                                                       std::string_view schema, std::string_view prefix) {
  return std::make_unique<PgOccurrences>(pool, ids, schema, prefix);
}

}  // namespace dblock::detail

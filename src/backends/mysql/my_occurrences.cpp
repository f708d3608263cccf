#include "backends/mysql/my_occurrences.hpp"

#include <array>

#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

/// A lock grant (name, token) that still holds a live lease, for the record `o`.
constexpr std::string_view kLive = R"(EXISTS (SELECT 1 FROM `{prefix}locks` l
  WHERE l.name = o.name AND l.token = o.token AND l.expires_at > UTC_TIMESTAMP(6)))";

// The claim: INSERT ... SELECT inserts only while the caller's grant is live (as the fence sees it:
// its lease without the lock-delay, not revoked, not kept for a minimum hold); the primary key lets
// one claimer win. ON DUPLICATE KEY UPDATE assigns left to right, each assignment seeing the ones
// before it, so `owner` decides from the old row ({take}), and the columns after it follow the owner
// ({ours}: the caller's owner, a nonce per claim, is there only if this claim took the row, now or
// before its reply was lost); status goes last. {retry}: TRUE or FALSE, one statement each. A
// 'running' row with another token is abandoned: the caller's live exclusive grant on the name
// proves that lease ended. One with the caller's token is taken only by the same claim, never by a
// second claim of the same grant.
// Affected rows (no CLIENT_FOUND_ROWS): 1 inserted, 2 taken over, 0 refused.
constexpr std::string_view kClaim = R"(
INSERT INTO `{prefix}occurrences`
  (name, occurrence, owner, token, status, attempts, exit_code, claimed_at, finished_at, keep_until)
SELECT ?, ?, ?, ?, 'running', 1, NULL, UTC_TIMESTAMP(6), NULL, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND FROM DUAL
WHERE EXISTS (SELECT 1 FROM `{prefix}locks` l WHERE l.name = ? AND l.token = ?
              AND l.expires_at - INTERVAL (l.lock_delay_ms * 1000) MICROSECOND > UTC_TIMESTAMP(6)
              AND l.owner NOT LIKE '(revoked)%' AND l.owner NOT LIKE '(min-hold)%')
ON DUPLICATE KEY UPDATE
  owner       = IF({take}, VALUES(owner), owner),
  attempts    = IF({ours}, attempts + (token <> VALUES(token)), attempts),
  token       = IF({ours}, VALUES(token), token),
  exit_code   = IF({ours}, NULL, exit_code),
  finished_at = IF({ours}, NULL, finished_at),
  keep_until  = IF({ours}, GREATEST(keep_until, VALUES(keep_until)), keep_until),
  claimed_at  = IF({ours}, VALUES(claimed_at), claimed_at),
  status      = IF({ours}, 'running', status))";
constexpr std::string_view kTake =
    "((status = 'running' AND token = VALUES(token) AND owner = VALUES(owner)) OR ({retry} AND (status = 'failed' "
    "OR (status = 'running' AND token <> VALUES(token)))))";
constexpr std::string_view kOurs = "(owner = VALUES(owner))";

class MyOccurrences final : public OccurrenceBackend {
 public:
  MyOccurrences(SessionPool<MyConnection>& pool, StatementIds& ids, std::string_view prefix) : pool_(pool) {
    auto fill = [&](std::string_view sql, std::string_view retry = "FALSE") {
      auto shaped = detail::fill(sql, {{"{take}", kTake}, {"{ours}", kOurs}, {"{live}", kLive}});
      return detail::fill(shaped, {{"{prefix}", prefix}, {"{retry}", retry}});
    };
    clock_ = {ids, "database clock", "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) DIV 1000"};
    claim_ = {ids, "claim occurrence", fill(kClaim)};
    claim_retry_ = {ids, "claim occurrence", fill(kClaim, "TRUE")};
    finish_ = {ids, "finish occurrence", fill(R"(
UPDATE `{prefix}occurrences` SET status = IF(? = 0, 'succeeded', 'failed'), exit_code = ?, finished_at = UTC_TIMESTAMP(6)
WHERE name = ? AND occurrence = ? AND token = ? AND status = 'running')")};
    list_ = {ids, "list occurrences", fill(R"(
SELECT o.name, o.occurrence, o.owner, o.token, IF(o.status = 'running' AND NOT {live}, 'abandoned', o.status),
       o.attempts, o.exit_code, TIMESTAMPDIFF(MICROSECOND, o.claimed_at, UTC_TIMESTAMP(6)) DIV 1000
FROM `{prefix}occurrences` o WHERE ? = '' OR o.name = ?
ORDER BY o.name, o.occurrence)")};
    // A single-table DELETE (ORDER BY and LIMIT need one), which takes no alias before MariaDB 11.
    reap_ = {ids, "reap occurrences", fill(R"(
DELETE FROM `{prefix}occurrences`
WHERE keep_until <= UTC_TIMESTAMP(6) AND NOT (status = 'running' AND EXISTS (SELECT 1 FROM `{prefix}locks` l
  WHERE l.name = `{prefix}occurrences`.name AND l.token = `{prefix}occurrences`.token AND l.expires_at > UTC_TIMESTAMP(6)))
ORDER BY keep_until LIMIT ?)")};
  }

  std::int64_t clock_ms() override { return first_int64(pool_.lease()->query(clock_, {})).value_or(0); }

  bool claim(const OccurrenceClaimRef& claim) override {
    std::array<MyParam, 7> params{claim.name, claim.occurrence, claim.owner, claim.token, claim.keep.count() * 1000,
                                  claim.name, claim.token};
    return pool_.lease()->update(claim.retry_failed ? claim_retry_ : claim_, params) > 0;
  }

  bool finish(std::string_view name, std::string_view occurrence, std::int64_t token, int exit_code) override {
    std::array<MyParam, 5> params{std::int64_t{exit_code}, std::int64_t{exit_code}, name, occurrence, token};
    return pool_.lease()->update(finish_, params) > 0;
  }

  std::vector<OccurrenceInfo> list(std::string_view only_name) override {
    std::array<MyParam, 2> params{only_name, only_name};
    std::vector<OccurrenceInfo> rows;
    for (auto& row : pool_.lease()->query(list_, params)) {
      OccurrenceInfo info{row.str(0),
                          row.str(1),
                          row.str(2),
                          row.num(3),
                          occurrence_status_of(row.str(4)),
                          row.num(5),
                          std::nullopt,
                          std::chrono::milliseconds(row.num(7))};
      if (auto code = row.int64(6)) info.exit_code = static_cast<int>(*code);
      rows.push_back(std::move(info));
    }
    return rows;
  }

  std::size_t reap(std::size_t batch) override {
    std::array<MyParam, 1> params{static_cast<std::int64_t>(batch)};
    return static_cast<std::size_t>(pool_.lease()->update(reap_, params));
  }

 private:
  SessionPool<MyConnection>& pool_;
  MyStatement clock_, claim_, claim_retry_, finish_, list_, reap_;
};

}  // namespace

std::unique_ptr<OccurrenceBackend> make_my_occurrences(SessionPool<MyConnection>& pool, StatementIds& ids,
                                                       std::string_view prefix) {
  return std::make_unique<MyOccurrences>(pool, ids, prefix);
}

}  // namespace dblock::detail

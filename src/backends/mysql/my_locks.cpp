#include "backends/mysql/my_locks.hpp"

#include <array>

#include <fmt/format.h>

#include "backends/mysql/my_database.hpp"
#include "base/holder_kind.hpp"
#include "base/json.hpp"

namespace dblock::detail {

namespace {

/// acquire_many's parameter: [[name, owner, ttl_us, held_token, delay_ms], ...] (migration 0011).
std::string requests_json(std::span<const AcquireRequest> requests) {
  std::string json = "[";
  for (std::size_t i = 0; i < requests.size(); ++i)
    json += fmt::format("{}[{},{},{},{},{}]", i == 0 ? "" : ",", json_string(requests[i].name),
                        json_string(requests[i].owner), micros(requests[i].ttl), requests[i].held_token,
                        requests[i].lock_delay.count());
  return json + "]";
}

/// release_last_many's parameter: [[name, owner, token], ...].
std::string releases_json(std::span<const ReleaseRequest> releases) {
  std::string json = "[";
  for (std::size_t i = 0; i < releases.size(); ++i)
    json += fmt::format("{}[{},{},{}]", i == 0 ? "" : ",", json_string(releases[i].name),
                        json_string(releases[i].owner), releases[i].token);
  return json + "]";
}

class MyLocks final : public LockBackend {
 public:
  explicit MyLocks(MyDatabase& db) : db_(db) {}

  std::optional<Grant> try_acquire(std::string_view name, std::string_view owner, milliseconds ttl,
                                   std::int64_t held_token, milliseconds lock_delay) override {
    std::array<MyParam, 5> params{name, owner, micros(ttl), held_token, static_cast<std::int64_t>(lock_delay.count())};
    auto session = db_.pool.lease();
    try {
      return parse_grant(session->query(db_.sql.acquire, params));
    } catch (const LockWaitTimedOut&) {
      return std::nullopt;  // another transaction holds the row (a fence): nothing took effect, busy
    }
  }

  std::optional<std::int64_t> release(std::string_view name, std::string_view owner, std::int64_t token) override {
    std::array<MyParam, 3> params{name, owner, token};
    auto session = db_.pool.lease();
    return first_int64(session->query(db_.sql.release, params));
  }

  std::optional<std::int64_t> release_last(std::string_view name, std::string_view owner, std::int64_t token) override {
    std::array<MyParam, 3> params{name, owner, token};
    if (db_.pool.lease()->update(db_.sql.release_last, params) == 0) return std::nullopt;
    return 0;
  }

  /// A batch is one function call that loops over its names on the server. Galera certifies a
  /// batch's write set as a whole: a smaller one meets fewer conflicts.
  std::size_t max_batch() const noexcept override { return db_.galera ? kGaleraBatch : kBatch; }

  std::vector<std::optional<Grant>> try_acquire_many(std::span<const AcquireRequest> requests) override {
    auto json = requests_json(requests);
    std::array<MyParam, 1> params{json};
    return parse_positions_with_grants(combined_call(db_.sql.acquire_many, params), requests.size());
  }

  std::vector<bool> release_last_many(std::span<const ReleaseRequest> releases) override {
    auto json = releases_json(releases);
    std::array<MyParam, 1> params{json};
    return parse_positions(combined_call(db_.sql.release_last_many, params), releases.size());
  }

  Renewal renew(std::span<const HeldRef> held, std::chrono::steady_clock::time_point) override {
    try {
      return renew_together(held);
    } catch (const LockWaitTimedOut&) {
      // A row another transaction holds (a fence): each alone, so that the others are renewed now.
      Renewal renewal;
      for (std::size_t i = 0; i < held.size(); ++i) {
        std::array<MyParam, 4> params{micros(held[i].ttl), held[i].name, held[i].owner, held[i].token};
        try {
          // Affected rows count changed rows (no CLIENT_FOUND_ROWS): a lease already later is
          // unchanged, so 0 asks renewed_of whether the row is still live and the caller's.
          if (db_.pool.lease()->update(db_.sql.renew_one, params) > 0 || still_live(held.subspan(i, 1)))
            renewal.renewed.push_back(i);
        } catch (const LockWaitTimedOut&) {
          renewal.busy.push_back(i);
        }
      }
      return renewal;
    }
  }

  std::optional<milliseconds> lease_left(std::string_view name) override {
    std::array<MyParam, 1> params{name};
    auto rows = db_.pool.lease()->query(db_.sql.lease_left, params);
    if (rows.empty()) return std::nullopt;
    return milliseconds(rows.front().num(0));
  }

  bool force_release(std::string_view name) override {
    std::array<MyParam, 1> params{name};
    return db_.pool.lease()->update(db_.sql.force_release, params) > 0;
  }

  bool revoke(std::string_view name) override {
    std::array<MyParam, 1> params{name};
    return db_.pool.lease()->update(db_.sql.revoke, params) > 0;
  }

  void set_note(std::string_view name, std::string_view owner, std::int64_t token, std::string_view note) override {
    std::array<MyParam, 4> params{note, name, owner, token};
    db_.pool.lease()->update(db_.sql.set_note, params);
  }

  bool ask_release(std::string_view name) override {
    std::array<MyParam, 1> params{name};
    auto session = db_.pool.lease();
    return session->update(db_.sql.ask_release, params) > 0 || !session->query(db_.sql.asked_already, params).empty();
  }

  bool acknowledge_revoked(std::string_view name, std::string_view owner, std::int64_t token) override {
    std::array<MyParam, 3> params{name, owner, token};
    return db_.pool.lease()->update(db_.sql.acknowledge_revoked, params) > 0;
  }

  bool release_keeping(std::string_view name, std::string_view owner, std::int64_t token,
                       milliseconds min_hold) override {
    std::array<MyParam, 5> params{micros(min_hold), name, owner, token, micros(min_hold)};
    return db_.pool.lease()->update(db_.sql.release_keeping, params) > 0;
  }

  std::size_t reap(std::size_t batch) override {
    std::array<MyParam, 1> params{static_cast<std::int64_t>(batch)};
    auto session = db_.pool.lease();
    auto rows = session->update(db_.sql.reap, params);
    return static_cast<std::size_t>(rows + session->update(db_.sql.reap_members, params));
  }

  LockCensus census() override {
    auto row = db_.pool.lease()->query(db_.sql.census, {}).at(0);
    return LockCensus{row.num(0), row.num(1), milliseconds(row.num(2)), row.num(3)};
  }

  int schema_version() override {
    auto rows = db_.pool.lease()->query(db_.sql.schema_version, {});
    return static_cast<int>(first_int64(rows).value_or(0));
  }

  std::vector<LockInfo> list_rows(std::string_view only_name, std::size_t limit) override {
    std::array<MyParam, 5> params{only_name, only_name, only_name, only_name, static_cast<std::int64_t>(limit)};
    std::vector<LockInfo> locks;
    for (auto& row : db_.pool.lease()->query(db_.sql.list, params))
      locks.push_back(LockInfo{row.str(0), row.str(1), row.num(2), row.num(3), milliseconds(row.num(4)),
                               kind_from_text(row.str(5)), LockState::held, milliseconds(row.num(6)),
                               milliseconds(row.num(7)), row.str(8)});
    return locks;
  }

 private:
  /// The answer of a combined function ('' when nothing was granted or deleted). In autocommit the
  /// call is one transaction, rolled back whole on any error: a deadlock (1213), a lock-wait
  /// timeout (1205) or the order check's SIGNAL after some names were written (checked on 10.11).
  /// On Galera it goes through group_call's transaction, as the group functions do: autocommit
  /// calls of acquire_many aborted by replicated writes left a client without a reply in 2 runs of
  /// 2 (nine clients on three nodes, 400 batches each), the transaction form in none of 3.
  std::string combined_call(const MyStatement& statement, std::span<const MyParam> params) {
    auto rows = db_.galera ? db_.group_call(statement, params) : db_.pool.lease()->query(statement, params);
    return rows.empty() ? std::string() : rows.front().str(0);
  }

  /// One statement renews every lock whose grant was not asked to let go; affected rows says whether
  /// all were renewed, and only when some were not do renew_asked and renewed_of renew the asked
  /// ones and read which were renewed and asked.
  Renewal renew_together(std::span<const HeldRef> held) {
    auto json = held_json(held);
    std::array<MyParam, 1> params{json};
    auto session = db_.pool.lease();
    auto renewed = session->update(db_.sql.renew, params);
    Renewal renewal;
    if (renewed == held.size()) {
      for (std::size_t i = 0; i < held.size(); ++i) renewal.renewed.push_back(i);
      return renewal;
    }
    // Some were lost, already renewed later, or asked to let go (which `renew` leaves to this one).
    session->update(db_.sql.renew_asked, params);
    for (auto& row : session->query(db_.sql.renewed_of, params)) {
      auto position = static_cast<std::size_t>(row.num(0));
      renewal.renewed.push_back(position);
      if (row.num(1) != 0) renewal.asked.push_back(position);
    }
    return renewal;
  }

  bool still_live(std::span<const HeldRef> one) {
    auto json = held_json(one);
    std::array<MyParam, 1> params{json};
    return !db_.pool.lease()->query(db_.sql.renewed_of, params).empty();
  }

  static constexpr std::size_t kBatch = 32;
  static constexpr std::size_t kGaleraBatch = 8;

  MyDatabase& db_;
};

}  // namespace

std::unique_ptr<LockBackend> make_my_locks(MyDatabase& database) { return std::make_unique<MyLocks>(database); }

}  // namespace dblock::detail

#include "backends/postgres/pg_locks.hpp"

#include <algorithm>
#include <array>
#include <utility>

#include <fmt/format.h>

#include "backends/postgres/pg_database.hpp"
#include "base/holder_kind.hpp"

namespace dblock::detail {

namespace {

class Positions {
 public:
  explicit Positions(std::span<const std::string_view> names) {
    for (std::size_t i = 0; i < names.size(); ++i) by_name_.emplace_back(names[i], i);
    std::ranges::sort(by_name_);
  }
  [[nodiscard]] std::size_t of(std::string_view name) const {
    auto found = std::ranges::lower_bound(by_name_, std::pair{name, std::size_t{0}});
    if (found == by_name_.end() || found->first != name)
      throw DatabaseError("a combined statement returned a name it was not sent");
    return found->second;
  }

 private:
  std::vector<std::pair<std::string_view, std::size_t>> by_name_;
};

class PgLocks final : public LockBackend {
 public:
  explicit PgLocks(PgDatabase& database) : database_(database) {}

  std::optional<Grant> try_acquire(std::string_view name, std::string_view owner, milliseconds ttl,
                                   std::int64_t held_token, milliseconds lock_delay) override {
    std::array<std::string, 5> params{std::string(name), std::string(owner), std::to_string(ttl.count()),
                                      std::to_string(held_token), std::to_string(lock_delay.count())};
    auto session = database_.pool.lease();
    PgResult result;
    try {
      result = run_table_statement(*session, database_.sql.acquire, params);
    } catch (const LockWaitTimedOut&) {
      // The statement's lock_timeout: another transaction holds the row (a fence) or the name's
      // turn; nothing took effect, and a try answers what it found, busy.
      return std::nullopt;
    }
    if (PQntuples(result.get()) == 0) return std::nullopt;
    return Grant{to_int64(result.get(), 0, 0), to_int64(result.get(), 0, 1)};
  }

  std::optional<std::int64_t> release(std::string_view name, std::string_view owner, std::int64_t token) override {
    std::array<std::string, 3> params{std::string(name), std::string(owner), std::to_string(token)};
    auto session = database_.pool.lease();
    auto result = run_table_statement(*session, database_.sql.release, params);
    if (PQntuples(result.get()) == 0) return std::nullopt;
    return to_int64(result.get(), 0, 0);
  }

  std::optional<std::int64_t> release_last(std::string_view name, std::string_view owner, std::int64_t token) override {
    std::array<std::string, 3> params{std::string(name), std::string(owner), std::to_string(token)};
    if (PQntuples(run_table_statement(*database_.pool.lease(), database_.sql.release_last, params).get()) == 0)
      return std::nullopt;
    return 0;
  }

  // One advisory key per request, held to commit: 32 fits max_locks_per_transaction (64 by
  // default) with room for the release's notify keys.
  std::size_t max_batch() const noexcept override { return 32; }

  std::vector<std::optional<Grant>> try_acquire_many(std::span<const AcquireRequest> requests) override {
    if (requests.empty()) return {};
    std::vector<std::string_view> names, owners;
    std::string ttls = "{", held = "{", delays = "{";
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const char* comma = i == 0 ? "" : ",";
      names.push_back(requests[i].name);
      owners.push_back(requests[i].owner);
      ttls += fmt::format("{}{}", comma, requests[i].ttl.count());
      held += fmt::format("{}{}", comma, requests[i].held_token);
      delays += fmt::format("{}{}", comma, requests[i].lock_delay.count());
    }
    std::array<std::string, 5> params{pg_text_array(names), pg_text_array(owners), ttls + "}", held + "}",
                                      delays + "}"};
    auto result = run_table_statement(*database_.pool.lease(), database_.sql.acquire_many, params);
    std::vector<std::optional<Grant>> granted(requests.size());
    Positions positions(names);
    for (int row = 0; row < PQntuples(result.get()); ++row)
      granted[positions.of(text_of(result.get(), row, 0))] =
          Grant{to_int64(result.get(), row, 1), to_int64(result.get(), row, 2)};
    return granted;
  }

  std::vector<bool> release_last_many(std::span<const ReleaseRequest> requests) override {
    if (requests.empty()) return {};
    std::vector<std::string_view> names, owners;
    std::string tokens = "{";
    for (std::size_t i = 0; i < requests.size(); ++i) {
      names.push_back(requests[i].name);
      owners.push_back(requests[i].owner);
      tokens += fmt::format("{}{}", i == 0 ? "" : ",", requests[i].token);
    }
    std::array<std::string, 3> params{pg_text_array(names), pg_text_array(owners), tokens + "}"};
    auto result = run_table_statement(*database_.pool.lease(), database_.sql.release_last_many, params);
    std::vector<bool> released(requests.size(), false);
    Positions positions(names);
    for (int row = 0; row < PQntuples(result.get()); ++row)
      released[positions.of(text_of(result.get(), row, 0))] = true;
    return released;
  }

  Renewal renew(std::span<const HeldRef> held, std::chrono::steady_clock::time_point reply_by) override {
    return pg_renew(database_, database_.sql.renew, held, false, reply_by);
  }

  std::optional<milliseconds> lease_left(std::string_view name) override {
    std::array<std::string, 1> params{std::string(name)};
    auto result = run_table_statement(*database_.pool.lease(), database_.sql.lease_left, params);
    if (PQntuples(result.get()) == 0) return std::nullopt;
    return milliseconds(to_int64(result.get(), 0, 0));
  }

  bool force_release(std::string_view name) override {
    std::array<std::string, 1> params{std::string(name)};
    auto session = database_.pool.lease();
    auto result = run_table_statement(*session, database_.sql.force_release, params);
    return PQntuples(result.get()) > 0;
  }

  bool revoke(std::string_view name) override {
    std::array<std::string, 1> params{std::string(name)};
    return PQntuples(run_table_statement(*database_.pool.lease(), database_.sql.revoke, params).get()) > 0;
  }

  void set_note(std::string_view name, std::string_view owner, std::int64_t token, std::string_view note) override {
    std::array<std::string, 4> params{std::string(name), std::string(owner), std::to_string(token), std::string(note)};
    run_table_statement(*database_.pool.lease(), database_.sql.set_note, params);
  }

  bool ask_release(std::string_view name) override {
    std::array<std::string, 1> params{std::string(name)};
    return PQntuples(run_table_statement(*database_.pool.lease(), database_.sql.ask_release, params).get()) > 0;
  }

  bool acknowledge_revoked(std::string_view name, std::string_view owner, std::int64_t token) override {
    std::array<std::string, 3> params{std::string(name), std::string(owner), std::to_string(token)};
    return PQntuples(run_table_statement(*database_.pool.lease(), database_.sql.acknowledge_revoked, params).get()) > 0;
  }

  bool release_keeping(std::string_view name, std::string_view owner, std::int64_t token,
                       milliseconds min_hold) override {
    std::array<std::string, 4> params{std::string(name), std::string(owner), std::to_string(token),
                                      std::to_string(min_hold.count())};
    return PQntuples(run_table_statement(*database_.pool.lease(), database_.sql.release_keeping, params).get()) > 0;
  }

  std::size_t reap(std::size_t batch) override {
    std::array<std::string, 1> params{std::to_string(batch)};
    auto session = database_.pool.lease();
    auto result = run_table_statement(*session, database_.sql.reap, params);
    return static_cast<std::size_t>(to_int64(result.get(), 0, 0));
  }

  LockCensus census() override {
    auto result = run_table_statement(*database_.pool.lease(), database_.sql.census, std::span<const std::string>());
    return LockCensus{to_int64(result.get(), 0, 0), to_int64(result.get(), 0, 1),
                      milliseconds(to_int64(result.get(), 0, 2)), to_int64(result.get(), 0, 3)};
  }

  int schema_version() override {
    auto result = database_.pool.lease()->exec(database_.sql.schema_version);
    return static_cast<int>(to_int64(result.get(), 0, 0));
  }

  std::vector<LockInfo> list_rows(std::string_view only_name, std::size_t limit) override {
    std::array<std::string, 2> params{std::string(only_name), std::to_string(limit)};
    auto result = run_table_statement(*database_.pool.lease(), database_.sql.list, params);
    std::vector<LockInfo> rows;
    for (int row = 0; row < PQntuples(result.get()); ++row)
      rows.push_back(LockInfo{
          text_of(result.get(), row, 0), text_of(result.get(), row, 1), to_int64(result.get(), row, 2),
          to_int64(result.get(), row, 3), milliseconds(to_int64(result.get(), row, 4)),
          kind_from_text(text_of(result.get(), row, 5)), LockState::held, milliseconds(to_int64(result.get(), row, 6)),
          milliseconds(to_int64(result.get(), row, 7)), text_of(result.get(), row, 8)});
    return rows;
  }

 private:
  PgDatabase& database_;
};

}  // namespace

std::unique_ptr<LockBackend> make_pg_locks(PgDatabase& database) { return std::make_unique<PgLocks>(database); }

}  // namespace dblock::detail

// SQLite's lock role. Each operation binds its parameters to the session's prepared statement
// (its SqliteLockStatements part), runs it and reads the bound results.
#include "backends/sqlite/sqlite_locks.hpp"

#include <map>

#include <fmt/format.h>

#include "base/holder_kind.hpp"
#include "base/json.hpp"

namespace dblock::detail {

std::optional<Grant> SqliteLockStatements::try_acquire(std::string_view name, std::string_view owner,
                                                       std::chrono::milliseconds ttl, std::int64_t held_token,
                                                       std::chrono::milliseconds lock_delay) {
  name_ = name;
  owner_ = owner;
  number_ = ttl.count();
  held_token_ = held_token;
  delay_ = lock_delay.count();
  if (!execute_single(acquire_statement())) return std::nullopt;
  return Grant{result_a_, result_b_};
}

std::optional<std::int64_t> SqliteLockStatements::release(std::string_view name, std::string_view owner,
                                                          std::int64_t token) {
  name_ = name;
  owner_ = owner;
  number_ = token;
  // Delete-at-one and decrement are two statements: one IMMEDIATE transaction makes them atomic.
  auto transaction = begin_immediate();
  std::optional<std::int64_t> remaining;
  if (execute_single(release_at_one_statement()))
    remaining = 0;
  else if (execute_single(release_inner_statement()))
    remaining = result_a_;
  commit(transaction);
  return remaining;
}

std::optional<std::int64_t> SqliteLockStatements::release_last(std::string_view name, std::string_view owner,
                                                               std::int64_t token) {
  name_ = name;
  owner_ = owner;
  number_ = token;
  if (!execute_single(release_last_statement())) return std::nullopt;
  return 0;
}

std::vector<std::optional<Grant>> SqliteLockStatements::try_acquire_many(std::span<const AcquireRequest> requests) {
  std::vector<std::optional<Grant>> grants;
  grants.reserve(requests.size());
  auto transaction = begin_immediate();
  for (const auto& r : requests) grants.push_back(try_acquire(r.name, r.owner, r.ttl, r.held_token, r.lock_delay));
  commit(transaction);
  return grants;
}

std::vector<bool> SqliteLockStatements::release_last_many(std::span<const ReleaseRequest> requests) {
  std::vector<bool> deleted;
  deleted.reserve(requests.size());
  auto transaction = begin_immediate();
  for (const auto& r : requests) deleted.push_back(release_last(r.name, r.owner, r.token).has_value());
  commit(transaction);
  return deleted;
}

Renewal SqliteLockStatements::renew(std::span<const HeldRef> held, const std::string& held_json) {
  text_ = held_json;
  // SQLite's RETURNING cannot name the joined list: the row's owner and token say which it was.
  Renewal renewed;
  std::multimap<std::string_view, std::size_t> by_name;
  for (std::size_t i = 0; i < held.size(); ++i) by_name.emplace(held[i].name, i);
  auto position_of_row = [&] {
    auto [first, last] = by_name.equal_range(out_name_);
    for (auto it = first; it != last; ++it)
      if (held[it->second].owner == out_owner_ && held[it->second].token == result_a_) return it->second;
    return held.size();
  };
  if (renew_statement().execute(true)) {
    do {
      auto position = position_of_row();
      renewed.renewed.push_back(position);
      if (result_b_ != 0) renewed.asked.push_back(position);
    } while (renew_statement().fetch());
  }
  return renewed;
}

std::optional<std::chrono::milliseconds> SqliteLockStatements::lease_left(std::string_view name) {
  name_ = name;
  if (!execute_single(lease_left_statement())) return std::nullopt;
  return std::chrono::milliseconds(result_a_);
}

bool SqliteLockStatements::force_release(std::string_view name) {
  name_ = name;
  return execute_single(force_release_statement());
}

bool SqliteLockStatements::revoke(std::string_view name) {
  name_ = name;
  soci::statement statement = (session_.prepare << sql_.revoke, soci::use(name_, "name"), soci::into(out_name_));
  return execute_single(statement);
}

bool SqliteLockStatements::ask_release(std::string_view name) {
  name_ = name;
  soci::statement statement = (session_.prepare << sql_.ask_release, soci::use(name_, "name"), soci::into(out_name_));
  return execute_single(statement);
}

bool SqliteLockStatements::set_note(std::string_view name, std::string_view owner, std::int64_t token,
                                    std::string_view note) {
  name_ = name;
  owner_ = owner;
  number_ = token;
  text_ = note;
  return execute_single(set_note_statement());
}

bool SqliteLockStatements::acknowledge_revoked(std::string_view name, std::string_view owner, std::int64_t token) {
  name_ = name;
  owner_ = owner;
  number_ = token;
  soci::statement statement = (session_.prepare << sql_.acknowledge_revoked, soci::use(name_, "name"),
                               soci::use(owner_, "owner"), soci::use(number_, "token"), soci::into(out_name_));
  return execute_single(statement);
}

bool SqliteLockStatements::release_keeping(std::string_view name, std::string_view owner, std::int64_t token,
                                           std::chrono::milliseconds min_hold) {
  name_ = name;
  owner_ = owner;
  number_ = token;
  held_token_ = min_hold.count();  // a bound slot free in this statement
  soci::statement statement =
      (session_.prepare << sql_.release_keeping, soci::use(held_token_, "hold"), soci::use(name_, "name"),
       soci::use(owner_, "owner"), soci::use(number_, "token"), soci::use(held_token_, "hold2"), soci::into(out_name_));
  return execute_single(statement);
}

std::size_t SqliteLockStatements::reap(std::size_t batch) {
  number_ = static_cast<std::int64_t>(batch);
  std::size_t deleted = 0;
  for (auto* statement : {&reap_statement(), &reap_members_statement()})
    if (statement->execute(true)) {
      do ++deleted;
      while (statement->fetch());
    }
  return deleted;
}

LockCensus SqliteLockStatements::census() {
  execute_single(census_statement());
  return LockCensus{result_a_, result_b_, std::chrono::milliseconds(result_c_), result_d_};
}

std::vector<LockInfo> SqliteLockStatements::list(std::string_view only_name, std::size_t limit) {
  name_ = only_name;
  limit_ = static_cast<std::int64_t>(limit);
  std::vector<LockInfo> rows;
  if (list_statement().execute(true)) {
    do
      rows.push_back(LockInfo{out_name_, out_owner_, result_a_, result_b_, std::chrono::milliseconds(result_c_),
                              kind_from_text(out_kind_), LockState::held, std::chrono::milliseconds(delay_),
                              std::chrono::milliseconds(held_for_), out_note_});
    while (list_statement().fetch());
  }
  return rows;
}

int SqliteLockStatements::schema_version() {
  int version = 0;
  session_ << sql_.schema_version, soci::into(version);
  return version;
}

namespace {

class SqliteLocks final : public LockBackend {
  static constexpr std::size_t kBatch = 32;

 public:
  SqliteLocks(SessionPool<SqliteSession>& pool, bool combine) : pool_(pool), max_batch_(combine ? kBatch : 1) {}

  std::optional<Grant> try_acquire(std::string_view name, std::string_view owner, milliseconds ttl,
                                   std::int64_t held_token, milliseconds lock_delay) override {
    auto session = pool_.lease();
    return session->guarded_write("acquire",
                                  [&] { return of(*session).try_acquire(name, owner, ttl, held_token, lock_delay); });
  }

  std::optional<std::int64_t> release(std::string_view name, std::string_view owner, std::int64_t token) override {
    auto session = pool_.lease();
    return session->guarded_write("release", [&] { return of(*session).release(name, owner, token); });
  }

  std::optional<std::int64_t> release_last(std::string_view name, std::string_view owner, std::int64_t token) override {
    auto session = pool_.lease();
    return session->guarded_write("release", [&] { return of(*session).release_last(name, owner, token); });
  }

  // One writer per file: a batch is one IMMEDIATE transaction of single statements, so it saves
  // the commits and the writers' turns, not round trips. Only with queued writers: without them
  // the combined statements' writers collide in SQLite's sleeping busy handler (doc/performance.md,
  // "SQLite: writers take turns").
  std::size_t max_batch() const noexcept override { return max_batch_; }

  std::vector<std::optional<Grant>> try_acquire_many(std::span<const AcquireRequest> requests) override {
    auto session = pool_.lease();
    return session->guarded_write("acquire", [&] { return of(*session).try_acquire_many(requests); });
  }

  std::vector<bool> release_last_many(std::span<const ReleaseRequest> requests) override {
    auto session = pool_.lease();
    return session->guarded_write("release", [&] { return of(*session).release_last_many(requests); });
  }

  Renewal renew(std::span<const HeldRef> held, std::chrono::steady_clock::time_point) override {
    std::string json = "[";
    for (std::size_t i = 0; i < held.size(); ++i)
      json += fmt::format("{}[{},{},{},{}]", i == 0 ? "" : ",", json_string(held[i].name), json_string(held[i].owner),
                          held[i].token, held[i].ttl.count());
    json += "]";
    auto session = pool_.lease();
    return session->guarded_write("renew", [&] { return of(*session).renew(held, json); });
  }

  std::optional<milliseconds> lease_left(std::string_view name) override {
    auto session = pool_.lease();
    return session->guarded("reading a lease", [&] { return of(*session).lease_left(name); });
  }

  bool force_release(std::string_view name) override {
    auto session = pool_.lease();
    return session->guarded_write("force release", [&] { return of(*session).force_release(name); });
  }

  bool revoke(std::string_view name) override {
    auto session = pool_.lease();
    return session->guarded_write("revoke", [&] { return of(*session).revoke(name); });
  }

  void set_note(std::string_view name, std::string_view owner, std::int64_t token, std::string_view note) override {
    auto session = pool_.lease();
    session->guarded_write("write a holder's note", [&] { return of(*session).set_note(name, owner, token, note); });
  }

  bool ask_release(std::string_view name) override {
    auto session = pool_.lease();
    return session->guarded_write("ask a holder to let go", [&] { return of(*session).ask_release(name); });
  }

  bool acknowledge_revoked(std::string_view name, std::string_view owner, std::int64_t token) override {
    auto session = pool_.lease();
    return session->guarded_write("release", [&] { return of(*session).acknowledge_revoked(name, owner, token); });
  }

  bool release_keeping(std::string_view name, std::string_view owner, std::int64_t token,
                       milliseconds min_hold) override {
    auto session = pool_.lease();
    return session->guarded_write("release",
                                  [&] { return of(*session).release_keeping(name, owner, token, min_hold); });
  }

  std::size_t reap(std::size_t batch) override {
    auto session = pool_.lease();
    return session->guarded_write("reaping", [&] { return of(*session).reap(batch); });
  }

  LockCensus census() override {
    auto session = pool_.lease();
    return session->guarded("counting locks", [&] { return of(*session).census(); });
  }

  int schema_version() override {
    auto session = pool_.lease();
    return session->guarded("reading the schema version", [&] { return of(*session).schema_version(); });
  }

 private:
  static SqliteLockStatements& of(SqliteSession& session) { return session.part<SqliteLockStatements>(); }

  std::vector<LockInfo> list_rows(std::string_view only_name, std::size_t limit) override {
    auto session = pool_.lease();
    return session->guarded("listing locks", [&] { return of(*session).list(only_name, limit); });
  }

  SessionPool<SqliteSession>& pool_;
  std::size_t max_batch_;
};

}  // namespace

std::unique_ptr<LockBackend> make_sqlite_locks(SessionPool<SqliteSession>& pool, bool combine) {
  return std::make_unique<SqliteLocks>(pool, combine);
}

}  // namespace dblock::detail

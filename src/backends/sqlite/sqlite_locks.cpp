// SQLite's lock operations: each binds its parameters to the session's prepared statement, runs
// it and reads the bound results.
#include "backends/sqlite/sqlite_session.hpp"

#include <map>

#include "base/holder_kind.hpp"

namespace dblock::detail {

std::optional<Grant> SqliteSession::try_acquire(std::string_view name, std::string_view owner,
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

std::optional<std::int64_t> SqliteSession::release(std::string_view name, std::string_view owner, std::int64_t token) {
  name_ = name;
  owner_ = owner;
  number_ = token;
  // Delete-at-one and decrement are two statements: one IMMEDIATE transaction makes them atomic.
  begin_immediate_statement().execute(true);
  std::optional<std::int64_t> remaining;
  if (execute_single(release_at_one_statement())) remaining = 0;
  else if (execute_single(release_inner_statement())) remaining = result_a_;
  commit_statement().execute(true);
  return remaining;
}

std::optional<std::int64_t> SqliteSession::release_last(std::string_view name, std::string_view owner,
                                                       std::int64_t token) {
  name_ = name;
  owner_ = owner;
  number_ = token;
  if (!execute_single(release_last_statement())) return std::nullopt;
  return 0;
}

std::vector<std::size_t> SqliteSession::renew(std::span<const HeldRef> held, const std::string& held_json) {
  text_ = held_json;
  // SQLite's RETURNING cannot name the joined list: the row's owner and token say which it was.
  std::vector<std::size_t> renewed;
  std::multimap<std::string_view, std::size_t> by_name;
  for (std::size_t i = 0; i < held.size(); ++i) by_name.emplace(held[i].name, i);
  auto position_of_row = [&] {
    auto [first, last] = by_name.equal_range(out_name_);
    for (auto it = first; it != last; ++it)
      if (held[it->second].owner == out_owner_ && held[it->second].token == result_a_) return it->second;
    return held.size();
  };
  if (renew_statement().execute(true)) {
    do renewed.push_back(position_of_row());
    while (renew_statement().fetch());
  }
  return renewed;
}

std::optional<std::chrono::milliseconds> SqliteSession::lease_left(std::string_view name) {
  name_ = name;
  if (!execute_single(lease_left_statement())) return std::nullopt;
  return std::chrono::milliseconds(result_a_);
}

bool SqliteSession::force_release(std::string_view name) {
  name_ = name;
  return execute_single(force_release_statement());
}

bool SqliteSession::revoke(std::string_view name) {
  name_ = name;
  soci::statement statement = (session_.prepare << sql_.revoke, soci::use(name_, "name"), soci::into(out_name_));
  return execute_single(statement);
}

bool SqliteSession::acknowledge_revoked(std::string_view name, std::string_view owner, std::int64_t token) {
  name_ = name;
  owner_ = owner;
  number_ = token;
  soci::statement statement = (session_.prepare << sql_.acknowledge_revoked, soci::use(name_, "name"),
                               soci::use(owner_, "owner"), soci::use(number_, "token"), soci::into(out_name_));
  return execute_single(statement);
}

bool SqliteSession::release_keeping(std::string_view name, std::string_view owner, std::int64_t token,
                                    std::chrono::milliseconds min_hold) {
  name_ = name;
  owner_ = owner;
  number_ = token;
  held_token_ = min_hold.count();  // a bound slot free in this statement
  soci::statement statement = (session_.prepare << sql_.release_keeping, soci::use(held_token_, "hold"),
                               soci::use(name_, "name"), soci::use(owner_, "owner"), soci::use(number_, "token"),
                               soci::use(held_token_, "hold2"), soci::into(out_name_));
  return execute_single(statement);
}

std::size_t SqliteSession::reap(std::size_t batch) {
  number_ = static_cast<std::int64_t>(batch);
  std::size_t deleted = 0;
  for (auto* statement : {&reap_statement(), &reap_members_statement()})
    if (statement->execute(true)) {
      do ++deleted;
      while (statement->fetch());
    }
  return deleted;
}

LockCensus SqliteSession::census() {
  execute_single(census_statement());
  return LockCensus{result_a_, result_b_, std::chrono::milliseconds(result_c_)};
}

std::vector<LockInfo> SqliteSession::list(std::string_view only_name, std::size_t limit) {
  name_ = only_name;
  limit_ = static_cast<std::int64_t>(limit);
  std::vector<LockInfo> rows;
  if (list_statement().execute(true)) {
    do
      rows.push_back(LockInfo{out_name_, out_owner_, result_a_, result_b_, std::chrono::milliseconds(result_c_),
                              kind_from_text(out_kind_), LockState::held, std::chrono::milliseconds(delay_),
                              std::chrono::milliseconds(held_for_)});
    while (list_statement().fetch());
  }
  return rows;
}

}  // namespace dblock::detail

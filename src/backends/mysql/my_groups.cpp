#include "backends/mysql/my_groups.hpp"

#include <array>
#include <ranges>

#include "backends/mysql/my_database.hpp"
#include "base/holder_kind.hpp"

namespace dblock::detail {

namespace {

class MyGroups final : public GroupBackend {
 public:
  explicit MyGroups(MyDatabase& db) : db_(db) {}

  std::optional<Grant> try_acquire_member(std::string_view name, std::string_view owner, HolderKind kind,
                                          std::int64_t capacity, milliseconds ttl, std::int64_t held_token) override {
    std::array<MyParam, 6> params{name, owner, kind_text(kind), capacity, micros(ttl), held_token};
    return parse_grant(db_.group_call(db_.sql.acquire_member, params));
  }

  std::optional<std::int64_t> release_member(std::string_view name, std::string_view owner, HolderKind kind,
                                             std::int64_t token) override {
    std::array<MyParam, 4> params{name, owner, kind_text(kind), token};
    auto left_and_freed = parse_grant(db_.group_call(db_.sql.release_member, params));  // "left freed"
    if (!left_and_freed) return std::nullopt;
    return left_and_freed->count;
  }

  Renewal renew_members(std::span<const HeldRef> held, std::chrono::steady_clock::time_point) override {
    auto json = held_json(held, true);
    std::array<MyParam, 1> params{json};
    auto rows = db_.group_call(db_.sql.renew_members, params);
    Renewal renewal;
    if (rows.empty() || !rows.front().text(0)) return renewal;
    // Migration 0016: -(position + 1) for a membership whose group's row another transaction held.
    for (auto part : std::views::split(std::string_view(*rows.front().text(0)), ',')) {
      if (part.empty()) continue;
      auto position = std::stoll(std::string(part.begin(), part.end()));
      if (position >= 0)
        renewal.renewed.push_back(static_cast<std::size_t>(position));
      else
        renewal.busy.push_back(static_cast<std::size_t>(-position - 1));
    }
    return renewal;
  }

  std::optional<milliseconds> lease_left_marking_writer(std::string_view name, std::string_view owner,
                                                        milliseconds mark_for, bool& marked) override {
    marked = false;
    std::array<MyParam, 1> params{name};
    auto session = db_.pool.lease();
    auto rows = session->query(db_.sql.lease_left_of_readers, params);
    if (rows.empty()) return std::nullopt;
    milliseconds left(rows.front().num(0));
    if (rows.front().num(1) != 0 && left.count() > 0) {
      std::array<MyParam, 3> mark{name, owner, micros(mark_for)};
      session->update(db_.sql.mark_writer, mark);
      marked = true;
    }
    return left;
  }

  std::optional<milliseconds> first_lease_end(std::string_view name) override {
    std::array<MyParam, 1> params{name};
    auto rows = db_.pool.lease()->query(db_.sql.first_lease_end, params);
    if (rows.empty()) return std::nullopt;
    return milliseconds(rows.front().num(0));
  }

  void unmark_writer(std::string_view name, std::string_view owner) override {
    std::array<MyParam, 2> params{name, owner};
    db_.pool.lease()->update(db_.sql.unmark_writer, params);
  }

 private:
  MyDatabase& db_;
};

}  // namespace

std::unique_ptr<GroupBackend> make_my_groups(MyDatabase& database) { return std::make_unique<MyGroups>(database); }

}  // namespace dblock::detail

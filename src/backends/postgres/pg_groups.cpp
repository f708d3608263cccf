#include "backends/postgres/pg_groups.hpp"

#include <array>

#include "backends/postgres/pg_database.hpp"
#include "base/holder_kind.hpp"

namespace dblock::detail {

namespace {

class PgGroups final : public GroupBackend {
 public:
  explicit PgGroups(PgDatabase& database) : database_(database) {}

  std::optional<Grant> try_acquire_member(std::string_view name, std::string_view owner, HolderKind kind,
                                          std::int64_t capacity, milliseconds ttl, std::int64_t held_token) override {
    std::array<std::string, 6> params{
        std::string(name),        std::string(owner),          std::string(kind_text(kind)),
        std::to_string(capacity), std::to_string(ttl.count()), std::to_string(held_token)};
    auto result = run_table_statement(*database_.pool.lease(), database_.sql.acquire_member, params);
    if (PQntuples(result.get()) == 0) return std::nullopt;
    return Grant{to_int64(result.get(), 0, 0), to_int64(result.get(), 0, 1)};
  }

  std::optional<std::int64_t> release_member(std::string_view name, std::string_view owner, HolderKind kind,
                                             std::int64_t token) override {
    std::array<std::string, 4> params{std::string(name), std::string(owner), std::string(kind_text(kind)),
                                      std::to_string(token)};
    auto result = run_table_statement(*database_.pool.lease(), database_.sql.release_member, params);
    if (PQntuples(result.get()) == 0) return std::nullopt;
    return to_int64(result.get(), 0, 0);
  }

  Renewal renew_members(std::span<const HeldRef> held, std::chrono::steady_clock::time_point reply_by) override {
    return pg_renew(database_, database_.sql.renew_members, held, true, reply_by);
  }

  std::optional<milliseconds> lease_left_marking_writer(std::string_view name, std::string_view owner,
                                                        milliseconds mark_for, bool& marked) override {
    std::array<std::string, 3> params{std::string(name), std::string(owner), std::to_string(mark_for.count())};
    auto result = run_table_statement(*database_.pool.lease(), database_.sql.lease_left_marking_writer, params);
    marked = PQntuples(result.get()) > 0 && to_int64(result.get(), 0, 1) > 0;
    if (PQntuples(result.get()) == 0) return std::nullopt;
    return milliseconds(to_int64(result.get(), 0, 0));
  }

  std::optional<milliseconds> first_lease_end(std::string_view name) override {
    std::array<std::string, 1> params{std::string(name)};
    auto result = run_table_statement(*database_.pool.lease(), database_.sql.first_lease_end, params);
    if (PQntuples(result.get()) == 0) return std::nullopt;
    return milliseconds(to_int64(result.get(), 0, 0));
  }

  void unmark_writer(std::string_view name, std::string_view owner) override {
    std::array<std::string, 2> params{std::string(name), std::string(owner)};
    run_table_statement(*database_.pool.lease(), database_.sql.unmark_writer, params);
  }

 private:
  PgDatabase& database_;
};

}  // namespace

std::unique_ptr<GroupBackend> make_pg_groups(PgDatabase& database) { return std::make_unique<PgGroups>(database); }

}  // namespace dblock::detail

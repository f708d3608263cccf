#include "backends/postgres/pg_queue.hpp"

#include <array>
#include <string>
#include <vector>

#include "backends/postgres/pg_database.hpp"
#include "base/holder_kind.hpp"

namespace dblock::detail {

namespace {

class PgQueue final : public QueueBackend {
 public:
  explicit PgQueue(PgDatabase& database) : database_(database) {}

  Turn take_turn(std::string_view name, std::string_view owner, milliseconds ttl, milliseconds waiter_ttl,
                 std::int64_t seq) override {
    std::array<std::string, 5> params{std::string(name), std::string(owner), std::to_string(ttl.count()),
                                      std::to_string(waiter_ttl.count()), std::to_string(seq)};
    auto result = run_table_statement(*database_.pool.lease(), database_.sql.take_turn, params);
    Turn turn;
    if (PQntuples(result.get()) == 0) return turn;  // gone, not granted
    turn.seq = to_int64(result.get(), 0, 0);
    auto count = to_int64(result.get(), 0, 1);
    if (count > 0) turn.grant = Grant{count, to_int64(result.get(), 0, 2)};
    turn.left = milliseconds(to_int64(result.get(), 0, 3));
    return turn;
  }

  WaiterLook look(std::string_view name, std::string_view owner, std::int64_t seq) override {
    std::array<std::string, 3> params{std::string(name), std::string(owner), std::to_string(seq)};
    auto result = run_table_statement(*database_.pool.lease(), database_.sql.look, params);
    WaiterLook look;
    look.queued = text_of(result.get(), 0, 0) == "t";
    auto count = to_int64(result.get(), 0, 1);
    if (count > 0) look.grant = Grant{count, to_int64(result.get(), 0, 2)};
    look.grant_left = milliseconds(to_int64(result.get(), 0, 3));
    look.holder_left = milliseconds(to_int64(result.get(), 0, 4));
    return look;
  }

  bool leave(std::string_view name, std::string_view owner, std::int64_t seq) override {
    std::array<std::string, 3> params{std::string(name), std::string(owner), std::to_string(seq)};
    return PQntuples(run_table_statement(*database_.pool.lease(), database_.sql.leave, params).get()) > 0;
  }

  std::optional<std::int64_t> release_handing_off(std::string_view name, std::string_view owner, std::int64_t token,
                                                  std::string_view successor) override {
    std::array<std::string, 4> params{std::string(name), std::string(owner), std::to_string(token),
                                      std::string(successor)};
    if (PQntuples(run_table_statement(*database_.pool.lease(), database_.sql.release_granting, params).get()) == 0)
      return std::nullopt;
    return 0;
  }

  std::size_t reap_waiters(std::size_t batch) override {
    std::array<std::string, 1> params{std::to_string(batch)};
    auto result = run_table_statement(*database_.pool.lease(), database_.sql.reap_waiters, params);
    return static_cast<std::size_t>(to_int64(result.get(), 0, 0));
  }

  std::size_t waiter_rows(std::string_view name) override {
    std::array<std::string, 1> params{std::string(name)};
    auto result = run_table_statement(*database_.pool.lease(), database_.sql.waiter_rows, params);
    return static_cast<std::size_t>(to_int64(result.get(), 0, 0));
  }

  std::int64_t place(std::string_view name, std::int64_t seq) override {
    std::array<std::string, 2> params{std::string(name), std::to_string(seq)};
    auto result = run_table_statement(*database_.pool.lease(), database_.sql.place, params);
    return to_int64(result.get(), 0, 0);
  }

  std::vector<WaiterInfo> list_waiters(std::size_t limit) override {
    std::array<std::string, 1> params{std::to_string(limit)};
    auto result = run_table_statement(*database_.pool.lease(), database_.sql.list_waiters, params);
    std::vector<WaiterInfo> waiters;
    for (int row = 0; row < PQntuples(result.get()); ++row)
      waiters.push_back(WaiterInfo{text_of(result.get(), row, 0), text_of(result.get(), row, 1),
                                   kind_from_text(text_of(result.get(), row, 2)), to_int64(result.get(), row, 3),
                                   milliseconds(to_int64(result.get(), row, 4))});
    return waiters;
  }

  std::vector<WaitEdge> wait_edges(std::size_t limit) override {
    std::array<std::string, 1> params{std::to_string(limit)};
    auto result = run_table_statement(*database_.pool.lease(), database_.sql.wait_edges, params);
    std::vector<WaitEdge> edges;
    for (int row = 0; row < PQntuples(result.get()); ++row)
      edges.push_back(WaitEdge{text_of(result.get(), row, 0), text_of(result.get(), row, 1),
                               text_of(result.get(), row, 2), to_int64(result.get(), row, 3)});
    return edges;
  }

 private:
  PgDatabase& database_;
};

}  // namespace

std::unique_ptr<QueueBackend> make_pg_queue(PgDatabase& database) { return std::make_unique<PgQueue>(database); }

}  // namespace dblock::detail

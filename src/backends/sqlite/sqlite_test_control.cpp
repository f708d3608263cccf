// SOCI's sqlite3 header wraps <sqlite3.h>: included first, through the session's header.
#include "backends/sqlite/sqlite_test_control.hpp"

#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

class SqliteTestControl final : public TestControlBackend {
 public:
  SqliteTestControl(SessionPool<SqliteSession>& pool, std::string_view prefix, std::string_view clock) : pool_(pool) {
    auto fill = [&](std::string_view sql) { return detail::fill(sql, {{"{prefix}", prefix}, {"{now}", clock}}); };
    // A live exclusive holder: a lease (expires_at less the lock-delay) not ended, an owner that is
    // no marker ('(revoked)...', '(min-hold)...', a group's '(permits)' or '(readers)').
    live_holder_ = fill(R"(
SELECT token, lock_delay_ms FROM "{prefix}locks"
WHERE name = :name AND substr(owner, 1, 1) <> '(' AND expires_at - lock_delay_ms > {now})");
    // The lease ends now; the name stays unavailable until the row's expiry, as a lock-delay would.
    end_lease_ =
        fill(R"(UPDATE "{prefix}locks" SET lock_delay_ms = expires_at - {now} WHERE name = :name AND token = :token)");
    free_after_ = fill(R"(
UPDATE "{prefix}locks" SET expires_at = {now} + :delay, lock_delay_ms = :delay2
WHERE name = :name AND token = :token AND substr(owner, 1, 1) <> '(' AND expires_at - lock_delay_ms <= {now}
RETURNING name)");
  }

  std::optional<EndedLease> end_lease(std::string_view name) override {
    auto session = pool_.lease();
    return session->guarded_write("testing: ending a lease", [&]() -> std::optional<EndedLease> {
      auto& sql = session->session();
      std::string name_text(name);
      long long token = 0, delay = 0;
      sql << "BEGIN IMMEDIATE";
      RollbackUnlessCommitted rollback(sql);
      sql << live_holder_, soci::use(name_text, "name"), soci::into(token), soci::into(delay);
      if (!sql.got_data()) return std::nullopt;
      sql << end_lease_, soci::use(name_text, "name"), soci::use(token, "token");
      sql << "COMMIT";
      rollback.committed();
      return EndedLease{token, std::chrono::milliseconds(delay)};
    });
  }

  bool free_after(std::string_view name, std::int64_t token, std::chrono::milliseconds lock_delay) override {
    auto session = pool_.lease();
    return session->guarded_write("testing: freeing a name", [&] {
      std::string name_text(name), returned;
      long long token_value = token, delay = lock_delay.count();
      soci::statement statement =
          (session->session().prepare << free_after_, soci::use(delay, "delay"), soci::use(delay, "delay2"),
           soci::use(name_text, "name"), soci::use(token_value, "token"), soci::into(returned));
      return execute_single(statement);
    });
  }

 private:
  SessionPool<SqliteSession>& pool_;
  std::string live_holder_, end_lease_, free_after_;
};

}  // namespace

std::unique_ptr<TestControlBackend> make_sqlite_test_control(SessionPool<SqliteSession>& pool, std::string_view prefix,
                                                             std::string_view clock) {
  return std::make_unique<SqliteTestControl>(pool, prefix, clock);
}

}  // namespace dblock::detail
